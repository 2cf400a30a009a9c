"""Whether the interpreter is exiting with a failing status, for the trackers finished at exit.

A run whose process ends with an uncaught exception, ``sys.exit(3)`` or a SIGTERM handler's
``sys.exit(143)`` failed, and a tracker finished at exit (W&B's exit code, MLflow's FAILED,
SwanLab's crashed) must say so. Python keeps an uncaught exception in ``sys.last_exc``, but the
status of a ``SystemExit`` lives only in the interpreter's C code: no exit hook can read it.
So, as W&B's own client does, :func:`watch` puts a thin wrapper around ``sys.exit`` that notes
the status asked for on the main thread and calls the ``sys.exit`` it found (W&B's wrapper,
another library's, or Python's) with the same argument: the ``SystemExit`` raised, and what
catches it, are unchanged. The ``exit()`` and ``quit()`` builtins (``site``'s, which raise
``SystemExit`` without ``sys.exit``) are wrapped the same way. It is installed once, when a
tracker that has a notion of a failed run starts. A ``SystemExit`` the program catches and goes
on from (a wrapper's ``try: main() except SystemExit: ...``) is no exit: the note is dropped
when that exception is, while the program runs (:class:`_Caught`), and at the exit when the
main thread's outermost frame returned (:func:`_returned`): no exception ended the program,
whoever still holds the one it caught (an asyncio task, a variable). A ``raise SystemExit(3)``
written out is not seen (W&B's client does not see it either): before Python 3.12 no hook sees
an exception that nothing catches but the interpreter, and ``sys.monitoring``'s would run on
every exception the program raises.
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from .._process_state import resets_process_state

__all__ = [
    "as_status",
    "exit_failed",
    "exit_status",
    "failure",
    "interactive",
    "uncaught_exception",
    "watch",
]

#: How long :func:`failure`'s text of an exception gets: a tracker's error field, not a log.
_FAILURE_CHARS = 500

#: The status the main thread last asked ``sys.exit`` for; None when it has not.
_status: int | None = None
#: Which ``sys.exit`` call noted :data:`_status`: a dropped ``SystemExit`` forgets only its own.
_noted = 0
_watching = False
# Reentrant: a KeyboardInterrupt at a with block's end under a tracer (bpo-29988) leaves
# it held by its thread, which takes it again instead of waiting for ever.
_lock = threading.RLock()
#: The main thread's outermost frame when :func:`watch` ran (None where it had none): at the
#: exit it says whether the program returned or an exception (a ``SystemExit``) ended it.
_outermost: Any = None
#: The instructions a frame that returned last ran.
_RETURNS = frozenset({"RETURN_VALUE", "RETURN_CONST"})


@resets_process_state
def _forget_status() -> None:
    """A test suite's process: a status one test asked for (a CLI's ``main`` run in-process
    under ``pytest.raises(SystemExit)``) is not the next test's exit."""
    global _status
    _status = None


def as_status(code: object) -> int:
    """The process status Python makes of ``SystemExit(code)``: None is 0, an int itself,
    anything else (a message) is printed and 1."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def watch() -> None:
    """Wrap ``sys.exit`` once per process, so :func:`exit_status` knows the status asked for."""
    global _watching
    with _lock:
        if _watching:
            return
        _watching = True
        _keep_outermost()
        previous: Callable[..., Any] = sys.exit

        @functools.wraps(previous)
        def exit(status: object = None) -> Any:
            noted = _note(status)
            try:
                return previous(status)
            except SystemExit as raised:
                _forget_if_caught(raised, noted)
                raise

        sys.exit = exit
        for name in ("exit", "quit"):
            builtin = getattr(builtins, name, None)
            if callable(builtin):  # absent under ``python -S``
                setattr(builtins, name, _NotedQuitter(builtin))


def _keep_outermost() -> None:
    """Keep the main thread's outermost frame (:data:`_outermost`)."""
    global _outermost
    with contextlib.suppress(Exception):  # no frame (an embedding), or none to read
        if threading.current_thread() is threading.main_thread():
            frame = sys._getframe()
        else:
            frame = sys._current_frames()[threading.main_thread().ident]  # type: ignore[index]
        while frame.f_back is not None:
            frame = frame.f_back
        _outermost = frame


def _returned() -> bool:
    """Whether the main thread's outermost frame has returned: the program ended without an
    exception, so with status 0 (a ``SystemExit`` ends that frame as any exception does)."""
    frame = _outermost
    try:
        return frame is not None and dis.opname[frame.f_code.co_code[frame.f_lasti]] in _RETURNS
    except Exception:  # a frame of an interpreter that reads otherwise: not known
        return False


