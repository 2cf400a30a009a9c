"""A backend on a thread of its own, behind a bounded queue: a stalled tracker costs its own
rows, never the training loop's time.

Real trackers stall — a remote MLflow server that stops answering, a W&B network hiccup — and
a training step must not wait for them. So the Logger hands each row to a
:class:`BackendWorker`, which returns at once: the row is queued (in order) for the backend's
own thread, or, when the queue is full because the backend is not keeping up, dropped and
counted, reported once. ``finish()`` waits a bounded time and says what did not make it.

A Logger that is never finished is finished when the interpreter exits (the end of the script,
``sys.exit``, an uncaught exception, a SIGTERM a Python handler turns into ``SystemExit``):
every queued backend writes what it holds within ``Logger(exit_timeout_s=)``, and what it could
not write in that bound is counted and said. The drain is one of threading's exit hooks, not an
``atexit`` handler: those run only after every ``atexit`` handler a tracker registered when it
was imported after rlmetrics (tensorboardX closes its event files there, MLflow ends its
fluent run), and rows drained after them would reach a closed writer.

A tracker whose every request has a fixed cost (MLflow's ``log_batch``: tens of milliseconds
for one row or hundreds) falls behind a loop that logs faster than that, one request per row.
A backend with ``log_metrics_rows(rows)`` (:class:`~.TakesRows`) is handed the rows queued
behind each other in one call instead, in order; the first row it did not write (a request
failed) is written again alone, so a row the tracker refuses costs only itself, and the rest
go on as a backlog.

Backends that never block and must be durable when the call returns (the local JSONL file,
the console) declare ``inline = True`` and are called on the caller's thread instead.

A queued row is written later, on another thread, while the loop goes on refilling its buffers
(a NumPy array reused every step, a list cleared and appended to). So what is queued is a
:func:`snapshot` taken on the caller's thread: plain numbers, strings, fresh containers and
copies of arrays, never a reference to the loop's objects.
"""

from __future__ import annotations

import atexit
import inspect
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .. import _waiting
from .._process_state import resets_process_state
from .._warn import describe_value, logger, warn_once
from ..flatten import key_text
from ..values import as_plain, readable_items
from . import BackendUnavailable, exit_status

__all__ = [
    "DEFAULT_EXIT_TIMEOUT_S",
    "DEFAULT_QUEUE_SIZE",
    "MAX_BATCH_ROWS",
    "MAX_SNAPSHOT_DEPTH",
    "BackendWorker",
    "InlineBackend",
    "at_exit",
    "begin_exit",
    "drain_at_exit",
    "ended_by_exception",
    "exits_failed",
    "is_inline",
    "live_backends",
    "snapshot",
]

#: Rows a backend may fall behind before further rows for it are dropped.
DEFAULT_QUEUE_SIZE = 10_000
#: How long the interpreter's exit waits for queued backends to write what they hold
#: (``Logger(exit_timeout_s=)``). A SIGTERM leaves a job a grace period before SIGKILL
#: (Kubernetes' default 30 s, SLURM's KillWait 30 s), which telemetry's own shutdown (5 s) and
#: the trackers' exit handlers share.
DEFAULT_EXIT_TIMEOUT_S = 10.0
#: The most queued rows a backend with ``log_metrics_rows`` (:class:`~.TakesRows`) gets in one
#: call, when it has fallen behind.
MAX_BATCH_ROWS = 500

_FINISH = object()

#: Containers nested deeper than this in one logged value are queued as a description.
MAX_SNAPSHOT_DEPTH = 32
# Values that cannot change after the call: queued as they are.
_IMMUTABLE = frozenset({float, int, bool, str, bytes, type(None)})


