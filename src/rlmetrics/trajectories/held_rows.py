"""The rows of trajectories, held until their step is done and then given to the trackers
as one table.

A live trajectory (``rlmetrics.trajectory``) ends on its own, so each would be a
``log_samples`` call of one row, and a loop may log a step's batch in parts (each group as it
completes) or beside live ones: W&B, Trackio and TensorBoard keep a table per call, W&B's
panel shows the latest, SwanLab keeps the first. Held here, a step's rollouts, of either form,
are one table. What a Logger holds is one table's rows, at most ``max_sample_rows`` (a full
table is given at once; rows that would pass it give what was held first, so holding cuts no
row a call of their own would have kept); it is given when the step ends (any
``rlmetrics.step`` of that number), when trajectories of another step (or table) come, and
when the Logger finishes. Spans and metrics are not held: they are recorded at once.
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


class _Held:
    """One Logger's held rows: those of one table ``(name, step)``."""

    __slots__ = ("key", "lock", "rows")

    def __init__(self) -> None:
        # Reentrant: a signal handler that finishes the Logger may run inside hold_rows.
        self.lock = threading.RLock()
        self.key: tuple[str, int] | None = None
        self.rows: list[dict[str, Any]] = []

    def take(self) -> tuple[tuple[str, int] | None, list[dict[str, Any]]]:
        with self.lock:
            taken, self.rows = self.rows, []
            return self.key, taken


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


def _give(logger: Logger, key: tuple[str, int] | None, rows: list[dict[str, Any]]) -> None:
    if key is None or not rows:
        return
    name, step = key
    try:
        logger.log_samples(rows, step, name)
    except Exception:
        warn_once("trajectory:held-rows", "rlmetrics: live trajectory rows could not be logged")


def hold_rows(logger: Logger, rows: list[dict[str, Any]], step: int, name: str) -> None:
    """Hold ``rows`` of trajectories for the table ``name`` at ``step``; what the Logger
    held for another table, or a full table, is given now."""
    with _held_lock:
        held = _held.get(logger)
        if held is None:
            held = _held[logger] = _Held()
    given: list[tuple[tuple[str, int] | None, list[dict[str, Any]]]] = []
    with held.lock:
        if held.key != (name, step) or len(held.rows) + len(rows) > max(1, logger.max_sample_rows):
            given.append(held.take())
            held.key = (name, step)
        held.rows.extend(rows)
        # A full table goes at once; so does a row held after its Logger finished (a rollout
        # that passed the check while finish() ran): given, it is said as any call after
        # finish() is, where held it would be kept for good without a word.
        if len(held.rows) >= max(1, logger.max_sample_rows) or logger._finished:
            given.append(held.take())
    for key, taken in given:
        _give(logger, key, taken)


def release_rows(logger: Logger) -> None:
    """Give what ``logger`` holds (it finishes)."""
    held = _held.get(logger)
    if held is not None:
        _give(logger, *held.take())


def release_step(step: int | None) -> None:
    """Give what any Logger holds of ``step`` (an ``rlmetrics.step`` of it ended)."""
    if step is None or not _held:
        return
    with _held_lock:
        helds = list(_held.items())
    for logger, held in helds:
        with held.lock:
            taken = held.take() if held.key is not None and held.key[1] == step else None
        if taken is not None:
            _give(logger, *taken)
