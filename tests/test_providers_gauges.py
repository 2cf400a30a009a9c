"""Gauges as a metric producer (``_providers._GaugeProducer``): every collection of every reader
exports each gauge's last values, as the SDK's own observable gauge over the same values would,
in the rlmetrics scope of the provider's resource."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec
from rlmetrics.testing import in_memory_telemetry, isolated_state

GROUP = "test.producer"
LABELLED = MetricSpec(
    "test.producer.by_env", Kind.GAUGE, unit="s", description="d", key="by_env",
    attributes={"env": OPEN},
)  # fmt: skip
PLAIN = MetricSpec("test.producer.plain", Kind.GAUGE, unit="{x}", description="p", key="plain")


def _declare() -> None:
    rlmetrics.declare(GROUP, [LABELLED, PLAIN])


def _metrics(data: Any) -> dict[str, Any]:
    if data is None:  # nothing at all was collected
        return {}
    return {
        m.name: (sm.scope, m)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name.startswith("test.")
    }


def _shape(metric: Any) -> tuple[Any, ...]:
    """What an exporter reads of a gauge: its identity and its points (their collection
    times aside, which differ between two collections)."""
    points = sorted(
        (sorted(p.attributes.items()), p.value, p.start_time_unix_nano, list(p.exemplars))
        for p in metric.data.data_points
    )
    return metric.name, metric.unit, metric.description, type(metric.data).__name__, points


_values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
)


@given(
    plain=st.none() | _values,
    by_env=st.dictionaries(st.sampled_from(["math", "code", "web"]), _values, max_size=3),
)
def test_a_gauge_exports_what_the_sdks_observable_gauge_would(
    plain: int | float | None, by_env: dict[str, int | float]
) -> None:
    with isolated_state():
        _declare()
        with in_memory_telemetry() as (_handle, reader):
            if plain is not None:
                rlmetrics.record(GROUP, {"plain": plain})
            for env, value in by_env.items():
                rlmetrics.record(GROUP, {"by_env": value}, {"env": env})
            ours = _metrics(reader.get_metrics_data())
    # The SDK's own observable gauges, reporting the same values.
    raw_reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[raw_reader], shutdown_on_exit=False)
    meter = provider.get_meter("raw")
    for spec, observations in (
        (PLAIN, [] if plain is None else [Observation(plain)]),
        (LABELLED, [Observation(v, {"env": e}) for e, v in by_env.items()]),
    ):
        meter.create_observable_gauge(
            spec.name,
            callbacks=[lambda _options, o=observations: o],
            unit=spec.unit,
            description=spec.description,
        )
    raw = _metrics(raw_reader.get_metrics_data())
    provider.shutdown()
    assert {name: _shape(m) for name, (_scope, m) in ours.items()} == {
        name: _shape(m) for name, (_scope, m) in raw.items()
    }
    for scope, _metric in ours.values():
        assert (scope.name, scope.version) == ("rlmetrics", rlmetrics.__version__)


def test_every_reader_gets_the_gauges_in_every_collection_until_the_session_ends() -> None:
    _declare()
    second = InMemoryMetricReader()
    with in_memory_telemetry(readers=[second]) as (handle, first):
        rlmetrics.record(GROUP, {"plain": 1.0})
        rlmetrics.record(GROUP, {"by_env": 2.0}, {"env": "math"})
        for reader in (first, second, first):  # each reader, and again: the last value stays
            found = _metrics(reader.get_metrics_data())
            assert [p.value for p in found["test.producer.plain"][1].data.data_points] == [1.0]
        rlmetrics.retract(GROUP, "by_env", {"env": "math"})
        assert "test.producer.by_env" not in _metrics(first.get_metrics_data())
        # The gauges' scope is the one the rlmetrics meter's other instruments are in, and
        # the resource is the provider's (its run id).
        data = second.get_metrics_data()
        (resource_metrics,) = data.resource_metrics
        run_id = resource_metrics.resource.attributes["rlmetrics.run.id"]
        assert run_id == handle.run_id
    # The session ended: a collection after it exports no gauge.
    assert _metrics(first.get_metrics_data()) == {}


def test_a_gauge_with_no_point_exports_nothing() -> None:
    _declare()
    with in_memory_telemetry() as (_handle, reader):
        assert _metrics(reader.get_metrics_data()) == {}


def test_a_reader_without_the_sdks_collect_callback_fails_start_saying_why() -> None:
    class Detached(InMemoryMetricReader):
        def _set_collect_callback(self, func: Any) -> None:  # an SDK that keeps it elsewhere
            self._elsewhere = func

    _declare()
    reader = Detached()
    reader._collect = None  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match="no collect callback"):
        rlmetrics.start(readers=[reader])
    # Undone whole: no session bound, declarations open.
    assert rlmetrics.current() is None and not rlmetrics.default_registry().exporting
