"""The rows of trajectories, held until their step is done and then given to the trackers
as one table.

A live trajectory (``rlmetrics.trajectory``) ends on its own, so each would be a
``log_samples`` call of one row, and a loop may log a step's batch in parts (each group as it
completes) or beside live ones: W&B, Trackio and TensorBoard keep a table per call, W&B's
panel shows the latest, SwanLab keeps the first. Held here, a step's rollouts, of either form,
are one table. A Logger holds the tables of two steps at once: an async trainer's rollouts of
consecutive steps end interleaved (a long rollout of step n ends after step n+1's began), and
giving the held table at every change of step cut each step into parts. Each table holds at
most ``max_sample_rows`` rows (a full table is given at once; rows that would pass it give
what was held first, so holding cuts no row a call of their own would have kept); a table is
given when its step ends (the end of an ``rlmetrics.step`` of that number or a later one),
when rows of a third step come (the oldest step's goes), and when the Logger finishes. Spans
and metrics are not held: they are recorded at once.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

from .._fork import reset_in_child
from .._warn import warn_once

if TYPE_CHECKING:
    from ..logger import Logger

__all__ = ["hold_rows", "release_rows", "release_step"]


#: The steps whose tables a Logger holds at once (see the module's docstring).
HELD_STEPS = 2

_Table = tuple[tuple[str, int], list[dict[str, Any]]]


class _Held:
    """One Logger's held rows: a table ``(name, step)`` each, at most HELD_STEPS steps."""

    __slots__ = ("lock", "tables")

    def __init__(self) -> None:
        # Reentrant: a signal handler that finishes the Logger may run inside hold_rows.
        self.lock = threading.RLock()
        self.tables: dict[tuple[str, int], list[dict[str, Any]]] = {}

    def take(self, key: tuple[str, int]) -> _Table:
        """The table ``key``'s rows, no longer held (``lock`` held)."""
        return key, self.tables.pop(key, [])

    def take_through(self, step: int | None) -> list[_Table]:
        """Every table of a step up to ``step`` (every one: None), oldest step first."""
        with self.lock:
            keys = sorted(
                (k for k in self.tables if step is None or k[1] <= step), key=lambda k: k[1]
            )
            return [self.take(k) for k in keys]


_held: weakref.WeakKeyDictionary[Logger, _Held] = weakref.WeakKeyDictionary()
# Reentrant: a SIGTERM handler that ends the step runs on the thread that may be holding it.
_held_lock = threading.RLock()


@reset_in_child
def _forget_after_fork() -> None:
    """A forked child (a DataLoader worker) holds nothing: the rows it has in memory are its
    parent's to give, and a lock another thread held at the fork stays locked."""
    global _held, _held_lock
    _held = weakref.WeakKeyDictionary()
    _held_lock = threading.RLock()


def _give(logger: Logger, key: tuple[str, int], rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    name, step = key
    try:
        logger.log_samples(rows, step, name)
    except Exception:
        warn_once("trajectory:held-rows", "rlmetrics: live trajectory rows could not be logged")


def hold_rows(logger: Logger, rows: list[dict[str, Any]], step: int, name: str) -> None:
    """Hold ``rows`` of trajectories for the table ``name`` at ``step``; a full table, or the
    oldest step's when this makes a third, is given now."""
    with _held_lock:
        held = _held.get(logger)
        if held is None:
            held = _held[logger] = _Held()
    given: list[_Table] = []
    limit = max(1, logger.max_sample_rows)
    key = (name, step)
    with held.lock:
        tables = held.tables
        table = tables.get(key)
        if table is not None and len(table) + len(rows) > limit:
            given.append(held.take(key))
            table = None
        if table is None:
            table = tables[key] = []
        table.extend(rows)
        steps = {k[1] for k in tables}
        if len(steps) > HELD_STEPS:  # a third step's rows: the oldest step's tables go
            oldest = min(steps)
            given.extend(held.take(k) for k in list(tables) if k[1] == oldest)
        # A full table goes at once; so does a row held after its Logger finished (a rollout
        # that passed the check while finish() ran): given, it is said as any call after
        # finish() is, where held it would be kept for good without a word.
        if key in tables and (len(table) >= limit or logger._finished):
            given.append(held.take(key))
    for taken in given:
        _give(logger, *taken)


def release_rows(logger: Logger) -> None:
    """Give what ``logger`` holds (it finishes), oldest step first."""
    held = _held.get(logger)
    if held is not None:
        for taken in held.take_through(None):
            _give(logger, *taken)


def release_step(step: int | None) -> None:
    """Give what any Logger holds of ``step`` or an earlier step (an ``rlmetrics.step`` of
    ``step`` ended: the loop is past them)."""
    if step is None or not _held:
        return
    with _held_lock:
        helds = list(_held.items())
    for logger, held in helds:
        for taken in held.take_through(step):
            _give(logger, *taken)
