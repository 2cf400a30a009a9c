"""The provider rlmetrics builds: exemplars where a trace can be active, none where it cannot."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

import rlmetrics
from rlmetrics import Kind, MetricSpec
from rlmetrics.testing import data_points, in_memory_telemetry


@pytest.fixture(autouse=True)
def _declared() -> None:
    rlmetrics.declare(
        "test.exemplars",
        [
            MetricSpec("test.exemplars.gauge", Kind.GAUGE, key="gauge"),
            MetricSpec("test.exemplars.histogram", Kind.HISTOGRAM, unit="s", key="histogram"),
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
