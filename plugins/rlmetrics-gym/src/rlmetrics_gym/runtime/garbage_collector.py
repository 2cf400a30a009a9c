"""Garbage collections: ``gym.gc.*`` from ``gc.callbacks``.

The callbacks run inside the collector, on whatever thread allocated, possibly while that
thread holds an OpenTelemetry SDK lock; taking a lock there deadlocks (prometheus_client removed
its GC pause histogram for this, and the OTel SDK has the same report). So the callback only
does arithmetic on preallocated arrays: three counters per generation and a ring of pause
durations. The exporter's thread reads the counters and moves the pauses into the
``gym.gc.pause_duration_ms`` histogram when it collects. The callback is installed only while
the series are exported (:func:`~rlmetrics_gym.runtime.enable_runtime_metrics`).
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from array import array
from collections.abc import Mapping

import rlmetrics
from rlmetrics import Kind, MetricSpec, warn_once
from rlmetrics.spec import SUM

from ._switch import GROUP, enabled

__all__ = [
    "GC_COLLECTED",
    "GC_COLLECTIONS",
    "GC_COUNT",
    "GC_GENERATION_ATTR",
    "GC_PAUSE_MS",
    "GC_UNCOLLECTABLE",
    "PAUSE_RING_SIZE",
    "SPECS",
    "intact_pauses",
]

GC_PAUSE_MS = "gym.gc.pause_duration_ms"
GC_COLLECTIONS = "gym.gc.collections_total"
GC_COLLECTED = "gym.gc.collected_total"
GC_UNCOLLECTABLE = "gym.gc.uncollectable_total"
GC_COUNT = "gym.gc.count"
GC_GENERATION_ATTR = "nemo.gym.gc.generation"

#: GC pauses kept between two collections by the exporter; older ones are dropped (the
#: counters stay exact). A busy server runs a few hundred generation-0 collections a second.
PAUSE_RING_SIZE = 16384
_GENERATIONS = 3  # CPython's, 3.10 through 3.14

_PAUSE_BUCKETS_MS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000)


def _observe_gc_collections() -> list[tuple[float, Mapping[str, str]]]:
    return _gc_totals(0)


def _observe_gc_collected() -> list[tuple[float, Mapping[str, str]]]:
    return _gc_totals(1)


def _observe_gc_uncollectable() -> list[tuple[float, Mapping[str, str]]]:
    return _gc_totals(2)


def _observe_gc_count() -> list[tuple[float, Mapping[str, str]]]:
    if not enabled():
        return []
    _drain_pauses()
    return [(count, _GENERATION_ATTRS[g]) for g, count in enumerate(gc.get_count()[:3])]


_GENERATION = {GC_GENERATION_ATTR: frozenset(str(g) for g in range(_GENERATIONS))}

SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        GC_PAUSE_MS,
        Kind.HISTOGRAM,
        unit="ms",
        description="Duration of one garbage collection.",
        attributes=_GENERATION,
        buckets=_PAUSE_BUCKETS_MS,
        reduce=SUM,
    ),
    MetricSpec(
        GC_COLLECTIONS,
        Kind.OBSERVABLE_COUNTER,
        unit="{collection}",
        description="Garbage collections since enable_runtime_metrics().",
        attributes=_GENERATION,
        callback=_observe_gc_collections,
        reduce=SUM,
    ),
    MetricSpec(
        GC_COLLECTED,
        Kind.OBSERVABLE_COUNTER,
        unit="{object}",
        description="Objects the garbage collector freed since enable_runtime_metrics().",
        attributes=_GENERATION,
        callback=_observe_gc_collected,
        reduce=SUM,
    ),
    MetricSpec(
        GC_UNCOLLECTABLE,
        Kind.OBSERVABLE_COUNTER,
        unit="{object}",
        description="Objects the garbage collector found but could not free, since "
        "enable_runtime_metrics().",
        attributes=_GENERATION,
        callback=_observe_gc_uncollectable,
        reduce=SUM,
    ),
    MetricSpec(
        GC_COUNT,
        Kind.OBSERVABLE_GAUGE,
        unit="{object}",
        description="Allocations counted toward the next collection of the generation "
        "(gc.get_count()).",
        attributes=_GENERATION,
        callback=_observe_gc_count,
        reduce=SUM,
    ),
)

rlmetrics.declare(GROUP, SPECS, on_use=True)

_GENERATION_ATTRS: tuple[dict[str, str], ...] = tuple(
    {GC_GENERATION_ATTR: str(g)} for g in range(_GENERATIONS)
)

# Everything the gc callback touches is allocated here, once. Writer: the callback only (the
# collector never runs two collections at once). Readers: exporter threads, which take
# _drain_lock among themselves and never make the callback wait.

_RING_MASK = PAUSE_RING_SIZE - 1
assert PAUSE_RING_SIZE & _RING_MASK == 0, "PAUSE_RING_SIZE must be a power of two"
_pause_ms = array("d", bytes(8 * PAUSE_RING_SIZE))
_pause_generation = array("b", bytes(PAUSE_RING_SIZE))
_pause_written = array("q", [0])  # pauses written so far; slot = index & _RING_MASK
_pause_read = array("q", [0])  # pauses drained so far (drainers only)
_collection_started = array("d", [0.0])
# collections, collected, uncollectable per generation: _totals[3 * generation + field]
_totals = array("q", bytes(8 * 3 * _GENERATIONS))
# _totals when the callback was installed (exporter side only: the counters start from zero at
# telemetry start without the callback's arrays ever being written by another thread)
_baseline = array("q", bytes(8 * 3 * _GENERATIONS))
_drain_lock = threading.Lock()


def _on_gc(phase: str, info: dict[str, int]) -> None:
    """The gc.callbacks hook: arithmetic on the arrays above, nothing else (no lock, no call
    into OpenTelemetry or rlmetrics, no logging)."""
    if phase == "start":
        _collection_started[0] = time.perf_counter()
        return
    elapsed_ms = (time.perf_counter() - _collection_started[0]) * 1000.0
    generation = info.get("generation", -1)
    if not 0 <= generation < _GENERATIONS:
        return
    base = 3 * generation
    _totals[base] += 1
    _totals[base + 1] += info.get("collected", 0)
    _totals[base + 2] += info.get("uncollectable", 0)
    written = _pause_written[0]
    slot = written & _RING_MASK
    _pause_ms[slot] = elapsed_ms
    _pause_generation[slot] = generation
    _pause_written[0] = written + 1  # published last: a reader never sees a half-written slot


def intact_pauses(
    written: int, read: int, copied: list[tuple[int, float]], after: int
) -> list[tuple[int, float]]:
    """The pauses of ``copied`` (indices ``read``…``written - 1`` of the ring, in order) that
    the collector cannot have overwritten: it had written ``after`` pauses once the copy ended,
    so the slots of every index below ``after - PAUSE_RING_SIZE`` may hold newer pauses."""
    first_intact = max(read, after - PAUSE_RING_SIZE)
    return copied[max(0, first_intact - read) :] if first_intact < written else []


def _drain_pauses() -> None:
    """Move the ring's new pauses into the histogram (exporter's thread)."""
    if not _drain_lock.acquire(blocking=False):
        return  # another exporter thread is draining; it takes everything written so far
    try:
        written = _pause_written[0]
        read = max(_pause_read[0], written - PAUSE_RING_SIZE)
        lost = read - _pause_read[0]
        copied = [
            (_pause_generation[i & _RING_MASK], _pause_ms[i & _RING_MASK])
            for i in range(read, written)
        ]
        pauses = intact_pauses(written, read, copied, _pause_written[0])
        lost += len(copied) - len(pauses)
        _pause_read[0] = written
    finally:
        _drain_lock.release()
    if lost:
        warn_once(
            "gym:gc:ring_overflow",
            f"rlmetrics-gym: more than {PAUSE_RING_SIZE} garbage collections between two "
            "exports; the oldest pauses were not recorded in gym.gc.pause_duration_ms (the "
            "gym.gc.*_total counters stay exact). Export more often.",
        )
    for generation, ms in pauses:
        rlmetrics.record(GROUP, {GC_PAUSE_MS: ms}, _GENERATION_ATTRS[generation])


def _gc_totals(field: int) -> list[tuple[float, Mapping[str, str]]]:
    if not enabled():
        return []
    _drain_pauses()
    return [
        (_totals[3 * g + field] - _baseline[3 * g + field], _GENERATION_ATTRS[g])
        for g in range(_GENERATIONS)
    ]


def _install_gc_callback() -> None:
    with _drain_lock:
        _baseline[:] = array("q", _totals)
        _pause_read[0] = _pause_written[0]
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)


def _remove_gc_callback() -> None:
    with contextlib.suppress(ValueError):
        gc.callbacks.remove(_on_gc)
