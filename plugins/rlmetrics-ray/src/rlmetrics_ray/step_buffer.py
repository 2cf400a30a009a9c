"""StepBuffer: where the Ray workers' rows of one step meet, until the driver takes them.

The driver's reducer (:mod:`rlmetrics_ray.ranks`) runs this class as an async Ray actor on
its own node; every worker ``push``-es its numbers of each logged dict to it without
waiting, and the driver long-polls ``take``. Nothing here imports Ray, so the rendezvous
rules are tested as plain Python.

A step of a stream (a worker Logger's prefix, or the efficiency summary's) is released to
the driver when every expected rank has pushed it, or once ``late_after_s`` has passed since
its first row arrived: the driver then merges the ranks that did arrive and names the ones
that did not. A rank that missed a step is not waited for again until it pushes once more
(a dead worker costs one wait, not one per step; a late one rejoins by pushing). Steps of a
stream are released lowest first (an async actor does not keep one caller's calls in order:
a rank's step 2 may arrive before its step 1), so the trackers see them in order. A row for
a step already released is dropped and counted per rank.

Expected ranks: ``range(world_size)`` when the driver or any worker says the world size,
else every rank that joined.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable

import attrs

__all__ = ["Gathered", "StepBuffer", "Taken"]

#: Released steps remembered per stream, to tell a late row from a new step.
_REMEMBERED = 4096


@attrs.frozen
class Gathered:
    """One step of one stream: ``rows[rank]`` is that rank's numbers; ``missing`` the
    expected ranks that had not pushed it when it was released; ``exported`` whether every
    rank that pushed it exports its own values (``ray_rank(export_own=True)``)."""

    stream: str
    step: int
    prefix: str
    rows: dict[int, dict[str, float]]
    missing: tuple[int, ...]
    exported: bool = False


@attrs.frozen
class Taken:
    """What one ``take`` hands the driver: the released steps in order, the rows that came
    after their step was released (``(rank, stream, step)``), the steps still pending, and the
    ranks two workers held at once."""

    gathered: list[Gathered]
    late: list[tuple[int, str, int]]
    pending: int
    world_size: int | None
    #: Ranks a second worker joined while another held them.
    joined_twice: list[int] = attrs.field(factory=list)

    @property
    def news(self) -> bool:
        """Whether there is anything for the driver: a step, a late row, a rank held twice."""
        return bool(self.gathered or self.late or self.joined_twice)


@attrs.define
class _Pending:
    prefix: str
    first: float
    rows: dict[int, dict[str, float]] = attrs.Factory(dict)
    exported: set[int] = attrs.Factory(set)  # the ranks that export their own values


class StepBuffer:
    """The rendezvous of the workers' rows (see the module).

    :param world_size: the number of ranks, if the driver knows it (else the workers say it
        when they join, else every joined rank is expected).
    :param late_after_s: how long a step waits for its missing ranks after its first row.
    """

    def __init__(
        self,
        world_size: int | None = None,
        late_after_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.world_size = world_size
        self.late_after_s = late_after_s
        self._clock = clock
        self._joined: set[int] = set()
        self._absent: set[int] = set()
        self._pending: dict[str, dict[int, _Pending]] = {}
        self._released: dict[str, deque[int]] = {}
        self._released_set: dict[str, set[int]] = {}
        self._late: list[tuple[int, str, int]] = []
        self._arrived: asyncio.Event | None = None
        self._run: tuple[str, bool] | None = None
        # Workers holding each rank (joined, not yet left), and the ranks a second worker
        # joined while another held them, for the driver to report.
        self._holders: dict[int, int] = {}
        self._twice: list[int] = []
        self._run_named: asyncio.Event | None = None

    # -- the workers' side ------------------------------------------------------------------

    def join(self, rank: int | None = None, world_size: int | None = None) -> int:
        """A worker's rank: the one it gives, else the lowest not taken."""
        if world_size is not None and self.world_size is None:
            self.world_size = int(world_size)
        if rank is None:
            rank = next(r for r in range(len(self._joined) + 1) if r not in self._joined)
        rank = int(rank)
        if self._holders.get(rank, 0) > 0:
            self._twice.append(rank)  # their rows of a step would overwrite each other's
        self._holders[rank] = self._holders.get(rank, 0) + 1
        self._joined.add(rank)
        self._absent.discard(rank)
        return rank

    def leave(self, rank: int) -> None:
        """A worker's Logger finished (a task that logged its step, an actor shutting down):
        its rank is not waited for any more, and is given out again to the next worker that
        asks for one (without a world size, the expected ranks are the joined ones)."""
        rank = int(rank)
        held = self._holders.get(rank, 0) - 1
        if held > 0:
            self._holders[rank] = held
            return  # another worker still holds it
        self._holders.pop(rank, None)
        self._joined.discard(rank)
        self._absent.discard(rank)
        if self._arrived is not None:
            self._arrived.set()  # a step that waited only for this rank is complete now

    async def run(self, wait_s: float = 10.0) -> tuple[str, bool] | None:
        """The driver's run (its id and whether it resumes), for a worker whose run id nobody
        gave: waits up to ``wait_s`` for the driver to name it, since a worker may ask as soon
        as the buffer is alive, before the driver's own call arrives. None if it never does."""
        if self._run is None and wait_s > 0:
            self._run_named = self._run_named or asyncio.Event()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._run_named.wait(), timeout=wait_s)
        return self._run

    def push(
        self,
        rank: int,
        stream: str,
        step: int,
        prefix: str,
        numbers: dict[str, float],
        exported: bool = False,
    ) -> None:
        """One rank's numbers of one logged dict; ``exported``: the rank exports its own."""
        self._joined.add(rank)
        self._absent.discard(rank)  # a rank that missed steps is back
        if step in self._released_set.get(stream, ()):
            self._late.append((rank, stream, step))
            return
        steps = self._pending.setdefault(stream, {})
        pending = steps.get(step)
        if pending is None:
            pending = steps[step] = _Pending(prefix, self._clock())
        # The same step logged twice under one stream: one row, the later value wins.
        pending.rows.setdefault(rank, {}).update(numbers)
        if exported:
            pending.exported.add(rank)
        if self._arrived is not None:
            self._arrived.set()

    # -- the driver's side ------------------------------------------------------------------

    def set_run(self, run_id: str, resume: bool = False) -> None:
        """The driver's run, which the workers' rows name (see :meth:`run`)."""
        self._run = (str(run_id), bool(resume))
        if self._run_named is not None:
            self._run_named.set()

    def expected(self) -> set[int]:
        ranks = set(range(self.world_size)) if self.world_size is not None else set()
        return (ranks | self._joined) - self._absent

    async def take(self, wait_s: float = 0.5, flush: bool = False) -> Taken:
        """The steps released now; waits up to ``wait_s`` for one when there is none.
        ``flush`` releases every pending step at once (the driver is closing)."""
        taken = self.release(flush)
        if not taken.news and wait_s > 0 and not flush:
            self._arrived = self._arrived or asyncio.Event()
            self._arrived.clear()
            deadline = self._clock() + wait_s
            # Each release hands over what it found: the first with anything is returned.
            while not taken.news and (remaining := deadline - self._clock()) > 0:
                wake = min(remaining, self._next_deadline() - self._clock())
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._arrived.wait(), timeout=max(wake, 0.001))
                self._arrived.clear()
                taken = self.release(False)
        return taken

    def release(self, flush: bool = False) -> Taken:
        """The steps that are complete or waited long enough, in order per stream."""
        now = self._clock()
        gathered: list[Gathered] = []
        for stream, steps in self._pending.items():
            # The lowest step of each stream goes first: an async actor does not keep one
            # caller's calls in order, so a rank's step 2 may arrive before its step 1.
            while steps:
                step = min(steps)
                pending = steps[step]
                expected = self.expected()
                complete = expected <= pending.rows.keys()
                if not (complete or flush or now - pending.first >= self.late_after_s):
                    break
                del steps[step]
                everyone = set(range(self.world_size)) if self.world_size is not None else set()
                missing = tuple(sorted((everyone | self._joined) - pending.rows.keys()))
                # Not waited for again until they push once more.
                self._absent.update(r for r in missing if r in expected)
                exported = bool(pending.rows) and pending.rows.keys() <= pending.exported
                gathered.append(
                    Gathered(stream, step, pending.prefix, pending.rows, missing, exported)
                )
                self._remember(stream, step)
        late, self._late = self._late, []
        twice, self._twice = self._twice, []
        pending_count = sum(len(steps) for steps in self._pending.values())
        return Taken(gathered, late, pending_count, self.world_size, twice)

    def _remember(self, stream: str, step: int) -> None:
        order = self._released.setdefault(stream, deque())
        seen = self._released_set.setdefault(stream, set())
        order.append(step)
        seen.add(step)
        if len(order) > _REMEMBERED:
            seen.discard(order.popleft())

    def _next_deadline(self) -> float:
        firsts = [steps[min(steps)].first for steps in self._pending.values() if steps]
        return min(firsts) + self.late_after_s if firsts else float("inf")
