"""Histogram values held between collections: the exported points are the raw SDK's.

A raw SDK histogram fed the same values (in the same spans) is read back beside rlmetrics' from
real in-memory readers, one cumulative and one delta on each side: count, sum (and its type),
buckets, min, max, attributes and exemplars agree after every collection, on every exemplar
filter setting, through the cap's hand-over on the recording thread and across the provider's
shutdown.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import TracerProvider

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec, instruments
from rlmetrics.registry import record_values
from rlmetrics.testing import data_points, in_memory_telemetry

GROUP = "test.held"
NAME = "test.held.latency"
BUCKETS = (0.5, 1, 2.5, 10, 1000)
ENVS: tuple[dict[str, str], ...] = ({}, {"env": "a"}, {"env": "b"})
FILTERS = ("trace_based", "always_off", "always_on")


def _declare() -> None:
    rlmetrics.declare(
        GROUP,
        [
            MetricSpec(
                NAME,
                Kind.HISTOGRAM,
                key="latency",
                unit="s",
                buckets=BUCKETS,
                attributes={"env": OPEN},
                max_series=8,
            )
        ],
    )


def _readers() -> tuple[InMemoryMetricReader, InMemoryMetricReader]:
    delta: dict[type, AggregationTemporality] = {Histogram: AggregationTemporality.DELTA}
    return InMemoryMetricReader(), InMemoryMetricReader(preferred_temporality=delta)


def _points(data: Any) -> dict[frozenset[tuple[str, Any]], tuple[Any, ...]]:
    """Each attribute set's point as the exporter sees it (times aside)."""
    if data is None:
        return {}
    return {
        frozenset(p.attributes.items()): (
            p.count,
            p.sum,
            type(p.sum),
            tuple(p.bucket_counts),
            tuple(p.explicit_bounds),
            p.min,
            type(p.min),
            p.max,
            type(p.max),
            tuple((e.value, e.span_id) for e in p.exemplars),
        )
        for p in data_points(data, NAME)
    }


class _Raw:
    """The raw SDK's histogram of the same name and buckets, on its own two readers."""

    def __init__(self) -> None:
        self.cumulative, self.delta = _readers()
        self.provider = MeterProvider(
            metric_readers=[self.cumulative, self.delta], shutdown_on_exit=False
        )
        self.histogram = self.provider.get_meter("raw").create_histogram(
            NAME, unit="s", explicit_bucket_boundaries_advisory=list(BUCKETS)
        )


_values = st.one_of(
    st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
    st.integers(0, 2**62),
    st.sampled_from([0, 0.5, 1, 1.0, 2.5, 10, 0.1, 0.2, 0.3, 1e-300]),
)
_records = st.tuples(st.just("record"), _values, st.integers(0, len(ENVS) - 1), st.booleans())
_collections = st.tuples(st.just("collect"), st.sampled_from(["cumulative", "delta", "both"]))
_operations = st.lists(st.one_of(_records, _records, _records, _collections), max_size=60)


@pytest.fixture(autouse=True)
def _declared() -> None:
    _declare()


@given(
    exemplar_filter=st.sampled_from(FILTERS),
    operations=_operations,
    cap=st.sampled_from([2, 3, 5, instruments.HELD_VALUES_MAX]),
)
def test_held_values_export_the_raw_sdks_points(
    exemplar_filter: str, operations: list[tuple[Any, ...]], cap: int
) -> None:
    tracer = TracerProvider(shutdown_on_exit=False).get_tracer("test")
    delta = _readers()[1]
    with (
        mock.patch.dict(os.environ, {"OTEL_METRICS_EXEMPLAR_FILTER": exemplar_filter}),
        mock.patch.object(instruments, "HELD_VALUES_MAX", cap),
        in_memory_telemetry(readers=[delta]) as (_handle, cumulative),
    ):
        raw = _Raw()
        ours = {"cumulative": cumulative, "delta": delta}
        theirs = {"cumulative": raw.cumulative, "delta": raw.delta}

        def collect(which: str) -> None:
            for name in ("cumulative", "delta") if which == "both" else (which,):
                assert _points(ours[name].get_metrics_data()) == _points(
                    theirs[name].get_metrics_data()
                ), name

        for operation in operations:
            if operation[0] == "collect":
                collect(operation[1])
                continue
            _, value, env, in_span = operation
            attributes = ENVS[env]
            if in_span:
                with tracer.start_as_current_span("rollout"):
                    rlmetrics.record(GROUP, {"latency": value}, attributes)
                    raw.histogram.record(value, attributes)
            else:
                rlmetrics.record(GROUP, {"latency": value}, attributes)
                raw.histogram.record(value, attributes)
        collect("both")
        raw.provider.shutdown()