def snapshot(value: Any) -> Any:
    """``value`` as independent data, taken now: what a queued backend may write later.

    Python numbers, strings and bytes as they are; NumPy and torch scalars and one-element
    arrays as their plain number (:func:`~rlmetrics.values.as_plain`); a longer NumPy array
    as a copy, a longer torch tensor as a detached copy on the CPU — arrays still, so a
    tracker applies its own rules to them (W&B makes a histogram of one past 32 elements,
    MLflow summarises it); lists, tuples and mappings rebuilt from their elements' snapshots
    (a mapping's keys as strings, an unreadable entry skipped; a named tuple as its own type);
    a ``bytearray`` as ``bytes``.
    Anything else (a tracker's own media object, a value whose conversion raises) is passed
    as it is. A container nested past :data:`MAX_SNAPSHOT_DEPTH` levels, or inside itself,
    becomes a description. Never raises; serves any payload a queued backend is handed.
    """
    on_path: set[int] = set()

    def copy(value: Any, depth: int) -> Any:
        kind = type(value)
        if kind in _IMMUTABLE:
            return value
        if kind is dict or kind is list or isinstance(value, (Mapping, list, tuple)):
            if depth >= MAX_SNAPSHOT_DEPTH or id(value) in on_path:
                why = "inside itself" if id(value) in on_path else "nested too deeply"
                return f"<{describe_value(value)} {why}>"
            if _plain_container(value):
                return value.copy()  # the common case (a flat dict, a list of numbers), in C
            on_path.add(id(value))
            try:
                if isinstance(value, Mapping):
                    return {key_text(k): copy(v, depth + 1) for k, v in readable_items(value)}
                items = [copy(v, depth + 1) for v in list(value)]
                if not isinstance(value, tuple):
                    return items
                if kind is not tuple and hasattr(kind, "_fields"):
                    # A named tuple is read by its fields: rebuilt as its own type.
                    try:
                        return kind._make(items)
                    except Exception:
                        pass  # a _make of its own that will not take them: a plain tuple
                return tuple(items)
            except Exception:  # a sequence whose iteration raises: that value only
                return f"<unreadable {kind.__name__}>"
            finally:
                on_path.discard(id(value))
        if isinstance(value, (str, bytes)):
            return value
        if isinstance(value, bytearray):
            return bytes(value)
        copied = _copied_array(value)
        # Any other NumPy or torch value: .item() and .tolist() give new plain Python data.
        return as_plain(value) if copied is None else copied

    return copy(value, 0)


def _copied_array(value: Any) -> Any:
    """An independent copy of a NumPy array or torch tensor of more than one element, of its
    own kind; None for anything else (or a copy that raises)."""
    package = type(value).__module__.partition(".")[0]
    try:
        if package == "numpy" and getattr(value, "size", 1) > 1:
            return value.copy()
        if package == "torch" and callable(getattr(value, "numel", None)) and value.numel() > 1:
            return value.detach().to("cpu", copy=True)
    except Exception:
        return None
    return None


_STR = frozenset({str})


def _plain_container(value: Any) -> bool:
    """Whether ``value`` is a plain list of immutable values, or a plain dict of them under
    string keys (checked in C, by issuperset of an iterator: no set is built)."""
    if type(value) is list:
        return _IMMUTABLE.issuperset(map(type, value))
    return (
        type(value) is dict
        and _STR.issuperset(map(type, value))
        and _IMMUTABLE.issuperset(map(type, value.values()))
    )


# Every backend runner of a Logger still alive, for the health path (what they count lives as
# long as its Logger).
_live: weakref.WeakSet[Any] = weakref.WeakSet()

#: Called with ``(backend name, "dropped" or "failed", rows)`` each time a backend loses rows
#: (rows it could not write by its finish bound count as dropped); the ``pipeline`` family sets
#: it to count the loss as ``rlmetrics.backend.*`` while telemetry runs.
loss_listener: Callable[[str, str, int], None] | None = None

#: ``(deadline, bound)`` once the interpreter is exiting: no backend's finish waits past it.
_exiting: tuple[float, float] | None = None


@resets_process_state
def _not_exiting() -> None:
    global _exiting
    _exiting = None


def _lose(name: str, reason: str, rows: int = 1) -> None:
    listener = loss_listener
    if listener is not None:
        try:
            listener(name, reason, rows)
        except Exception:
            warn_once("backend:loss-listener", "rlmetrics: counting a backend's lost row failed")


