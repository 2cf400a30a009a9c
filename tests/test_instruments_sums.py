"""Counters' sums added up between collections: the exported sum is exact from any number of
threads and readers, a point recorded inside a span keeps its exemplar, and the always_on
exemplar filter sends every point to the SDK."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec
from rlmetrics.testing import data_points, in_memory_telemetry

GROUP = "test.sums"


@pytest.fixture(autouse=True)
def _declared(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_METRICS_EXEMPLAR_FILTER", raising=False)
    rlmetrics.declare(
        GROUP,
        [
            MetricSpec("test.sums.count", Kind.COUNTER, key="count"),
            MetricSpec("test.sums.level", Kind.UP_DOWN_COUNTER, key="level"),
            MetricSpec(
                "test.sums.by_thread",
                Kind.COUNTER,
                key="by_thread",
                attributes={"thread": OPEN},
                max_series=64,
            ),
        ],
    )


def _sums(data: Any, name: str) -> dict[frozenset[tuple[str, Any]], Any]:
    return {frozenset(p.attributes.items()): p.value for p in data_points(data, name)}


def _exemplars(data: Any, name: str) -> list[Any]:
    return [e for point in data_points(data, name) for e in point.exemplars]


def test_the_api_still_keeps_the_current_context_in_a_context_variable() -> None:
    # Deferring a sum needs to know that no span is active; an API release that moves the
    # variable turns deferral off (every point to the SDK), and this fails so it is noticed.
    from contextvars import ContextVar

    assert isinstance(otel_context._RUNTIME_CONTEXT._current_context, ContextVar)  # type: ignore[attr-defined]


def test_sums_from_many_threads_and_both_readers_are_exact() -> None:
    second = InMemoryMetricReader()
    per_thread, threads = 20_000, 8

    def work(index: int) -> None:
        for _ in range(per_thread):
            rlmetrics.record(GROUP, {"count": 1, "level": 2})
            rlmetrics.record(GROUP, {"level": -1})
            rlmetrics.record(GROUP, {"by_thread": 1}, {"thread": str(index % 4)})

    with in_memory_telemetry(readers=[second]) as (_handle, reader):
        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        # Collections while the threads record: every point lands in one collection or the
        # next, none twice and none lost.
        while any(worker.is_alive() for worker in workers):
            reader.get_metrics_data()
            second.get_metrics_data()
        for worker in workers:
            worker.join()
        for data in (reader.get_metrics_data(), second.get_metrics_data()):
            total = per_thread * threads
            assert _sums(data, "test.sums.count") == {frozenset(): total}
            assert _sums(data, "test.sums.level") == {frozenset(): total}
            assert _sums(data, "test.sums.by_thread") == {
                frozenset({("thread", str(t))}): total // 4 for t in range(4)
            }
            # Nothing of the hand-over is exported.
            assert data_points(data, "rlmetrics.pending_sums") == []


def test_a_point_recorded_in_a_span_keeps_its_exemplar() -> None:
    tracer = TracerProvider().get_tracer("test")
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.record(GROUP, {"count": 1})  # the stream starts (no span)
        rlmetrics.record(GROUP, {"count": 2})  # deferred: no span, so no exemplar either way
        with tracer.start_as_current_span("step") as span:
            rlmetrics.record(GROUP, {"count": 4})
        rlmetrics.record(GROUP, {"count": 8})
        data = reader.get_metrics_data()
    assert _sums(data, "test.sums.count") == {frozenset(): 15}
    (exemplar,) = _exemplars(data, "test.sums.count")
    assert exemplar.value == 4
    assert exemplar.span_id == span.get_span_context().span_id


def test_always_on_sends_every_point_to_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_METRICS_EXEMPLAR_FILTER", "always_on")
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.record(GROUP, {"count": 1})
        reader.get_metrics_data()  # the reservoir starts afresh after a collection
        for value in (2, 4):
            rlmetrics.record(GROUP, {"count": value})
        data = reader.get_metrics_data()
    assert _sums(data, "test.sums.count") == {frozenset(): 7}
    # Each point was offered to the SDK's reservoir (a deferred sum would have offered 6).
    (exemplar,) = _exemplars(data, "test.sums.count")
    assert exemplar.value in (2, 4)


def test_a_sum_recorded_after_a_collection_reaches_the_next_one() -> None:
    with in_memory_telemetry() as (handle, reader):
        rlmetrics.record(GROUP, {"count": 1})
        assert _sums(reader.get_metrics_data(), "test.sums.count") == {frozenset(): 1}
        rlmetrics.record(GROUP, {"count": 5})
        rlmetrics.record(GROUP, {"count": 5})
        assert _sums(reader.get_metrics_data(), "test.sums.count") == {frozenset(): 11}
        rlmetrics.record(GROUP, {"count": 100})
        handle.shutdown()  # the final collection takes what is pending
    assert _sums(reader.get_metrics_data(), "test.sums.count") in ({}, {frozenset(): 111})
