"""The accounting behind every phase: seconds per phase name, added up across threads, and the
clocks phases read.

A phase's two clock readings give its span (while tracing) and the seconds added here. What a
plugin offers through ``register_phases`` (:class:`PhaseKind`) says whether a name's seconds
are the step's own or add up over the run, and whether they are a wall clock's (overlapping
phases count the time they cover once: the union of their intervals) or thread-seconds (every
phase adds its own); the bucket is its span's ``rl.bucket``.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from operator import le
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
    "WallClock",
    "clock_of",
    "overlap_ns",
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
    :param wall_clock: its phases read one wall clock (the driver's, a collector loop's): phases
        of it that overlap (concurrent asyncio tasks, threads) count the time they cover once,
        the union of their intervals, so a step's seconds of it never exceed its wall time.
        Otherwise its seconds are thread-seconds: every phase adds its own (4 threads backing
        off 10 s at once give 40).
    """

    bucket: str | None
    cumulative: bool = False
    wall_clock: bool = False

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


class WallClock:
    """The phases of one wall-clock name in one accounting: the seconds during which at least
    one of them was open (the measure of the union of their intervals).

    A phase appends its start to :attr:`starts` and its end to :attr:`ends`, from any thread:
    a list's append is atomic, so no lock is taken on the timing path. Reading them
    (:meth:`sweep`, under the accounting's lock) counts the phases open between one reading
    and the next and adds the time during which one was; a busy stretch (some phase open
    throughout) counts when it ends, as a phase's own seconds count when it ends.
    """

    __slots__ = ("ends", "last", "open", "since", "starts")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        #: Phases open after the readings taken so far, where their stretch began, and the
        #: latest reading taken (a reading that lands later but is earlier is taken as it).
        self.open = 0
        self.since = 0
        self.last: int | None = None

    def sweep(self, stretches: list[tuple[int, int]] | None = None) -> int | None:
        """Take the readings appended so far; the ns of the busy stretches they close (None
        if they close none: 0 is a stretch of no length), each also appended to
        ``stretches`` when given (as (start, end) in ns)."""
        ends, starts = self.ends, self.starts
        n_ends = len(ends)  # ends first: the start of every end taken is taken too
        n_starts = len(starts)
        if not n_starts and not n_ends:
            return None
        if n_starts == n_ends == 1 and not self.open:  # one phase (a step's, often)
            begun_at, self.last = starts.pop(0), ends.pop(0)
            if stretches is not None:
                stretches.append((begun_at, self.last))
            return max(0, self.last - begun_at)
        begun, ended = starts[:n_starts], ends[:n_ends]
        del starts[:n_starts], ends[:n_ends]  # one step each: appends meanwhile stay
        begun.sort()
        ended.sort()
        if not self.open and n_starts == n_ends and all(map(le, ended, begun[1:])):
            # The common case, phases one after another (each ends before the next
            # starts): the union is their sum. Read in C, as a fold of seconds is.
            self.last = ended[-1]
            if stretches is not None:
                stretches.extend(zip(begun, ended, strict=True))
            return sum(ended) - sum(begun)
        return self._merge(begun, ended, stretches)

    def _merge(
        self, begun: list[int], ended: list[int], stretches: list[tuple[int, int]] | None
    ) -> int | None:
        """The readings in time order, counting the phases open (overlapping phases)."""
        open_, since, last = self.open, self.since, self.last
        closed: int | None = None
        i = j = 0
        n_starts, n_ends = len(begun), len(ended)
        while i < n_starts or j < n_ends:
            if j == n_ends or (i < n_starts and begun[i] <= ended[j]):
                t = begun[i]
                i += 1
                if last is not None and t < last:
                    t = last
                if not open_:
                    since = t
                open_ += 1
            else:
                t = ended[j]
                j += 1
                if last is not None and t < last:
                    t = last
                if open_:  # else an end whose start was never taken here: nothing opens
                    open_ -= 1
                    if not open_:
                        closed = (closed or 0) + t - since
                        if stretches is not None:
                            stretches.append((since, t))
            last = t
        self.open, self.since, self.last = open_, since, last
        return closed

    def split(self, now: int, stretches: list[tuple[int, int]] | None = None) -> int | None:
        """End the window at ``now``: the ns of the open stretch so far (it goes on from
        ``now`` in the next window; None if none is open), appended to ``stretches`` when
        given. Call after :meth:`sweep`."""
        if not self.open:
            return None
        covered = max(0, now - self.since)
        if stretches is not None:
            stretches.append((self.since, now))
        self.since = max(self.since, now)
        self.last = now if self.last is None else max(self.last, now)
        return covered