def live_backends() -> Iterator[Any]:
    """The backend runners of every live Logger: each has ``name`` and ``failed`` (rows it
    raised on); queued ones also ``dropped`` (rows lost because it did not keep up) and
    ``qsize()``."""
    return iter(list(_live))


def is_inline(backend: Any) -> bool:
    """Whether ``backend`` asked to run on the caller's thread (``inline = True``)."""
    return getattr(backend, "inline", False) is True


def _lost(rows: int, failed: int, dropped: int) -> list[str]:
    """What a backend lost, as phrases for its finish report."""
    lost = []
    if failed:
        lost.append(f"{failed} of {rows} rows failed to write")
    if dropped:
        lost.append(f"{dropped} rows dropped while it was not keeping up")
    return lost


def _report_failure(name: str) -> None:
    """Report the exception being handled: a condition of the world (a full disk, a store
    that went away) in one line naming it, anything else with its traceback."""
    expected, text = _condition()
    warn_once(
        f"backend:{name}:log",
        f"rlmetrics: backend {name!r} failed to log a step{text}; the other backends and "
        "telemetry still got it. Its later failures are counted and reported when the Logger "
        "finishes",
        expected=expected,
    )


def _condition() -> tuple[bool, str]:
    """Whether the exception being handled is a condition of the world (a full disk, a store
    that went away: ``OSError``, :class:`BackendUnavailable`), and if so the text that names
    it, for a one-line report; anything else is a bug, reported with its traceback."""
    error = sys.exc_info()[1]
    if isinstance(error, (OSError, BackendUnavailable)):
        return True, f" ({type(error).__name__}: {error})"
    return False, ""


def _report_method_failure(name: str, method: str) -> None:
    expected, text = _condition()
    warn_once(
        f"backend:{name}:{method}",
        f"rlmetrics: backend {name!r} failed in {method}{text}; the other backends still got it",
        expected=expected,
    )


def _finish(
    name: str,
    backend: Any,
    catching: type[BaseException] = Exception,
    failed: bool = False,
    cause: BaseException | None = None,
) -> None:
    if not callable(getattr(backend, "finish", None)):
        # A backend that writes each row at once may have nothing to finish: no finish() is
        # nothing to call, not a failure (docs/writing-a-plugin.md).
        return
    try:
        if failed and _takes_failed(backend):
            if cause is not None and _takes(backend, "cause"):
                backend.finish(failed=True, cause=cause)
            else:
                backend.finish(failed=True)
        else:
            backend.finish()
    except catching:
        expected, text = _condition()
        warn_once(
            f"backend:{name}:finish",
            f"rlmetrics: backend {name!r} failed to finish{text}",
            expected=expected,
        )


def _takes_failed(backend: Any) -> bool:
    """Whether ``backend.finish`` takes ``failed``: a tracker with a notion of a failed run (W&B's
    exit code, MLflow's FAILED, SwanLab's crashed) is told when the run ended with an
    exception; any other backend is finished as always."""
    return _takes(backend, "failed")


def _takes(backend: Any, parameter: str) -> bool:
    """Whether ``backend.finish`` takes ``parameter``. A failed run's ``cause`` (the exception
    that left the Logger's ``with`` block) goes only to a finish that takes it (SwanLab's
    error text): one that takes only ``failed`` is finished as before."""
    try:
        return parameter in inspect.signature(backend.finish).parameters
    except Exception:  # no finish (nothing to call), or one with no signature
        return False


def _watch_exit_for(backend: Any) -> None:
    """A backend with a notion of a failed run is finished at exit as one when the process
    exits with a failing ``sys.exit`` status: watch for it (:mod:`.exit_status`)."""
    if _takes_failed(backend):
        exit_status.watch()


def exits_failed() -> bool:
    """Whether the interpreter is exiting as a failed run: on an uncaught exception
    (:func:`ended_by_exception`) or with a nonzero status asked of ``sys.exit`` (a SIGTERM
    handler's ``sys.exit(143)``). Not in an interactive session, which outlives both."""
    return ended_by_exception() or exit_status.exit_failed()


