"""The provider rlmetrics builds: exemplars where a trace can be active, none where it cannot."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec
from rlmetrics._providers import _check_sampler
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.testing import data_points, in_memory_telemetry, points


@pytest.fixture(autouse=True)
def _declared() -> None:
    rlmetrics.declare(
        "test.exemplars",
        [
            MetricSpec("test.exemplars.gauge", Kind.GAUGE, key="gauge"),
            MetricSpec("test.exemplars.histogram", Kind.HISTOGRAM, unit="s", key="histogram"),
            MetricSpec(
                "test.exemplars.by_phase",
                Kind.HISTOGRAM,
                unit="s",
                key="by_phase",
                attributes={"phase": OPEN},
            ),
        ],
    )


def _exemplars(data: Any, name: str) -> list[Any]:
    return [exemplar for point in data_points(data, name) for exemplar in point.exemplars]


def test_a_gauge_carries_no_exemplar_and_a_histogram_keeps_its_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_METRICS_EXEMPLAR_FILTER", raising=False)
    tracer = TracerProvider().get_tracer("test")
    with in_memory_telemetry() as (_handle, reader), tracer.start_as_current_span("step") as span:
        rlmetrics.record("test.exemplars", {"gauge": 1.5, "histogram": 0.25})
        # Collected inside the sampled span: the SDK's default reservoir would take the gauge's
        # observation as an exemplar of this span, though no step ever ran in it.
        data = reader.get_metrics_data()
    assert _exemplars(data, "test.exemplars.gauge") == []
    (exemplar,) = _exemplars(data, "test.exemplars.histogram")
    assert exemplar.value == 0.25
    assert exemplar.trace_id == span.get_span_context().trace_id


def test_always_on_keeps_the_sdks_reservoir_for_every_instrument(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_METRICS_EXEMPLAR_FILTER", "always_on")
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.record("test.exemplars", {"gauge": 1.5, "histogram": 0.25})
        data = reader.get_metrics_data()
    assert [e.value for e in _exemplars(data, "test.exemplars.gauge")] == [1.5]
    assert [e.value for e in _exemplars(data, "test.exemplars.histogram")] == [0.25]


@pytest.mark.parametrize("attributes", [None, {"phase": "train"}])
@pytest.mark.parametrize("exemplar_filter", ["trace_based", "always_on"])
def test_the_loops_fast_path_hands_the_sdk_the_current_span_and_no_other(
    monkeypatch: pytest.MonkeyPatch, attributes: dict[str, str] | None, exemplar_filter: str
) -> None:
    # Once a series and its attribute set exist, record() passes the SDK the current context
    # itself (read from its context variable) or, outside every span, a spanless stand-in.
    monkeypatch.setenv("OTEL_METRICS_EXEMPLAR_FILTER", exemplar_filter)
    tracer = TracerProvider().get_tracer("test")
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.record("test.exemplars", {"by_phase": 1.0}, attributes)  # through write()
        reader.get_metrics_data()  # the reservoir starts afresh after a collection
        rlmetrics.record("test.exemplars", {"by_phase": 2.0}, attributes)
        with tracer.start_as_current_span("step") as span:
            rlmetrics.record("test.exemplars", {"by_phase": 7.0}, attributes)
        rlmetrics.record("test.exemplars", {"by_phase": 20.0}, attributes)
        data = reader.get_metrics_data()
    (point,) = data_points(data, "test.exemplars.by_phase")
    assert dict(point.attributes) == (attributes or {})
    assert (point.count, point.sum) == (4, 30.0)
    in_span = span.get_span_context().trace_id
    found = sorted((e.value, e.trace_id) for e in point.exemplars)
    if exemplar_filter == "always_on":
        # One exemplar per bucket (the SDK's default boundaries 0, 5, 10, 25, ...).
        assert found == [(2.0, None), (7.0, in_span), (20.0, None)]
    else:
        assert found == [(7.0, in_span)]


def test_a_reader_whose_interval_ends_while_the_provider_is_built_says_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """On a loaded machine a periodic reader's first interval can end before the MeterProvider
    that registers it exists: the SDK then warned "Cannot call collect on a MetricReader until
    it is registered" on the user's terminal (a CI run at load 86 showed it under the
    quickstart). Harmless while rlmetrics is building the provider: said at DEBUG."""
    import logging

    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from rlmetrics._providers import build_provider
    from rlmetrics.exporters import Exporter, periodic_reader
    from rlmetrics.testing import wait_until

    def early(export_interval_s: float | None = None) -> Exporter:
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return Exporter(periodic_reader(ConsoleMetricExporter(), 0.01))

    def slow(export_interval_s: float | None = None) -> Exporter:
        # Another exporter still being built when the first reader's interval ends.
        wait_until(
            lambda: any("Cannot call collect" in r.getMessage() for r in caplog.records),
            10,
            "the first reader's collect before its provider exists",
        )
        return Exporter(InMemoryMetricReader())

    with caplog.at_level(logging.DEBUG):
        built = build_provider({}, {"early": (early, {}), "slow": (slow, {})}, [], None)
    built.provider.shutdown(timeout_millis=1000)
    said = [r for r in caplog.records if "Cannot call collect" in r.getMessage()]
    assert said and all(r.levelno == logging.DEBUG for r in said)


def test_otel_sdk_disabled_exports_nothing_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``OTEL_SDK_DISABLED=true`` disables the SDK for every signal (the specification): the
    SDK's meters and tracers are no-ops. Before: rlmetrics' gauges, which it adds to each
    collection itself, were exported all the same (7 points of a logged step, and no
    histogram or counter beside them), and nothing said the rest was off. The trackers still
    get their rows: the variable is OpenTelemetry's."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    monkeypatch.setenv("OTEL_SDK_DISABLED", "True")
    spans = InMemorySpanExporter()
    path = tmp_path / "run.jsonl"
    with (
        caplog.at_level("WARNING", logger="rlmetrics"),
        in_memory_telemetry(span_processors=[SimpleSpanProcessor(spans)]) as (_handle, reader),
    ):
        with rlmetrics.Logger(backends={"jsonl": {"path": str(path)}}) as logger:
            for step in (1, 2):
                with rlmetrics.step(step):
                    logger.log_metrics({"reward": 0.5, "gauge": 1.0}, step=step, prefix="train")
        assert reader.get_metrics_data() is None or not reader.get_metrics_data().resource_metrics
    assert spans.get_finished_spans() == ()
    assert [row["step"] for row in read_jsonl(path)] == [1, 2]
    said = [r.getMessage() for r in caplog.records if "OTEL_SDK_DISABLED" in r.getMessage()]
    assert len(said) == 1 and "exports nothing" in said[0], said


@pytest.mark.parametrize("value", ["bogus", "always-on"])
def test_an_exemplar_filter_that_is_none_names_the_variable_and_the_choices(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """Before: the SDK's bare ``ValueError: Unknown exemplar filter 'bogus'.`` out of start(),
    naming neither the variable nor what it takes."""
    monkeypatch.setenv("OTEL_METRICS_EXEMPLAR_FILTER", value)
    with pytest.raises(rlmetrics.ConfigurationError) as raised:
        rlmetrics.start(exporters=["console"])
    assert str(raised.value) == (
        f"OTEL_METRICS_EXEMPLAR_FILTER={value!r} is none of the exemplar filters: "
        "'always_on', 'always_off', 'trace_based' (unset, trace_based)"
    )
    assert rlmetrics.current() is None


@given(
    argument=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.text(alphabet="0123456789.-e+naif ", max_size=8),
    )
)
def test_a_sampling_ratio_is_taken_exactly_when_the_sdk_samples_at_it(argument: str) -> None:
    """Taken: the SDK's sampler samples at that ratio. Refused: the SDK would raise, or
    sample at another ratio than the one written (its 1.0, after a line of its own)."""
    from opentelemetry.sdk.trace import sampling

    variables = {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": argument}
    with mock.patch.dict(os.environ, variables):
        try:
            _check_sampler()
            taken = True
        except rlmetrics.ConfigurationError:
            taken = False
        try:
            sampler = sampling._get_from_env_or_default()
            sdk_rate = getattr(sampler, "rate", None)
        except ValueError:
            sdk_rate = None
    try:
        written: float | None = float(argument)
    except ValueError:
        written = None
    if argument.strip():
        assert taken == (sdk_rate is not None and sdk_rate == written), (argument, sdk_rate)


@pytest.mark.parametrize(
    "value", [None, object(), {"lr": 1e-5}, ["a", None]], ids=["None", "object", "dict", "list"]
)
def test_a_resource_attribute_of_no_attribute_type_fails_start_naming_it(value: Any) -> None:
    """A resource attribute is text, a bool, a number or a list of one of those (OpenTelemetry's
    attribute types). Before: ``resource={"team": None}`` went out as an empty value on every
    OTLP export (an object as None, with the SDK's warning only): the run's series without the
    team a dashboard selects them by."""
    from rlmetrics.configuration import ConfigurationError

    with pytest.raises(ConfigurationError, match="resource attribute 'team'"):
        rlmetrics.start(readers=[InMemoryMetricReader()], resource={"team": value})
    assert rlmetrics.current() is None


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"run_id": "run-\udcff"}, "rlmetrics.run.id"),
        ({"service_name": "grpo-\udcff"}, "service.name"),
        ({"resource": {"team": "rl-\udcff"}}, "team"),
    ],
)
def test_a_resource_attribute_that_is_no_utf8_text_fails_start_naming_it(
    given: dict[str, Any], named: str
) -> None:
    """A run id or name decoded with surrogateescape (an environment variable or file name
    that is no UTF-8). Before: start() went on, and every scrape of the Prometheus endpoint
    answered 500 (target_info could not be encoded): every series of the run lost."""
    from rlmetrics.configuration import ConfigurationError

    with pytest.raises(ConfigurationError, match=f"resource attribute '{named}'"):
        rlmetrics.start(exporters=["prometheus"], prometheus_port=0, **given)
    assert rlmetrics.current() is None


@pytest.mark.parametrize("attributes", ["team=rl,", "team=rl,,run.kind=sweep", "team=rl, "])
def test_an_empty_item_of_the_resource_variable_is_not_said_at_every_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, attributes: str
) -> None:
    """Before: a trailing comma in OTEL_RESOURCE_ATTRIBUTES (which the SDK skips: it means
    nothing) printed the SDK's 'Invalid key value resource attribute pair : not enough values
    to unpack' twice per start (rlmetrics read the variable, then Resource.create read it
    again). An empty item carries nothing, so nothing is said; the attributes are kept."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", attributes)
    with (
        caplog.at_level("WARNING"),
        in_memory_telemetry(span_processors=[SimpleSpanProcessor(InMemorySpanExporter())]) as (
            handle,
            reader,
        ),
    ):
        rlmetrics.record("test.exemplars", {"gauge": 1.0})
        (point,) = [p for p in points(reader) if p.name == "test.exemplars.gauge"]
    assert point.resource["team"] == "rl" and handle.resource["team"] == "rl"
    assert "resource attribute pair" not in caplog.text
