"""The accounting behind every phase: seconds per phase name, added up across threads, and the
clocks phases read.

A phase's two clock readings give its span (while tracing) and the seconds added here. What a
plugin offers through ``register_phases`` (:class:`PhaseKind`) says whether a name's seconds
are the step's own or add up over the run; the bucket is its span's ``rl.bucket``.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from .._fork import forget_in_child
from .._warn import describe_value, warn_once
from ..values import finite_float

__all__ = [
    "BUCKETS",
    "DEFAULT_CLOCK",
    "MAX_PENDING",
    "Clock",
    "PhaseKind",
    "PhaseSeconds",
    "clock_of",
]

#: The goodput buckets a leaf span may carry (NeMo-RL's ``Bucket``).
BUCKETS = frozenset({"productive", "overhead", "idle", "wasted"})

#: Records a timer holds unread before it adds them up on the recording thread.
MAX_PENDING = 4096


@attrs.frozen
class PhaseKind:
    """How a named phase is accounted, as a plugin's ``register_phases`` hook offers it.

    :param bucket: the ``rl.bucket`` its span carries; None for a span with no bucket (time a
        trace has no way to tell apart, such as a collector loop's wait).
    :param cumulative: its seconds add up over the whole run and every step's summary carries
        the total so far; otherwise they are the step's own and start from zero each step.
    """

    bucket: str | None
    cumulative: bool = False

    def __attrs_post_init__(self) -> None:
        if self.bucket is not None and self.bucket not in BUCKETS:
            raise ValueError(f"PhaseKind bucket must be one of {sorted(BUCKETS)} or None")


# -- clocks -------------------------------------------------------------------------------------

#: Unix time minus perf_counter at import, in ns: the default clock is monotonic (a phase
#: never has a negative length) and still dates spans in Unix time.
_EPOCH_OFFSET_NS = time.time_ns() - time.perf_counter_ns()


@attrs.frozen
class Clock:
    """``now()`` in ns, and what turns a reading into Unix ns for a span."""

    now: Callable[[], int]
    offset: int


DEFAULT_CLOCK = Clock(time.perf_counter_ns, _EPOCH_OFFSET_NS)


def clock_of(seconds: Callable[[], float] | None) -> Clock:
    """The default clock, or one from a function returning seconds (Unix time, for sensible
    span timestamps; any origin works for the accounting)."""
    if seconds is None or seconds is time.perf_counter:
        return DEFAULT_CLOCK
    if not callable(seconds):
        raise TypeError(f"clock must be a function returning seconds, got {type(seconds)}")

    last: list[int] = []  # the last good reading: what a failed one gives

    def now() -> int:
        try:
            reading = round(seconds() * 1e9)  # None, text, NaN, inf: a TypeError or ValueError
        except Exception:  # a clock of the caller's (a simulation's) is read in their loop
            warn_once(
                "tracing:clock",
                f"rlmetrics: the clock {describe_value(seconds)} passed to rlmetrics.run / a "
                "timer raised or gave no number of seconds; its last reading is used (time "
                "stands still; the real time before its first). Give a function that returns "
                "Unix seconds as a float",
            )
            return last[0] if last else time.time_ns()
        last[:] = (reading,)
        return reading

    return Clock(now, 0)


# -- seconds per name ---------------------------------------------------------------------------


_INFINITY = float("inf")


def _duration(seconds: Any) -> float | None:
    """``seconds`` as a float of seconds from 0 (a NumPy or torch number too), or None."""
    number = finite_float(seconds)
    return number if number is not None and number >= 0 else None


class PhaseSeconds:
    """Seconds per phase name, added up across threads: the step's and the run's accounting,
    and what every :class:`~rlmetrics.tracing.PhaseTimer` adds its phases to.

    ``record(name, seconds)`` adds seconds from any thread without a lock; ``snapshot()`` and
    ``take()`` read them.
    """

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        # What record() adds waits here until it is read: a deque's append is atomic, which
        # keeps a lock (a third of a phase's cost) off the timing path.
        self._pending: collections.deque[tuple[str, float]] = collections.deque()
        self._lock = threading.Lock()
        forget_in_child(self)

    def record(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to ``name`` (from any thread). Seconds that are no duration (not a
        finite number from 0) are dropped, said once: added to a total, they would make it
        unknown or wrong for as long as it is kept (a run's, for good)."""
        if type(seconds) is not float or not 0.0 <= seconds < _INFINITY:  # NaN fails both
            duration = _duration(seconds)
            if duration is None:
                warn_once(
                    "tracing:seconds",
                    f"rlmetrics: {describe_value(seconds)} recorded as the seconds of {name!r} "
                    "is no number of seconds from 0; dropped, the other seconds add up. Later "
                    "ones are reported at DEBUG",
                )
                return
            seconds = duration
        pending = self._pending
        pending.append((name, seconds))
        if len(pending) > MAX_PENDING:  # a timer nobody reads stays bounded
            self._fold()

    def _fold(self) -> dict[str, float]:
        """Add what is pending to the totals; the caller holds the lock or takes it here."""
        with self._lock:
            return self._fold_locked()

    def _fold_locked(self) -> dict[str, float]:
        pending, seconds = self._pending, self._seconds
        while True:
            try:
                name, value = pending.popleft()
            except IndexError:
                return seconds
            seconds[name] = seconds.get(name, 0.0) + value

    def snapshot(self) -> dict[str, float]:
        """The seconds so far, per name."""
        with self._lock:
            return dict(self._fold_locked())

    def take(self, keep: frozenset[str] = frozenset()) -> dict[str, float]:
        """The seconds so far, then start from zero (except the names in ``keep``)."""
        with self._lock:
            seconds = self._fold_locked()
            self._seconds = {k: v for k, v in seconds.items() if k in keep}
        return seconds

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