def overlap_ns(ours: list[tuple[int, int]], theirs: list[tuple[int, int]]) -> int:
    """The ns that two sets of busy stretches (each a union's: disjoint) cover both."""
    ours, theirs = sorted(ours), sorted(theirs)
    both = i = j = 0
    while i < len(ours) and j < len(theirs):
        (a0, a1), (b0, b1) = ours[i], theirs[j]
        both += max(0, min(a1, b1) - max(a0, b0))
        if a1 <= b1:
            i += 1
        else:
            j += 1
    return both


class PhaseSeconds:
    """Seconds per phase name, added up across threads: the step's and the run's accounting,
    and what every :class:`~rlmetrics.tracing.PhaseTimer` adds its phases to.

    ``record(name, seconds)`` adds seconds from any thread without a lock; ``snapshot()`` and
    ``take()`` read them. A phase of a wall-clock name (:class:`PhaseKind`) adds its start and
    end to :meth:`wall_clock`'s instead: overlapping phases count once.
    """

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        # What record() adds waits here until it is read: a deque's append is atomic, which
        # keeps a lock (a third of a phase's cost) off the timing path.
        self._pending: collections.deque[tuple[str, float]] = collections.deque()
        #: The wall-clock names' phases, by name (:class:`WallClock`).
        self._walls: dict[str, WallClock] = {}
        #: The clock reading this accounting was closed at (a step that ended: its phases
        #: still open end in the accounting that is current when they end); None while open.
        self._closed_at: int | None = None
        # Reentrant: a KeyboardInterrupt raised at the end of a ``with self._lock:`` block
        # before the lock's release (CPython's bpo-29988: a tracer's, a debugger's, a
        # notebook's line event) leaves it held by the thread that reads the accounting,
        # which takes it again at its next read instead of waiting for ever.
        self._lock = threading.RLock()
        forget_in_child(self)

    def wall_clock(self, name: str) -> WallClock:
        """The readings of wall-clock name ``name``'s phases here (made on first use)."""
        wall = self._walls.get(name)
        if wall is None:  # setdefault is atomic: two threads' first phases share one
            wall = self._walls.setdefault(name, WallClock())
        return wall

    def close(
        self, now: int, stretches: dict[str, list[tuple[int, int]]] | None = None
    ) -> dict[str, float]:
        """:meth:`take` at ``now``, for good: a phase still open here ends elsewhere."""
        self._closed_at = now
        return self.take(now=now, stretches=stretches)

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

    def _fold(self) -> None:
        """Add what is pending to the totals, unless another thread holds the lock (it is
        reading them: what it leaves waits for the next read)."""
        if self._lock.acquire(blocking=False):
            try:
                self._fold_locked()
            finally:
                self._lock.release()

    def _fold_locked(
        self, now: int | None = None, stretches: dict[str, list[tuple[int, int]]] | None = None
    ) -> dict[str, float]:
        """Add what is pending to the totals; with ``stretches``, each wall-clock name's busy
        stretches counted here go into it too, by name."""
        pending, seconds = self._pending, self._seconds
        while True:
            try:
                name, value = pending.popleft()
            except IndexError:
                break
            seconds[name] = seconds.get(name, 0.0) + value
        # A copy (one step under the GIL): a thread's first phase of a name adds its
        # WallClock without the lock.
        for name, wall in list(self._walls.items()):
            covered_here = None if stretches is None else stretches.setdefault(name, [])
            closed = wall.sweep(covered_here)
            split = None if now is None else wall.split(now, covered_here)
            if closed is not None or split is not None:  # a phase of no length counts: 0 s
                covered = (closed or 0) + (split or 0)
                seconds[name] = seconds.get(name, 0.0) + covered / 1e9
        return seconds

    def snapshot(self) -> dict[str, float]:
        """The seconds so far, per name (a wall-clock name's stretch still open: not yet)."""
        with self._lock:
            return dict(self._fold_locked())

    def take(
        self,
        keep: frozenset[str] = frozenset(),
        now: int | None = None,
        stretches: dict[str, list[tuple[int, int]]] | None = None,
    ) -> dict[str, float]:
        """The seconds so far, then start from zero (except the names in ``keep``). With
        ``now`` (a clock reading), a wall-clock name's phases still open count up to ``now``
        here and from ``now`` in the next window. With ``stretches``, the busy stretches of
        each wall-clock name counted go into it, by name (:func:`overlap_ns`)."""
        with self._lock:
            seconds = self._fold_locked(now, stretches)
            self._seconds = {k: v for k, v in seconds.items() if k in keep}
        return seconds

    def _after_fork_in_child(self) -> None:
        self._lock = threading.RLock()