# A batch's values for record_values: valid ones, and ones record() drops (said) or skips.
_DROPPED = (None, math.nan, -1.0, math.inf)
_batch_values = st.lists(st.one_of(_values, _values, _values, st.sampled_from(_DROPPED)))
_batches = st.tuples(st.just("values"), _batch_values, st.integers(0, len(ENVS) - 1), st.booleans())


@given(
    operations=st.lists(st.one_of(_batches, _records, _collections), max_size=30),
    cap=st.sampled_from([2, 3, 5, instruments.HELD_VALUES_MAX]),
)
def test_record_values_exports_what_recording_each_value_does(
    operations: list[tuple[Any, ...]], cap: int
) -> None:
    # record_values (a family's batch of one histogram's values under one prepared set)
    # against the raw SDK fed each value record() keeps, one by one, in order: through the
    # first value's write, the cap's hand-over, a change of type and values it drops.
    tracer = TracerProvider(shutdown_on_exit=False).get_tracer("test")
    with (
        mock.patch.object(instruments, "HELD_VALUES_MAX", cap),
        in_memory_telemetry() as (_handle, ours),
    ):
        raw = _Raw()
        for operation in operations:
            if operation[0] == "collect":
                assert _points(ours.get_metrics_data()) == _points(
                    raw.cumulative.get_metrics_data()
                )
                continue
            kind, values, env, in_span = operation
            attributes = ENVS[env]
            batch = values if kind == "values" else [values]
            with tracer.start_as_current_span("rollout") if in_span else contextlib.nullcontext():
                record_values(GROUP, "latency", batch, frozenset(attributes.items()))
                for value in batch:
                    if value is not None and math.isfinite(value) and value >= 0:
                        raw.histogram.record(value, attributes)
        assert _points(ours.get_metrics_data()) == _points(raw.cumulative.get_metrics_data())
        raw.provider.shutdown()


def test_what_is_held_stays_under_the_cap_and_is_exported_whole(isolated: Any) -> None:
    raw = _Raw()
    n = 3 * instruments.HELD_VALUES_MAX + 17
    with in_memory_telemetry() as (_handle, reader):
        for i in range(n):
            value = (i % 97) / 7
            rlmetrics.record(GROUP, {"latency": value}, {"env": "a"})
            raw.histogram.record(value, {"env": "a"})
        series = isolated._session.groups[GROUP]["latency"]
        held = [len(slot[0]) for slot in series.held.values()]
        # The first value started the stream; then every HELD_VALUES_MAX-th value handed the
        # ones before it over on this thread: what is held is the rest, under the cap.
        assert held == [(n - 1) % instruments.HELD_VALUES_MAX]
        ours = _points(reader.get_metrics_data())
    assert ours == _points(raw.cumulative.get_metrics_data())
    ((count, *_),) = ours.values()
    assert count == n
    raw.provider.shutdown()


def test_values_from_many_threads_reach_both_readers_whole() -> None:
    # Collections (the second reader's too) while threads record, some of them inside spans
    # and past the cap: every value lands in one collection or the next, none twice or lost.
    second = InMemoryMetricReader()
    tracer = TracerProvider(shutdown_on_exit=False).get_tracer("test")
    per_thread, threads = 3_000, 6

    def work(index: int) -> None:
        attributes = {"env": "a" if index % 2 else "b"}
        for i in range(per_thread):
            if i % 500 == 0:
                with tracer.start_as_current_span("rollout"):
                    rlmetrics.record(GROUP, {"latency": 2}, attributes)
            else:
                rlmetrics.record(GROUP, {"latency": 2}, attributes)

    with (
        mock.patch.object(instruments, "HELD_VALUES_MAX", 700),
        in_memory_telemetry(readers=[second]) as (_handle, reader),
    ):
        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        while any(worker.is_alive() for worker in workers):
            reader.get_metrics_data()
            second.get_metrics_data()
        for worker in workers:
            worker.join()
        for data in (reader.get_metrics_data(), second.get_metrics_data()):
            points = {frozenset(p.attributes.items()): p for p in data_points(data, NAME)}
            for env in ("a", "b"):
                point = points[frozenset({("env", env)})]
                total = per_thread * threads // 2
                assert (point.count, point.sum, point.min, point.max) == (total, 2 * total, 2, 2)


