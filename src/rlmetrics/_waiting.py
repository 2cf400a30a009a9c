"""Bounded waits that let the main thread's signal handlers run while they wait.

The kernel hands a process's signal (SLURM's SIGTERM, a Ctrl-C) to whichever of its threads
does not block it. Taken by another thread (a stalled tracker's, an exporter's), CPython's C
handler only sets a flag: the Python handler runs when the main thread next runs bytecode. A
main thread blocked in one long ``join`` or ``wait`` runs it only when that wait ends, so a
training job's SIGTERM handler would sit out the whole bound (``Logger.finish``'s 30 s, an
exporter's shutdown) while the scheduler's kill approaches. These waits block in slices of
:data:`SLICE_S`, between which the interpreter runs what is pending.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["SLICE_S", "is_bound", "join", "put", "wait", "wait_for"]

#: The longest one blocking call lasts: how late a signal taken by another thread is handled.
SLICE_S = 0.05


def is_bound(timeout_s: Any) -> bool:
    """Whether ``timeout_s`` is a wait's bound: a number of 0 or more (``inf``: no bound). A
    caller's string, NaN or negative number would fail, or wait for nothing, deep in a wait."""
    return (
        isinstance(timeout_s, (int, float))
        and not isinstance(timeout_s, bool)
        and timeout_s >= 0  # False for NaN too
    )


def _sliced(done: Callable[[float], bool], timeout_s: float) -> bool:
    """Call ``done(slice)`` until it is true or ``timeout_s`` has passed; whether it was."""
    deadline = time.monotonic() + max(timeout_s, 0.0)
    while True:
        left = deadline - time.monotonic()
        if done(min(max(left, 0.0), SLICE_S)):
            return True
        if left <= 0:
            return False


def join(thread: threading.Thread, timeout_s: float) -> bool:
    """``thread.join(timeout_s)``, in slices; whether the thread has ended."""

    def ended(slice_s: float) -> bool:
        thread.join(slice_s)
        return not thread.is_alive()

    return _sliced(ended, timeout_s)


def wait(event: threading.Event, timeout_s: float) -> bool:
    """``event.wait(timeout_s)``, in slices; whether the event is set."""
    return _sliced(event.wait, timeout_s)


def wait_for(
    condition: threading.Condition, predicate: Callable[[], bool], timeout_s: float
) -> bool:
    """``condition.wait_for(predicate, timeout_s)``, in slices; the caller holds the
    condition's lock, as for ``wait_for``. Whether the predicate holds."""
    return _sliced(lambda slice_s: condition.wait_for(predicate, slice_s), timeout_s)


def put(into: queue.Queue[Any], item: Any, timeout_s: float) -> None:
    """``into.put(item, timeout=timeout_s)``, in slices; raises ``queue.Full`` as it does."""

    def taken(slice_s: float) -> bool:
        try:
            into.put(item, timeout=slice_s)
        except queue.Full:
            return False
        return True

    if not _sliced(taken, timeout_s):
        raise queue.Full