def ended_by_exception() -> bool:
    """Whether the interpreter is exiting on an uncaught exception
    (:func:`.exit_status.uncaught_exception`; never in an interactive session)."""
    error = exit_status.uncaught_exception()
    return error is not None and not isinstance(error, SystemExit)


class InlineBackend:
    """Runs ``backend`` on the caller's thread, each call in its own guard, counting what
    fails; the caller serialises calls (the Logger's lock)."""

    def __init__(self, name: str, backend: Any) -> None:
        self.name = name
        self.backend = backend
        self.rows = 0
        self.failed = 0
        self._finished = False
        _live.add(self)
        _watch_exit_for(backend)

    def log_metrics(self, metrics: Mapping[str, Any], step: Any, prefix: str) -> None:
        self.rows += 1
        try:
            self.backend.log_metrics(metrics, step, prefix)
        except Exception:
            if self._finished:
                # Finished during this very call: a signal's handler (a SIGTERM's calling
                # Logger.finish()) interrupted the thread on its way here. Not the backend's
                # failure: said in one line, as a row logged after finish() is.
                warn_once(
                    f"backend:{self.name}:finished-mid-row",
                    f"rlmetrics: backend {self.name!r} was finished while a row was on its way "
                    "to it (Logger.finish() from a signal's handler); that row is not written",
                    expected=True,
                )
                return
            self.failed += 1
            _lose(self.name, "failed")
            _report_failure(self.name)

    def call(self, method: str, *args: Any) -> None:
        """``backend.<method>(*args)`` (an optional method: ``log_hyperparams``,
        ``log_samples``), in its own guard."""
        try:
            getattr(self.backend, method)(*args)
        except Exception:
            _report_method_failure(self.name, method)

    def finish(self, failed: bool = False, cause: BaseException | None = None) -> None:
        """Finish the backend (``failed``: the run ended with an exception, ``cause``) and say
        how many rows it failed to write."""
        self._finished = True
        _finish(self.name, self.backend, failed=failed, cause=cause)
        lost = _lost(self.rows, self.failed, 0)
        if lost:
            logger.warning("rlmetrics: backend %r finished; %s", self.name, ", ".join(lost))