def test_a_value_in_a_span_keeps_its_exemplar_after_held_ones() -> None:
    tracer = TracerProvider(shutdown_on_exit=False).get_tracer("test")
    with (
        mock.patch.dict(os.environ, {"OTEL_METRICS_EXEMPLAR_FILTER": "trace_based"}),
        in_memory_telemetry() as (_handle, reader),
    ):
        for value in (0.1, 0.2, 0.3):  # the first starts the stream, two are held
            rlmetrics.record(GROUP, {"latency": value})
        with tracer.start_as_current_span("rollout") as span:
            rlmetrics.record(GROUP, {"latency": 4.0})
        data = reader.get_metrics_data()
    (point,) = data_points(data, NAME)
    assert (point.count, point.sum) == (4, ((0.1 + 0.2) + 0.3) + 4.0)
    (exemplar,) = point.exemplars
    assert (exemplar.value, exemplar.span_id) == (4.0, span.get_span_context().span_id)


class _Keeping(MetricExporter):
    """An exporter that keeps every batch it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.exported: list[Any] = []

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **_: Any) -> Any:
        self.exported.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **_: Any) -> None:
        return None


def test_the_shutdown_collection_exports_what_is_held() -> None:
    exporter = _Keeping()
    # No periodic export before the shutdown's: what is held is only ever handed over there.
    periodic = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    handle = rlmetrics.start(readers=[periodic], service_name="rlmetrics-test")
    try:
        for value in (0.25, 1.5, 3, 7.5, 900.0):
            rlmetrics.record(GROUP, {"latency": value}, {"env": "a"})
    finally:
        handle.shutdown(timeout_s=5)
    raw_exporter = _Keeping()
    raw = MeterProvider(
        metric_readers=[PeriodicExportingMetricReader(raw_exporter, 3_600_000)],
        shutdown_on_exit=False,
    )
    histogram = raw.get_meter("raw").create_histogram(
        NAME, unit="s", explicit_bucket_boundaries_advisory=list(BUCKETS)
    )
    for value in (0.25, 1.5, 3, 7.5, 900.0):
        histogram.record(value, {"env": "a"})
    raw.shutdown()
    ours = [p for data in exporter.exported if (p := _points(data))]
    theirs = [p for data in raw_exporter.exported if (p := _points(data))]
    assert ours and ours[-1] == theirs[-1]
    ((count, total, *_),) = ours[-1].values()
    assert (count, total) == (5, 0.25 + 1.5 + 3 + 7.5 + 900.0)


def test_nothing_of_the_hand_over_is_exported() -> None:
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.record(GROUP, {"latency": 1.0})
        rlmetrics.record(GROUP, {"latency": 2.0})
        data = reader.get_metrics_data()
    assert data_points(data, "rlmetrics.pending_sums") == []
    assert [p.count for p in data_points(data, NAME)] == [2]


def test_a_value_a_callback_records_during_a_collection_is_in_that_collection() -> None:
    # A family that moves its readings into a histogram from an observable callback (Gym's GC
    # pauses) exports them in the collection that ran the callback, beside the count that
    # callback reports there, whatever order the SDK runs the callbacks in. (Held, they waited
    # for the next collection: the fresh-clone CI run read 251 pauses beside 255 collections.)
    calls = [0]

    def observe() -> list[tuple[float, dict[str, str]]]:
        calls[0] += 1
        rlmetrics.record(GROUP, {"latency": 1.0}, {"env": "a"})
        return [(calls[0], {})]

    rlmetrics.declare(
        "test.held.observed",
        [
            MetricSpec(
                "test.held.observed.calls",
                Kind.OBSERVABLE_COUNTER,
                unit="{call}",
                callback=observe,
            )
        ],
        on_use=True,  # its callback is made after rlmetrics' own, so the SDK runs it later
    )
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.activate("test.held.observed")
        rlmetrics.record(GROUP, {"latency": 1.0}, {"env": "a"})  # the stream starts: now held
        for _ in range(3):
            data = reader.get_metrics_data()
            (reported,) = data_points(data, "test.held.observed.calls")
            (latency,) = data_points(data, NAME)
            assert latency.count == 1 + reported.value
