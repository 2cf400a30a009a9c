"""rlmetrics' OTLP gRPC exporter against a real gRPC metrics receiver on 127.0.0.1."""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics.exporters.otlp import (
    REFUSAL_ADVICE,
    credentials_advice,
    export_advice,
    overloaded_advice,
)
from rlmetrics.testing import OtlpHttpReceiver, OtlpReceiver
from rlmetrics.testing.peers import flatten_request

from ._peers import (
    BUCKETS,
    COUNTER,
    GAUGE,
    GROUP,
    HISTOGRAM,
    INTERVAL_S,
    UP_DOWN,
    certificate_for_localhost,
    declare_test_series,
    record_test_series,
)

#: AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE in opentelemetry.proto.metrics.v1
CUMULATIVE = 2

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def _all_arrived(receiver: OtlpReceiver, scale: int = 1) -> bool:
    """Whether the latest export carries every value ``record_test_series(scale)`` made."""
    hist = receiver.find(HISTOGRAM, worker="w0")
    return (
        getattr(receiver.find(GAUGE, **{"rl.phase": "train"}), "value", None) == 1.5 * scale
        and getattr(receiver.find(COUNTER, **{"gen_ai.token.type": "output"}), "value", None)
        == 40 * scale
        and getattr(receiver.find(UP_DOWN), "value", None) == 3 * scale
        and hist is not None
        and hist.count == 4
    )


def test_every_kind_arrives_with_name_unit_type_attributes_values_and_resource(
    otlp_receiver: OtlpReceiver,
) -> None:
    declare_test_series()
    with rlmetrics.start(
        "exporters-test-service",
        run_id="run-otlp-1",
        service_version="9.9.9",
        resource={"deployment.environment": "test"},
        exporters=("otlp",),
        otlp_endpoint=otlp_receiver.endpoint,
        export_interval_s=INTERVAL_S,
    ) as handle:
        record_test_series()
        otlp_receiver.wait_for(_all_arrived, what="every recorded value")

    gauge_train = otlp_receiver.find(GAUGE, **{"rl.phase": "train"})
    gauge_eval = otlp_receiver.find(GAUGE, **{"rl.phase": "eval"})
    assert gauge_train is not None and gauge_eval is not None
    assert (gauge_train.kind, gauge_train.unit, gauge_train.value) == ("gauge", "s", 1.5)
    assert gauge_eval.value == 0.25
    assert gauge_train.description == "Wall clock of one step"

    tokens_in = otlp_receiver.find(COUNTER, **{"gen_ai.token.type": "input"})
    tokens_out = otlp_receiver.find(COUNTER, **{"gen_ai.token.type": "output"})
    assert tokens_in is not None and tokens_out is not None
    assert (tokens_in.kind, tokens_in.monotonic, tokens_in.unit) == ("sum", True, "{token}")
    assert tokens_in.temporality == CUMULATIVE
    assert (tokens_in.value, tokens_out.value) == (100, 40)

    in_flight = otlp_receiver.find(UP_DOWN)
    assert in_flight is not None
    assert (in_flight.kind, in_flight.monotonic, in_flight.unit) == ("sum", False, "{request}")
    assert in_flight.attributes == {}
    assert in_flight.value == 3

    hist = otlp_receiver.find(HISTOGRAM, worker="w0")
    assert hist is not None
    assert (hist.kind, hist.unit, hist.temporality) == ("histogram", "s", CUMULATIVE)
    assert hist.bounds == BUCKETS
    assert hist.bucket_counts == (1, 2, 0, 1)
    assert hist.count == 4
    assert hist.sum == pytest.approx(21.25)

    # Every point of the run carries the run's resource, and comes from rlmetrics' scope.
    points = otlp_receiver.points()
    assert points
    for point in points:
        assert point.resource["service.name"] == "exporters-test-service"
        assert point.resource["rlmetrics.run.id"] == "run-otlp-1" == handle.run_id
        assert point.resource["service.version"] == "9.9.9"
        assert point.resource["deployment.environment"] == "test"
        assert point.scope == "rlmetrics"
    # Only declared series were exported, and only the attribute sets recorded.
    assert {p.name for p in points if p.name.startswith("rl.test.")} == {
        GAUGE,
        COUNTER,
        UP_DOWN,
        HISTOGRAM,
    }
    assert {frozenset(p.attributes.items()) for p in points if p.name == GAUGE} == {
        frozenset({("rl.phase", "train")}),
        frozenset({("rl.phase", "eval")}),
    }


