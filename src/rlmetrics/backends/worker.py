"""A backend on a thread of its own, behind a bounded queue: a stalled tracker costs its own
rows, never the training loop's time.

Real trackers stall — a remote MLflow server that stops answering, a W&B network hiccup — and
a training step must not wait for them. So the Logger hands each row to a
:class:`BackendWorker`, which returns at once: the row is queued (in order) for the backend's
own thread, or, when the queue is full because the backend is not keeping up, dropped and
counted, reported once. ``finish()`` waits a bounded time and says what did not make it.

Backends that never block and must be durable when the call returns (the local JSONL file,
the console) declare ``inline = True`` and are called on the caller's thread instead.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

from .._warn import logger, warn_once

__all__ = ["DEFAULT_QUEUE_SIZE", "BackendWorker", "is_inline"]

#: Rows a backend may fall behind before further rows for it are dropped.
DEFAULT_QUEUE_SIZE = 10_000

_FINISH = object()


def is_inline(backend: Any) -> bool:
    """Whether ``backend`` asked to run on the caller's thread (``inline = True``)."""
    return getattr(backend, "inline", False) is True


class BackendWorker:
    """Runs ``backend`` on a daemon thread, fed by a queue of at most ``queue_size`` rows."""

    def __init__(self, name: str, backend: Any, queue_size: int = DEFAULT_QUEUE_SIZE) -> None:
        self.name = name
        self.backend = backend
        self.dropped = 0
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._pid = os.getpid()
        self._thread = threading.Thread(
            target=self._run, name=f"rlmetrics-backend-{name}", daemon=True
        )
        self._thread.start()

    # -- the caller's side: never blocks ---------------------------------------------------

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        if os.getpid() != self._pid:
            # A forked child inherits the queue but not the thread that drains it.
            warn_once(
                f"backend:{self.name}:forked",
                f"rlmetrics: backend {self.name!r} belongs to the parent process; rows a forked "
                "child logs through it are dropped (create a Logger in the child)",
            )
            return
        try:
            self._queue.put_nowait((metrics, step, prefix))
        except queue.Full:
            self.dropped += 1
            warn_once(
                f"backend:{self.name}:full",
                f"rlmetrics: backend {self.name!r} is not keeping up (its queue of "
                f"{self._queue.maxsize} rows is full); rows for it are dropped and counted "
                "until it catches up. The training loop, the other backends and telemetry "
                "are unaffected",
            )

    def finish(self, deadline: float, timeout_s: float) -> None:
        """Write what is queued, then finish the backend, waiting until ``deadline``
        (``time.monotonic()``, ``timeout_s`` after the Logger's finish began); report what was
        dropped or left unwritten."""
        if os.getpid() != self._pid:
            return
        with contextlib.suppress(queue.Full):  # a full queue: the join below reports it
            self._queue.put(_FINISH, timeout=max(0.0, deadline - time.monotonic()))
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            logger.warning(
                "rlmetrics: backend %r did not finish within %.1f s: %d queued rows not "
                "written, %d rows dropped while it was not keeping up",
                self.name,
                timeout_s,
                self._queue.qsize(),
                self.dropped,
            )
        elif self.dropped:
            logger.warning(
                "rlmetrics: backend %r finished; %d rows dropped while it was not keeping up",
                self.name,
                self.dropped,
            )

    # -- the backend's thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _FINISH:
                try:
                    self.backend.finish()
                except Exception:
                    warn_once(
                        f"backend:{self.name}:finish",
                        f"rlmetrics: backend {self.name!r} failed to finish",
                    )
                return
            try:
                self.backend.log_metrics(*item)
            except Exception:
                warn_once(
                    f"backend:{self.name}:log",
                    f"rlmetrics: backend {self.name!r} failed to log a step; the other backends "
                    "and telemetry still got it",
                )
