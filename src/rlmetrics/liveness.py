"""Whether the training loop is making progress: the newest trainer step of this telemetry
session, when it arrived, the recent intervals between steps, and the one rule that calls a
silence a stall (:class:`StallRule`: the health path and the ``RLStepStalled`` alert both
apply it).

This module only keeps the state (it declares nothing, so the health path may import it at any
time); the ``liveness`` family (:mod:`rlmetrics.families.liveness`) feeds it from the logged
dicts and exports it as ``rl.step.*``.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from collections.abc import Callable

import attrs

__all__ = [
    "DEFAULT_STALL_BOUND_S",
    "DEFAULT_STALL_FACTOR",
    "DEFAULT_STALL_MIN_S",
    "MEDIAN_WINDOW",
    "NO_STEP",
    "Liveness",
    "Snapshot",
    "StallRule",
    "clock",
    "silence",
    "liveness",
]

#: Intervals the median step interval is taken over, and the fewest it is given from (a
#: median from fewer cannot be told from noise: p50 from at least 20 values).
MEDIAN_WINDOW = 20
_MIDDLE = MEDIAN_WINDOW // 2

#: ``Liveness.step`` before the first step of a session.
NO_STEP = -(2**63)

#: A run is stalled once silent for longer than this many median step intervals...
DEFAULT_STALL_FACTOR = 3.0
#: ...and never sooner than this (a scrape and a rule evaluation must pass before Prometheus
#: can see a step, so a shorter silence is not news)...
DEFAULT_STALL_MIN_S = 60.0
#: ...and, before :data:`MEDIAN_WINDOW` intervals are known, once silent for longer than this
#: (prime-rl's alert uses the same ten minutes; setup and the first steps can be slow).
DEFAULT_STALL_BOUND_S = 600.0


@attrs.frozen
class StallRule:
    """When a silence is a stall: longer than ``factor`` times the median step interval (the
    run's own pace), and at least ``min_s``; before the median is known, longer than
    ``bound_s``. ``/health`` applies it to the liveness state, ``RLStepStalled`` to the
    ``rl.step.*`` series, with the same defaults (docs/operations.md)."""

    factor: float = DEFAULT_STALL_FACTOR
    min_s: float = DEFAULT_STALL_MIN_S
    bound_s: float = DEFAULT_STALL_BOUND_S

    def limit_s(self, interval_median_s: float | None) -> float:
        """The silence, in seconds, beyond which the run is stalled."""
        if interval_median_s is None:
            return self.bound_s
        return max(self.factor * interval_median_s, self.min_s)


#: The time source of step timestamps and of the health path's "now" (Unix seconds). Tests
#: replace it to move time without sleeping.
clock: Callable[[], float] = time.time


@attrs.frozen
class Snapshot:
    """What the liveness state holds at one instant (Unix seconds throughout)."""

    step: int | None
    last_step_time: float | None
    started_time: float | None
    interval_median_s: float | None
    intervals: int


class Liveness:
    """The newest step of this telemetry session and the intervals between steps."""

    def __init__(self) -> None:
        # Reentrant: a signal's handler runs on the thread it interrupts, and one that shuts
        # telemetry down (ending the open step, whose summary notes a step) while that thread
        # is inside advance() would otherwise wait for the lock for ever.
        self._lock = threading.RLock()
        #: The newest step (:data:`NO_STEP` before the first); read without the lock on the
        #: hot path, where a stale read only costs a trip through :meth:`advance`.
        self.step = NO_STEP
        self._last_time: float | None = None
        self._started: float | None = None
        #: The last :data:`MEDIAN_WINDOW` intervals in arrival order, and the same in order
        #: of size: a new step moves one value in and one out of the sorted list (two
        #: bisections), so the median is read, not sorted, on every step.
        self._intervals: deque[float] = deque(maxlen=MEDIAN_WINDOW)
        self._ordered: list[float] = []

    def reset(self) -> None:
        """A new telemetry session: no step yet, silence counted from now."""
        with self._lock:
            self.step = NO_STEP
            self._last_time = None
            self._started = clock()
            self._intervals.clear()
            self._ordered.clear()

    def advance(self, step: int, publish: Callable[[int, float, float | None], None]) -> None:
        """``step`` was logged: if it is the newest, note when (and the interval since the
        newest before it) and ``publish(step, when, median interval)``, under the lock, so
        that two threads logging new steps at once publish them in order."""
        with self._lock:
            if step <= self.step:
                return
            now = clock()
            last = self._last_time
            if last is not None:
                interval = now - last if now > last else 0.0
                intervals, ordered = self._intervals, self._ordered
                if len(intervals) == MEDIAN_WINDOW:
                    del ordered[bisect.bisect_left(ordered, intervals[0])]
                intervals.append(interval)
                bisect.insort(ordered, interval)
            self.step, self._last_time = step, now
            ordered = self._ordered  # _median(), without its frame: this runs every step
            median = (
                None
                if len(ordered) < MEDIAN_WINDOW
                else (ordered[_MIDDLE - 1] + ordered[_MIDDLE]) / 2
                if MEDIAN_WINDOW % 2 == 0
                else float(ordered[_MIDDLE])
            )
            publish(step, now, median)

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(
                step=None if self.step == NO_STEP else self.step,
                last_step_time=self._last_time,
                started_time=self._started,
                interval_median_s=self._median(),
                intervals=len(self._intervals),
            )

    def _median(self) -> float | None:
        ordered = self._ordered
        count = len(ordered)
        if count < MEDIAN_WINDOW:
            return None
        # statistics.median's rule, on the window kept in order.
        middle = count // 2
        if count % 2:
            return float(ordered[middle])
        return (ordered[middle - 1] + ordered[middle]) / 2


#: The process's liveness state (one telemetry session at a time).
liveness = Liveness()


def silence(snapshot: Snapshot, rule: StallRule, now: float) -> tuple[float | None, float]:
    """``(seconds silent, stall limit)`` of ``snapshot`` at ``now`` under ``rule``: silent since
    the newest step, or since the session started when there is none (None before either).
    The run is stalled when the first exceeds the second: ``/health`` and the in-process
    ``RLStepStalled`` alert decide it here."""
    limit = rule.limit_s(snapshot.interval_median_s)
    origin = (
        snapshot.last_step_time if snapshot.last_step_time is not None else snapshot.started_time
    )
    return (None if origin is None else max(0.0, now - origin)), limit