def test_later_recordings_and_a_retracted_gauge_reach_the_receiver(
    otlp_receiver: OtlpReceiver,
) -> None:
    declare_test_series()
    with rlmetrics.start(
        run_id="run-otlp-2",
        exporters=("otlp",),
        otlp_endpoint=otlp_receiver.endpoint,
        export_interval_s=INTERVAL_S,
    ) as handle:
        record_test_series()
        otlp_receiver.wait_for(_all_arrived, what="the first round")
        record_test_series()  # cumulative: counters double, gauges keep their last value
        rlmetrics.retract("exporters-test", "step_time", {"rl.phase": "eval"})
        handle.force_flush(timeout_s=5)

        def second_round(receiver: OtlpReceiver) -> bool:
            last = receiver.requests[-1] if receiver.requests else None
            if last is None:
                return False
            latest = {(p.name, frozenset(p.attributes.items())): p for p in flatten_request(last)}
            out = latest.get((COUNTER, frozenset({("gen_ai.token.type", "output")})))
            return (
                out is not None
                and out.value == 80
                and (GAUGE, frozenset({("rl.phase", "eval")})) not in latest
            )

        otlp_receiver.wait_for(second_round, what="the second round without the retracted gauge")
    assert otlp_receiver.find(UP_DOWN).value == 6  # type: ignore[union-attr]
    assert otlp_receiver.find(HISTOGRAM, worker="w0").count == 8  # type: ignore[union-attr]