class BackendWorker:
    """Runs ``backend`` on a daemon thread, fed by a queue of at most ``queue_size`` rows."""

    def __init__(self, name: str, backend: Any, queue_size: int = DEFAULT_QUEUE_SIZE) -> None:
        self.name = name
        self.backend = backend
        #: Rows handed to it, written, raised on, and dropped because its queue was full.
        self.rows = 0
        self.written = 0
        self.failed = 0
        self.dropped = 0
        #: Rows the backend's thread holds, taken from the queue and not yet written or failed:
        #: a request under way, which a give-up cannot stop (it may still land).
        self._under_way = 0
        #: Rows under way when ``finish()`` gave up, not counted as lost then: the process
        #: goes on, and they may land; counted once they cannot (:meth:`wait_given_up`).
        self._pending = 0
        #: Its Logger's ``exit_timeout_s``: how long the exit waits for it once its finish
        #: gave up (the Logger, finished, no longer sets the exit's bound). None: the default.
        self.exit_timeout_s: float | None = None
        #: Calls other than rows (``log_samples``, ``log_hyperparams``…) by method: queued by
        #: the callers, and taken off the queue by the backend's thread. Those queued and not
        #: taken when a finish gives up are never written: its report names them.
        self._calls_queued: dict[str, int] = {}
        self._calls_taken: dict[str, int] = {}
        self._said = False  # what it did not write has been reported
        self._finishing = False  # finishing was asked for: the finish marker is queued
        self._finished = False  # finish() was called (it reports, once)
        self._failed_run = False  # the run ended with an exception: said to the backend
        self._failure: BaseException | None = None  # that exception, when known
        #: The rows still queued were said to be lost (a finish past its bound): they are not
        #: written later, behind that word, into the tracker's own exit teardown; the thread
        #: goes straight to finishing the backend.
        self._given_up = False
        # A SimpleQueue, bounded here by its size: its put() is reentrant. A signal's handler
        # runs on the thread it interrupts, and one that finishes the Logger (a SIGTERM
        # handler) while that thread is inside a queue.Queue's put, holding its lock, would
        # wait for that lock for ever.
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.queue_size = queue_size
        self._pid = os.getpid()
        self._thread = threading.Thread(
            target=self._run, name=f"rlmetrics-backend-{name}", daemon=True
        )
        self._thread.start()
        _live.add(self)
        _watch_exit_for(backend)

    def qsize(self) -> int:
        """Rows queued and not yet written."""
        return self._queue.qsize()

    def unwritten(self) -> int:
        """Rows handed to the backend and neither written, failed nor dropped (yet)."""
        return max(0, self.rows - self.written - self.failed - self.dropped)

    def _give_up(self, ending: bool) -> tuple[int, str]:
        """Give up on the rows not written: those still queued are never written (the thread
        skips them), counted as dropped now. Those under way are too when the process is
        ``ending`` (the exit, an interrupted finish); otherwise they may still land, which
        counts them as written or failed (:meth:`wait_given_up` counts them if they cannot).
        Returns how many are lost and the phrase for the rest."""
        self._given_up = True
        under_way = 0 if ending else self._under_way
        self._pending = under_way
        lost = max(0, self.unwritten() - under_way)
        if lost:
            _lose(self.name, "dropped", lost)
        rest = f", {under_way} under way (they may still land)" if under_way else ""
        calls = [
            f"{left} {method} call{'s' if left > 1 else ''}"
            for method, queued in list(self._calls_queued.items())
            if (left := queued - self._calls_taken.get(method, 0)) > 0
        ]
        return lost, f"{rest}, nor {', '.join(calls)}" if calls else rest

    def say_unwritten(self, why: str) -> None:
        """Report, once, the rows the backend has not written, when ``finish()`` cannot
        (``why``: it was interrupted, or the process is exiting without it)."""
        if self._said or os.getpid() != self._pid:
            return
        self._said = True
        unwritten, under_way = self._give_up(ending=True)
        if unwritten or under_way:
            lost = _lost(self.rows, self.failed, self.dropped)
            logger.warning(
                "rlmetrics: backend %r: %s: %d rows not written%s%s",
                self.name,
                why,
                unwritten,
                under_way,
                "".join(f", {phrase}" for phrase in lost),
            )

    # -- the caller's side: never blocks ---------------------------------------------------

    def log_metrics(self, metrics: Mapping[str, Any], step: Any, prefix: str) -> None:
        """Queue one row, which the caller has already taken as a :func:`snapshot`."""
        self.call("log_metrics", metrics, step, prefix)

    def call(self, method: str, *args: Any) -> None:
        """Queue ``backend.<method>(*args)`` (``log_metrics``, or an optional method such as
        ``log_hyperparams``); ``args`` are a :func:`snapshot` already. Rows (``log_metrics``)
        are counted for the finish report; any call may be dropped when the queue is full."""
        if os.getpid() != self._pid:
            # A forked child inherits the queue but not the thread that drains it.
            warn_once(
                f"backend:{self.name}:forked",
                f"rlmetrics: backend {self.name!r} belongs to the parent process; rows a forked "
                "child logs through it are dropped (create a Logger in the child)",
            )
            return
        self.rows += method == "log_metrics"
        if self._queue.qsize() < self.queue_size:
            if method != "log_metrics":
                self._calls_queued[method] = self._calls_queued.get(method, 0) + 1
            self._queue.put((method, args))
        else:
            self.dropped += method == "log_metrics"
            if method == "log_metrics":
                _lose(self.name, "dropped")
            warn_once(
                f"backend:{self.name}:full",
                f"rlmetrics: backend {self.name!r} is not keeping up (its queue of "
                f"{self.queue_size} rows is full); rows for it are dropped and counted "
                "until it catches up (a larger Logger(queue_size=) absorbs longer stalls). "
                "The training loop, the other backends and telemetry are unaffected",
                expected=True,
            )

    def request_finish(self, failed: bool = False, cause: BaseException | None = None) -> None:
        """Queue the finish behind the rows, without waiting (past a full queue's bound: it
        is one item): every backend of a Logger is asked first and then waited for, so
        one whose finish takes seconds (W&B syncing its run) does not spend the bound of the
        others, which finish side by side. ``failed``: the run ended with an exception."""
        if os.getpid() != self._pid or self._finishing:
            return
        self._finishing = True
        self._failed_run = failed
        self._failure = cause
        self._queue.put(_FINISH)

    def finish(
        self,
        deadline: float,
        timeout_s: float,
        failed: bool = False,
        cause: BaseException | None = None,
    ) -> None:
        """Write what is queued, then finish the backend, waiting until ``deadline``
        (``time.monotonic()``, ``timeout_s`` after the Logger's finish began; never past the
        interpreter's exit bound); report what was dropped, failed or left unwritten, once.
        Rows left unwritten are counted as dropped."""
        if os.getpid() != self._pid or self._finished:
            return
        self._finished = True
        self.request_finish(failed, cause)
        exiting = _exiting
        why = ""
        if exiting is not None:
            why = "the process is exiting without Logger.finish(): "
            if exiting[0] < deadline:
                deadline, timeout_s = exiting
        _waiting.join(self._thread, deadline - time.monotonic())
        lost = _lost(self.rows, self.failed, self.dropped)
        self._said = True
        if self._thread.is_alive():
            unwritten, under_way = self._give_up(ending=exiting is not None)
            logger.warning(
                "rlmetrics: %sbackend %r did not finish within %.1f s: %d rows not written%s%s",
                why,
                self.name,
                timeout_s,
                unwritten,
                under_way,
                "".join(f", {phrase}" for phrase in lost),
            )
        elif lost:
            logger.warning("rlmetrics: %sbackend %r finished; %s", why, self.name, ", ".join(lost))

    @property
    def given_up(self) -> bool:
        """Whether its finish gave up on it (its thread may still be writing or finishing)."""
        return self._given_up

    def wait_given_up(self, deadline: float) -> None:
        """Wait, until ``deadline``, for a backend whose rows were given up on to finish (its
        thread goes straight to it): at the interpreter's exit, before the tracker's own exit
        handlers tear its client down, and before the daemon thread is cut off."""
        if self._given_up and os.getpid() == self._pid:
            _waiting.join(self._thread, deadline - time.monotonic())
            pending, self._pending = self._pending, 0
            if pending and self._thread.is_alive():
                _lose(self.name, "dropped", pending)
                logger.warning(
                    "rlmetrics: backend %r: the %d rows under way when its finish gave up did "
                    "not land before the exit",
                    self.name,
                    pending,
                )

    # -- the backend's thread ------------------------------------------------------------

    def _run(self) -> None:
        takes_rows = callable(getattr(self.backend, "log_metrics_rows", None))
        item: Any = None
        while True:
            if item is None:
                item = self._queue.get()
            if item is _FINISH:
                _finish(self.name, self.backend, BaseException, self._failed_run, self._failure)
                return
            method, args = item
            item = None
            if method != "log_metrics":
                self._calls_taken[method] = self._calls_taken.get(method, 0) + 1
            if self._given_up:
                continue  # said to be lost (see __init__)
            if method == "log_metrics" and takes_rows:
                rows = [args]
                item = self._take_rows(rows)
                self._write_rows(rows)
            else:
                self._under_way = int(method == "log_metrics")
                self._write(method, args)
                self._under_way = self._pending = 0  # written or failed: counted either way

    def _take_rows(self, rows: list[Any]) -> Any:
        """Add to ``rows`` the rows queued right behind them (up to :data:`MAX_BATCH_ROWS`)
        without waiting; the first queued item that is no row, or None."""
        while len(rows) < MAX_BATCH_ROWS:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return None
            if item is _FINISH or item[0] != "log_metrics":
                return item
            rows.append(item[1])
        return None

    def _write_rows(self, rows: list[Any]) -> None:
        """A backlog of rows through ``log_metrics_rows``; the first row it did not write (a
        request failed: the store busy for a moment, a row it refuses) alone, then the rest
        as a backlog again. Once a row alone fails too, the rest go row by row: a tracker
        that is down costs one failed request a row, as without batches."""
        batches = True
        self._under_way = len(rows)
        while rows and not self._given_up:
            if batches and len(rows) > 1:
                done = 0
                try:
                    wrote = self.backend.log_metrics_rows(rows)
                    # How many, from the first; a backend that returns no count wrote them all.
                    done = max(0, min(wrote, len(rows))) if type(wrote) is int else len(rows)
                except BaseException:
                    pass
                self.written += done
                rows = rows[done:]
                self._under_way = len(rows)
                if not rows:
                    break
            batches = self._write("log_metrics", rows[0]) and batches
            rows = rows[1:]
            self._under_way = len(rows)
        # Given up on with rows of a batch still held, which will not be written now: lost,
        # unless they were counted so at the give-up (not said to be under way).
        self._under_way = 0
        pending, self._pending = self._pending, 0
        if rows and pending:
            _lose(self.name, "dropped", min(len(rows), pending))

    def _write(self, method: str, args: Any) -> bool:
        """``backend.<method>(*args)``, counted; whether it was written."""
        # On this thread a BaseException that is no Exception (asyncio's CancelledError
        # from a tracker's client, a SystemExit a library raises) is a failure like any:
        # it would end the thread without a word, and every later row with it. (Signals
        # reach the main thread only: no KeyboardInterrupt is swallowed here.)
        try:
            getattr(self.backend, method)(*args)
            self.written += method == "log_metrics"
            return True
        except BaseException:
            if method == "log_metrics":
                self.failed += 1
                _lose(self.name, "failed")
                _report_failure(self.name)
            else:
                _report_method_failure(self.name, method)
            return False


