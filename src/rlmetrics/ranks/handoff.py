"""A bounded, ordered hand-off from the training loop's thread to one thread of its own.

:class:`~rlmetrics.ranks.RankMerger` runs each step's collective and reduction here, off the
step's thread: the loop pays for a copy of its dict and a queue put. Jobs run one at a time,
in the order they were handed over (the ranks' collectives must line up, and rank 0's rows
reach the trackers in step order). The queue is bounded: a loop that outruns the thread (a
collective waiting on a rank that hangs) waits for room at most ``full_wait_s`` once, then
is told so (:meth:`Handoff.put` returns False) rather than blocked or left growing.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import _waiting

__all__ = ["DEFAULT_FULL_WAIT_S", "DEFAULT_MAX_PENDING", "Handoff"]

#: Jobs (logged dicts) the thread may fall behind before the loop is told.
DEFAULT_MAX_PENDING = 1024
#: How long a put waits for room once, when the queue is full, before it gives up.
DEFAULT_FULL_WAIT_S = 1.0

_STOP = object()


class Handoff:
    """``work(job)`` on a thread named ``name``, for each job :meth:`put`, in order.

    ``work`` must not raise (an exception is swallowed: the thread goes on with the next)."""

    def __init__(
        self,
        work: Callable[[Any], None],
        name: str,
        max_pending: int = DEFAULT_MAX_PENDING,
        full_wait_s: float = DEFAULT_FULL_WAIT_S,
    ) -> None:
        self._work = work
        self.max_pending = max_pending
        self.full_wait_s = full_wait_s
        # SimpleQueue: a put in C, no lock taken in Python on the loop's thread.
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # Loggers on several threads put. next() on the count is atomic, but one number
        # stored for all could be stored out of order (6 then 5), leaving ``pending`` one
        # short while a job waits; each thread keeps the last number it drew instead, and the
        # jobs handed are their largest. A lock instead cost the put 5x (measured: ~1 µs).
        self._count = itertools.count(1)
        self._drawn: dict[int, int] = {}
        self._done = 0
        self._changed = threading.Condition()
        #: Whether the last put found the queue full and gave up (then the next does not wait).
        self._gave_up = False
        self.closed = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    @property
    def pending(self) -> int:
        """Jobs handed over and not done (queued, or the one running)."""
        drawn = self._drawn.copy()  # a put on another thread may add a key meanwhile
        return (max(drawn.values()) if drawn else 0) - self._done

    def put(self, job: Any) -> bool:
        """Queue ``job``; False when it was not (closed, or still full after the wait)."""
        if self.closed:
            return False
        if self._queue.qsize() >= self.max_pending:
            wait_s = 0.0 if self._gave_up else self.full_wait_s
            with self._changed:
                room = _waiting.wait_for(
                    self._changed,
                    lambda: self._queue.qsize() < self.max_pending or self.closed,
                    wait_s,
                )
            if not room or self.closed:
                self._gave_up = True
                return False
        self._gave_up = False
        self._drawn[threading.get_ident()] = next(self._count)
        self._queue.put(job)
        return True

    def drain(self, timeout_s: float) -> list[Any]:
        """Wait at most ``timeout_s`` for every job handed over to be done, then close: the
        thread ends after the job it runs. The jobs it will not start, in order."""
        deadline = time.monotonic() + max(timeout_s, 0.0)
        self.wait_idle(timeout_s)
        with self._changed:
            self.closed = True
            self._changed.notify_all()
        left: list[Any] = []
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not _STOP:
                left.append(job)
        self._queue.put(_STOP)
        if not left and self.pending <= 0:
            _waiting.join(self.thread, max(deadline - time.monotonic(), 0.0) + 1.0)
        return left

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` until every job handed over is done; whether it is."""
        with self._changed:
            return _waiting.wait_for(self._changed, lambda: self.pending <= 0, timeout_s)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            try:
                if not self.closed:
                    self._work(job)
            except Exception:  # the work says its own failures; the thread goes on
                pass
            with self._changed:
                self._done += 1
                self._changed.notify_all()