def test_otlp_and_prometheus_side_by_side_export_the_same_run(
    otlp_receiver: OtlpReceiver,
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    declare_test_series()
    with rlmetrics.start(
        "side-by-side",
        run_id="run-both-1",
        exporters=("otlp", "prometheus"),
        otlp_endpoint=otlp_receiver.endpoint,
        prometheus_port=0,
        export_interval_s=INTERVAL_S,
    ) as handle:
        record_test_series()
        otlp_receiver.wait_for(_all_arrived, what="every recorded value over OTLP")
        address = handle.prometheus_address
        assert address is not None and address[0] == "127.0.0.1" and address[1] > 0
        with urllib.request.urlopen(f"http://{address[0]}:{address[1]}/metrics", timeout=5) as r:
            exposition = r.read().decode()

    samples = {
        (
            s.name,
            frozenset((k, v) for k, v in s.labels.items() if not k.startswith("otel_scope")),
        ): s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
    }
    assert samples[("rl_test_step_duration_seconds", frozenset({("rl_phase", "train")}))] == 1.5
    assert samples[("rl_test_step_duration_seconds", frozenset({("rl_phase", "eval")}))] == 0.25
    assert samples[("rl_test_tokens_total", frozenset({("gen_ai_token_type", "input")}))] == 100
    assert samples[("rl_test_tokens_total", frozenset({("gen_ai_token_type", "output")}))] == 40
    assert samples[("rl_test_requests_in_flight", frozenset())] == 3
    assert samples[("rl_test_batch_duration_seconds_count", frozenset({("worker", "w0")}))] == 4
    assert samples[("rl_test_batch_duration_seconds_sum", frozenset({("worker", "w0")}))] == (
        pytest.approx(21.25)
    )
    assert (
        samples[
            ("rl_test_batch_duration_seconds_bucket", frozenset({("worker", "w0"), ("le", "1.0")}))
        ]
        == 3
    )
    target_info = [labels for (name, labels), _ in samples.items() if name == "target_info"]
    assert len(target_info) == 1
    assert ("service_name", "side-by-side") in target_info[0]
    assert ("rlmetrics_run_id", "run-both-1") in target_info[0]

    # And the OTLP peer saw the same values for the same run.
    assert otlp_receiver.find(COUNTER, **{"gen_ai.token.type": "input"}).value == 100  # type: ignore[union-attr]
    assert {p.resource["rlmetrics.run.id"] for p in otlp_receiver.points()} == {"run-both-1"}


def test_standard_environment_variables_configure_the_reader(
    otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No endpoint, no interval in code: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT routes the export
    # and OTEL_METRIC_EXPORT_INTERVAL (ms) paces it, as in any OTel-instrumented process.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", otlp_receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_INSECURE", "true")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "100")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    declare_test_series()
    with rlmetrics.start(exporters=("otlp",)):
        record_test_series()
        # Several periodic exports before shutdown: only the 100 ms interval explains them
        # (the SDK default is 60 s).
        otlp_receiver.wait_for(lambda r: len(r.requests) >= 3, what="three periodic exports")
    resource = otlp_receiver.points()[0].resource
    assert resource["service.name"] == "from-env"


def test_out_of_range_values_are_dropped_alone_and_every_later_export_is_accepted(
    otlp_receiver: OtlpReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    """An int past int64 used to reach the SDK: every later export of its instrument then
    failed to encode (0 of 10 accepted), and a 10**400 gauge logged an SDK error per
    collection. Each is now dropped on its own before it enters the SDK."""
    declare_test_series()
    with (
        caplog.at_level(logging.ERROR, logger="opentelemetry"),
        rlmetrics.start(
            "exporters-test-service",
            exporters=("otlp",),
            otlp_endpoint=otlp_receiver.endpoint,
            export_interval_s=INTERVAL_S,
        ),
    ):
        logger = rlmetrics.Logger(backends={})
        logger.log_setup_timing({"x_time_s": 2**63, "policy_init_time_s": 2.0})
        rlmetrics.record(GROUP, {"tokens": 2**64}, {"gen_ai.token.type": "input"})
        rlmetrics.record(GROUP, {"step_time": 10**400}, {"rl.phase": "train"})
        record_test_series()
        otlp_receiver.wait_for(_all_arrived, what="every good value")
        arrived = len(otlp_receiver.requests)
        otlp_receiver.wait_for(
            lambda r: len(r.requests) >= arrived + 3, what="three more accepted exports"
        )
        setup = {
            p.attributes["rl.setup.phase"]: p.value
            for p in otlp_receiver.points()
            if p.name == "rl.setup.duration"
        }
    assert setup == {"policy_init": 2.0}
    assert otlp_receiver.find(COUNTER, **{"gen_ai.token.type": "input"}).value == 100  # type: ignore[union-attr]
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]


@pytest.fixture
def tls_receiver(tmp_path: Path) -> Iterator[tuple[OtlpReceiver, Path]]:
    """A receiver serving TLS with a self-signed certificate for 127.0.0.1 (a private CA of
    one), and that certificate's file, for ``OTEL_EXPORTER_OTLP_CERTIFICATE``."""
    key, certificate = certificate_for_localhost(tmp_path)
    receiver = OtlpReceiver(tls=(key.read_bytes(), certificate.read_bytes())).start()
    try:
        yield receiver, certificate
    finally:
        receiver.stop()


def test_over_tls_the_points_arrive_when_the_variable_names_the_collector_s_ca(
    tls_receiver: tuple[OtlpReceiver, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ``https://`` endpoint is TLS, trusting what ``OTEL_EXPORTER_OTLP_CERTIFICATE``
    names, as every OTel SDK reads it."""
    receiver, certificate = tls_receiver
    assert receiver.endpoint.startswith("https://127.0.0.1:")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(certificate))
    declare_test_series()
    with rlmetrics.start(
        exporters=("otlp",), otlp_endpoint=receiver.endpoint, export_interval_s=INTERVAL_S
    ):
        record_test_series()
        receiver.wait_for(_all_arrived, what="every recorded value, over TLS")


@pytest.mark.parametrize(
    ("mismatch", "advice"),
    [
        ("untrusted", "name its CA's certificate in OTEL_EXPORTER_OTLP_CERTIFICATE"),
        (
            "plaintext to tls",
            "a collector serving TLS closes a plaintext connection so: give it as https://",
        ),
        (
            "tls to plaintext",
            "The collector there does not serve TLS: an https:// endpoint is "
            "TLS; give it as http://",
        ),
    ],
)
def test_a_tls_mismatch_is_said_once_with_what_to_change(
    tls_receiver: tuple[OtlpReceiver, Path],
    otlp_receiver: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    mismatch: str,
    advice: str,
) -> None:
    """Before: each said "check the endpoint and that a collector listens there", which is
    true of all three; what was wrong was the certificate or the scheme."""
    secure, _certificate = tls_receiver
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_CERTIFICATE", raising=False)
    endpoint, receiver = {
        "untrusted": (secure.endpoint, secure),
        "plaintext to tls": (secure.endpoint.replace("https://", "http://"), secure),
        "tls to plaintext": (otlp_receiver.endpoint.replace("http://", "https://"), otlp_receiver),
    }[mismatch]
    declare_test_series()
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        handle = rlmetrics.start(
            exporters=("otlp",), otlp_endpoint=endpoint, export_interval_s=INTERVAL_S
        )
        record_test_series()
        handle.shutdown(timeout_s=5)
    said = [r.getMessage() for r in caplog.records if "OTLP export" in r.getMessage()]
    assert len(said) == 1, said
    assert advice in said[0], said[0]
    assert receiver.requests == []


def _the_failed_export(
    endpoint: str, caplog: pytest.LogCaptureFixture, wait: Callable[[], Any] = lambda: None
) -> str:
    """The one warning of a metrics-only run exporting to ``endpoint`` (``wait`` runs before
    its shutdown, which makes the last export)."""
    declare_test_series()
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        handle = rlmetrics.start(
            exporters=("otlp",), otlp_endpoint=endpoint, export_interval_s=INTERVAL_S, traces=False
        )
        record_test_series()
        wait()
        handle.shutdown(timeout_s=5)
    (said,) = [r.getMessage() for r in caplog.records if "OTLP export" in r.getMessage()]
    return said


@pytest.mark.parametrize(
    ("status", "advice"),
    [
        ("UNAUTHENTICATED", "give them in OTEL_EXPORTER_OTLP_HEADERS"),
        ("PERMISSION_DENIED", "give them in OTEL_EXPORTER_OTLP_HEADERS"),
        ("INVALID_ARGUMENT", "The collector refuses these requests: its own log says why"),
    ],
)
def test_a_refusing_collector_is_said_with_what_to_change(
    otlp_receiver: OtlpReceiver,
    caplog: pytest.LogCaptureFixture,
    status: str,
    advice: str,
) -> None:
    """Before: "check the endpoint and that a collector listens there", of a collector that
    listens and answers that it refuses the credentials, or the data."""
    otlp_receiver.reject_with = getattr(grpc.StatusCode, status)
    said = _the_failed_export(
        otlp_receiver.endpoint,
        caplog,
        lambda: otlp_receiver.wait_for(lambda r: r.rejected >= 1, what="a refused export"),
    )
    assert f"failed ({status}:" in said and advice in said, said
    assert "a collector listens there" not in said


def test_a_slow_collector_is_said_with_the_timeout_to_raise(
    otlp_receiver: OtlpReceiver, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collector that takes the request and answers after the export timeout. Before:
    "check the endpoint and that a collector listens there", of a collector that listens and
    got the points; now the timeout to raise."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.5")
    otlp_receiver.answer_after_s = 1.0
    said = _the_failed_export(
        otlp_receiver.endpoint,
        caplog,
        lambda: otlp_receiver.wait_for(lambda r: r.requests, what="a request, answered late"),
    )
    assert "failed (DEADLINE_EXCEEDED:" in said, said
    assert "did not answer within the export timeout" in said, said
    assert "OTEL_EXPORTER_OTLP_TIMEOUT" in said and "a collector listens there" not in said


@given(
    status=st.sampled_from(
        [code.name for code in grpc.StatusCode if code is not grpc.StatusCode.OK]
    ),
    signal=st.sampled_from(["metrics", "traces"]),
    details=st.text(max_size=30),
)
def test_every_grpc_status_is_advised_by_what_it_means(
    status: str, signal: str, details: str
) -> None:
    advice = export_advice(signal, details, status)
    if status in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
        assert advice == credentials_advice(signal)
    elif status == "UNIMPLEMENTED" and signal == "traces":
        assert "start(traces=False)" in advice
    elif status == "RESOURCE_EXHAUSTED":  # a memory limiter under load
        assert advice == overloaded_advice()
    elif status in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN", "CANCELLED"):
        assert advice != REFUSAL_ADVICE and "credentials" not in advice
    else:
        assert advice == REFUSAL_ADVICE


@pytest.mark.parametrize("value", ["true", "TRUE", "false"])
def test_an_insecure_variable_of_true_or_false_is_taken(
    otlp_receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """Read as the SDK reads it where the endpoint comes from the variables: even with an
    http:// endpoint, only "true" (any case) leaves the metrics in plaintext; "false" is TLS
    to a plaintext receiver, and nothing arrives. So "1" or "yes", which the SDK reads as
    false, is refused (test_collector_failures)."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_INSECURE", value)
    declare_test_series()
    with rlmetrics.start(exporters=("otlp",), export_interval_s=INTERVAL_S, traces=False) as handle:
        record_test_series()
        if value.lower() == "true":
            otlp_receiver.wait_for(lambda r: r.requests, what="a plaintext export")
        handle.shutdown(timeout_s=5)
    assert bool(otlp_receiver.requests) == (value.lower() == "true")


def test_an_otlp_http_port_given_to_grpc_is_said_with_the_protocol_to_choose(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """4317 and 4318 mixed up. Before: "check that a collector listens there", of a collector
    that listens, over the other protocol."""
    receiver = OtlpHttpReceiver().start()
    try:
        said = _the_failed_export(receiver.endpoint, caplog)
    finally:
        receiver.stop()
    assert "The collector there speaks OTLP over HTTP" in said, said
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf" in said, said