def at_exit(function: Callable[[], None]) -> None:
    """Run ``function`` when the interpreter exits, before every ``atexit`` handler and while
    every thread still runs (see the module's docstring): one of threading's exit hooks, which
    ``concurrent.futures`` uses for the same reason; a plain ``atexit`` handler where the
    interpreter has no such hook."""
    register = getattr(threading, "_register_atexit", None)
    try:
        if callable(register):
            register(function)
            return
    except RuntimeError:  # imported while the interpreter already shuts threads down
        pass
    atexit.register(function)


def begin_exit(bound: float) -> tuple[float, float]:
    """Mark the process as exiting: from now on no backend's finish waits more than ``bound``
    seconds from now. The first call's bound holds; returns ``(deadline, bound)``."""
    global _exiting
    if _exiting is None:
        _exiting = (time.monotonic() + bound, bound)
    return _exiting


def drain_at_exit() -> None:
    """Finish every queued backend of this process not finished yet, within the exit's bound
    (:func:`begin_exit`), and say what each did not write. The Logger's own exit hook has
    finished every unfinished Logger first; this finishes the rest (the backends of a Logger
    no longer referenced, the JSONL samples file of one). Never raises: an interrupt (a second
    SIGTERM) only cuts the wait short."""
    deadline, bound = begin_exit(DEFAULT_EXIT_TIMEOUT_S)
    runners = [r for r in live_backends() if isinstance(r, BackendWorker)]
    failed = exits_failed()
    try:
        for runner in runners:
            runner.request_finish(failed)
        for runner in runners:
            runner.finish(deadline, bound, failed)
        for runner in runners:
            runner.wait_given_up(deadline)
    except BaseException as exc:  # nobody is left to raise into
        for runner in runners:
            runner.say_unwritten(f"the exit's wait was interrupted ({type(exc).__name__})")


at_exit(drain_at_exit)