def _note(status: object) -> int:
    """Note ``status`` as the one the process exits with, when asked on the main thread (a
    thread's ``sys.exit`` ends that thread only); which note this is, 0 for none."""
    global _status, _noted
    if threading.current_thread() is not threading.main_thread():
        return 0
    _status = as_status(status)
    _noted += 1
    return _noted


def _forget_if_caught(raised: SystemExit, noted: int) -> None:
    """Have ``raised`` forget note ``noted`` if the program drops it and goes on
    (:class:`_Caught`)."""
    if noted:
        # A SystemExit subclass with slots takes no attribute: its note stays, as before.
        with contextlib.suppress(Exception):
            raised._rlmetrics_exit_noted = _Caught(noted)  # type: ignore[attr-defined]


class _Caught:
    """Held by a noted ``SystemExit``, it sees that exception dropped. Dropped by the
    interpreter at its exit (the exception nothing caught) it is called with no Python code
    running, or during the exit (a reference cycle's, asyncio's task, collected late): the
    status is the process's. Dropped while the program's code runs, it was caught and the
    program went on: the note is forgotten, so the trackers and telemetry are not told of a
    failed exit that never was. The cost is one object per ``sys.exit`` call."""

    def __init__(self, noted: int) -> None:
        self._noted = noted
        self._pid = os.getpid()

    def __reduce__(self) -> tuple[Any, ...]:
        # A pickled SystemExit (a process pool's worker sends its exception back) carries
        # nothing that could forget a note in another process or another copy.
        return (object, ())

    def __del__(self) -> None:
        global _status
        try:
            if (
                self._noted == _noted
                and self._pid == os.getpid()
                and threading.current_thread() is threading.main_thread()
                and not _exiting()
                and sys._getframe(1) is not None  # raises ValueError when no code runs
            ):
                _status = None
        except Exception:  # no code below: dropped by the interpreter's exit
            pass


def _exiting() -> bool:
    """Whether the interpreter has begun its exit: its threads' shutdown, then atexit."""
    return bool(getattr(threading, "_SHUTTING_DOWN", False)) or not (
        threading.main_thread().is_alive()
    )


class _NotedQuitter:
    """``site``'s ``exit``/``quit`` builtin, noting the status it is called with: shown (in a
    REPL that prints it) and called as the one it wraps."""

    def __init__(self, quitter: Callable[..., Any]) -> None:
        self._quitter = quitter

    def __repr__(self) -> str:
        return repr(self._quitter)

    def __call__(self, code: object = None) -> Any:
        noted = _note(code)
        try:
            return self._quitter(code)
        except SystemExit as raised:
            _forget_if_caught(raised, noted)
            raise


def exit_status() -> int | None:
    """The status the main thread last asked ``sys.exit`` for since :func:`watch`, or None."""
    return _status


def exit_failed() -> bool:
    """Whether ``sys.exit`` was asked, on the main thread, for a nonzero status; never in an
    interactive session (:func:`interactive`), which outlives one, nor once the program has
    returned (:func:`_returned`): the ``SystemExit`` was caught, though something still holds
    it."""
    return bool(_status) and not interactive() and not _returned()


def uncaught_exception() -> BaseException | None:
    """The exception the interpreter is exiting on, which it printed and kept in
    ``sys.last_exc`` (``sys.last_value`` before 3.12); None when there is none, and in an
    interactive session (:func:`interactive`), where an earlier error the user went on from
    (a notebook cell's) is kept there too."""
    if interactive():
        return None
    error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return error if isinstance(error, BaseException) else None


def failure() -> str | None:
    """How the process is ending as a failed run, for a tracker that keeps an error text
    (SwanLab's): the exception nothing caught (its type and message) or the failing
    ``sys.exit`` status; None when neither is known (a run finished as failed by its code, an
    exception leaving a Logger's block)."""
    error = uncaught_exception()
    if error is not None and not isinstance(error, SystemExit):
        text = f"the training loop ended with an exception: {type(error).__name__}"
        message = str(error)
        if message:
            text += f": {message}"
        return text if len(text) <= _FAILURE_CHARS else text[: _FAILURE_CHARS - 1] + "…"
    if exit_failed():
        return f"the process exited with status {_status}"
    return None


def interactive() -> bool:
    """Whether this is an interactive session: ``python -i``, the REPL, IPython or a Jupyter
    kernel. It outlives the errors and the ``SystemExit`` statuses shown in it."""
    return bool(sys.flags.interactive) or hasattr(sys, "ps1") or _in_ipython()


def _in_ipython() -> bool:
    """Whether an IPython shell (a notebook's kernel included) runs in this process."""
    ipython = sys.modules.get("IPython")
    try:
        return ipython is not None and ipython.get_ipython() is not None
    except Exception:
        return False
