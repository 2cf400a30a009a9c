"""Exponential histograms as an opt-in: over OTLP to a real gRPC receiver on 127.0.0.1 the
histograms arrive as exponential histograms, while a real Prometheus 2.x server scraping the
same run beside it still reads explicit buckets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import rlmetrics
from rlmetrics.exporters.otlp import EXPONENTIAL_HISTOGRAM
from rlmetrics.testing import OtlpReceiver

from ._peers import (
    HISTOGRAM,
    INTERVAL_S,
    PrometheusServer,
    declare_test_series,
    record_test_series,
)

ENV = "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION"
#: record_test_series' batch times.
BATCH_TIMES = (0.05, 0.5, 0.7, 20.0)

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def _arrived(kind: str) -> Callable[[OtlpReceiver], bool]:
    def arrived(receiver: OtlpReceiver) -> bool:
        point = receiver.find(HISTOGRAM, worker="w0")
        return point is not None and point.kind == kind and point.count == len(BATCH_TIMES)

    return arrived


def _assert_exponential(point: Any) -> None:
    assert point.kind == "exponential_histogram"
    assert (point.unit, point.count) == ("s", len(BATCH_TIMES))
    assert point.sum == pytest.approx(sum(BATCH_TIMES))
    assert point.zero_count == 0
    assert sum(point.positive_bucket_counts) == len(BATCH_TIMES)
    assert point.scale <= 20  # the SDK's default max_scale
    # Every value lies in a filled bucket i = offset + position: (base**i, base**(i+1)].
    base = 2.0 ** (2.0**-point.scale)
    filled = [
        (base ** (point.positive_offset + i), base ** (point.positive_offset + i + 1))
        for i, n in enumerate(point.positive_bucket_counts)
        if n
    ]
    for value in BATCH_TIMES:
        assert any(
            low < value * (1 + 1e-9) and value <= high * (1 + 1e-9) for low, high in filled
        ), f"{value} is in no filled bucket"


def test_the_standard_variable_makes_otlp_exponential_and_prometheus_keeps_buckets(
    otlp_receiver: OtlpReceiver,
    prometheus_server: Callable[[tuple[str, int]], PrometheusServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, EXPONENTIAL_HISTOGRAM)
    declare_test_series()
    with rlmetrics.start(
        "exponential-test",
        run_id="run-exp-1",
        exporters=("otlp", "prometheus"),
        otlp_endpoint=otlp_receiver.endpoint,
        prometheus_port=0,
        export_interval_s=INTERVAL_S,
        traces=False,
    ) as handle:
        record_test_series()
        otlp_receiver.wait_for(_arrived("exponential_histogram"), what="an exponential histogram")
        point = otlp_receiver.find(HISTOGRAM, worker="w0")
        _assert_exponential(point)
        assert not [p for p in otlp_receiver.points() if p.kind == "histogram"]

        # The Prometheus reader beside it: explicit buckets, the spec's, read by Prometheus 2.x.
        address = handle.prometheus_address
        assert address is not None
        server = prometheus_server(address)
        for expr, value in (
            ('rl_test_batch_duration_seconds_bucket{worker="w0",le="1.0"}', 3),
            ('rl_test_batch_duration_seconds_bucket{worker="w0",le="+Inf"}', 4),
            ('rl_test_batch_duration_seconds_count{worker="w0"}', 4),
        ):
            server.wait_for(expr, lambda r, v=value: len(r) == 1 and float(r[0]["value"][1]) == v)
        assert server.metadata()["rl_test_batch_duration_seconds"]["type"] == "histogram"


def test_the_exporter_option_chooses_without_the_variable(otlp_receiver: OtlpReceiver) -> None:
    declare_test_series()
    with rlmetrics.start(
        "exponential-test",
        exporters={"otlp": {"histogram_aggregation": EXPONENTIAL_HISTOGRAM}},
        otlp_endpoint=otlp_receiver.endpoint,
        export_interval_s=INTERVAL_S,
        traces=False,
    ):
        record_test_series()
        otlp_receiver.wait_for(_arrived("exponential_histogram"), what="an exponential histogram")
    _assert_exponential(otlp_receiver.find(HISTOGRAM, worker="w0"))


def test_the_option_wins_over_the_variable_and_explicit_keeps_the_spec_buckets(
    otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, EXPONENTIAL_HISTOGRAM)
    declare_test_series()
    with rlmetrics.start(
        "exponential-test",
        exporters={"otlp": {"histogram_aggregation": "explicit_bucket_histogram"}},
        otlp_endpoint=otlp_receiver.endpoint,
        export_interval_s=INTERVAL_S,
        traces=False,
    ):
        record_test_series()
        otlp_receiver.wait_for(_arrived("histogram"), what="an explicit histogram")
    point = otlp_receiver.find(HISTOGRAM, worker="w0")
    assert point is not None
    assert point.bounds == (0.1, 1.0, 10.0)  # the spec's buckets, not the SDK's defaults
    assert point.bucket_counts == (1, 2, 0, 1)


def test_by_default_histograms_stay_explicit(otlp_receiver: OtlpReceiver) -> None:
    declare_test_series()
    with rlmetrics.start(
        "exponential-test",
        exporters=("otlp",),
        otlp_endpoint=otlp_receiver.endpoint,
        export_interval_s=INTERVAL_S,
        traces=False,
    ):
        record_test_series()
        otlp_receiver.wait_for(_arrived("histogram"), what="an explicit histogram")
    assert not [p for p in otlp_receiver.points() if p.kind == "exponential_histogram"]


def test_an_unknown_aggregation_fails_start_and_names_the_choices() -> None:
    with pytest.raises(ValueError, match="base2_exponential_bucket_histogram"):
        rlmetrics.start(
            "exponential-test",
            exporters={"otlp": {"histogram_aggregation": "exponential"}},
            otlp_endpoint="127.0.0.1:1",
            traces=False,
        )
    assert not rlmetrics.is_exporting()


@pytest.mark.parametrize("named", ["otlp", "otlp_http"])
def test_the_option_holds_over_http_too(named: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: with OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf, the otlp exporter's
    histogram_aggregation option was dropped without a word (explicit buckets arrived), and
    the otlp_http exporter took no such option."""
    from rlmetrics.testing import OtlpHttpReceiver

    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    monkeypatch.delenv(ENV, raising=False)
    if named == "otlp":
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    receiver = OtlpHttpReceiver().start()
    try:
        declare_test_series()
        with rlmetrics.start(
            "exponential-test",
            exporters={named: {"histogram_aggregation": EXPONENTIAL_HISTOGRAM}},
            otlp_endpoint=receiver.endpoint,
            export_interval_s=INTERVAL_S,
            traces=False,
        ):
            record_test_series()
            receiver.wait_for(
                lambda r: (
                    (p := r.find(HISTOGRAM, worker="w0")) is not None
                    and p.count == len(BATCH_TIMES)
                ),
                what="the histogram",
            )
        _assert_exponential(receiver.find(HISTOGRAM, worker="w0"))
    finally:
        receiver.stop()
