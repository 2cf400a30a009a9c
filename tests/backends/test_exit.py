"""A Logger that is never finished loses nothing already logged: at interpreter exit (the end
of the script, ``sys.exit``, an uncaught exception, a SIGTERM that a Python handler turns into
``SystemExit``) every queued backend writes what it holds within ``exit_timeout_s``, and only
what it could not write in that bound is counted and said.

Each case is a real child process running a tiny script with a slow third-party backend,
registered in the child like any plugin: it writes each row to a file after a pause, as a
remote tracker would, so rows are still queued when the script ends.
"""

from __future__ import annotations

import importlib
import json
import weakref
from pathlib import Path
from typing import Any

import pytest

import rlmetrics
from rlmetrics.testing import in_memory_telemetry, points, run_to_exit

logger_module = importlib.import_module("rlmetrics.logger")

_SCRIPT = """
import importlib, json, logging, os, signal, sys, threading, time
import rlmetrics
from rlmetrics.plugins import register

PAUSE = threading.Event()

class Slow:
    # A tracker whose writes take a while: each row reaches the file after a pause.
    def __init__(self, path, stall=False):
        self.path, self.stall = path, stall

    def log_metrics(self, metrics, step, prefix):
        PAUSE.wait(None if self.stall else 0.3)
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\\n")

    def finish(self):
        with open(self.path, "a") as f:
            f.write(json.dumps({"finished": True}) + "\\n")

class Offers:
    @rlmetrics.hookimpl
    def register_backends(self, register):
        register("slow", Slow)

logging.basicConfig(level=logging.WARNING, format="%(message)s")
register(Offers(), "offers")
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
how, path, stall = sys.argv[1], sys.argv[2], sys.argv[3] == "stall"
logger = rlmetrics.Logger(
    backends={"slow": {"path": path, "stall": stall}}, exit_timeout_s=float(sys.argv[4])
)
for step in range(3):
    logger.log_metrics({"loss": float(step)}, step=step)
if how == "exit":
    sys.exit(3)
if how == "raise":
    raise RuntimeError("the loop died")
if how == "interrupted":
    # A second signal (the scheduler's SIGTERM again, a second Ctrl-C) while the exit waits
    # for the tracker: it cuts the wait short.
    from rlmetrics.testing import main_thread_blocked_in, wait_until

    finishing = importlib.import_module("rlmetrics.logger")._finish_at_exit

    def interrupt():
        wait_until(lambda: main_thread_blocked_in(finishing), 30, "the exit's wait")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=interrupt, daemon=True).start()
if how == "sigterm":
    print("ready", flush=True)
    # Still training when the signal comes: a loop's main thread runs, so the handler runs
    # however the kernel hands the signal on. A wait for ever (an Event's) would leave it
    # unrun when the kernel hands it to a tracker's thread: the child hung to its kill.
    while True:
        time.sleep(0.01)
"""

#: Each exit path, and the exit status Python gives it.
EXITS = {"end": 0, "exit": 3, "raise": 1, "sigterm": 143}
#: The cases above, and a script whose exit is interrupted while it waits (it ends as "end").
STATUS = {**EXITS, "interrupted": 0}


def _run(how: str, path: Path, *, stall: bool = False, exit_timeout_s: float = 10.0) -> str:
    """Run the script to its exit; its stderr."""
    args = (how, str(path), "stall" if stall else "-", str(exit_timeout_s))
    status, err = run_to_exit(_SCRIPT, args, sigterm_when_ready=how == "sigterm", timeout_s=60)
    assert status == STATUS[how], err
    return err


def _rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("how", sorted(EXITS))
def test_a_logger_never_finished_writes_every_row_at_exit(how: str, tmp_path: Path) -> None:
    """The three rows are queued behind a slow tracker when the script ends, however it ends:
    all three are written and the backend is finished, and nothing is said to be lost."""
    path = tmp_path / "rows.jsonl"
    err = _run(how, path)
    assert _rows(path) == [
        {"step": 0, "loss": 0.0},
        {"step": 1, "loss": 1.0},
        {"step": 2, "loss": 2.0},
        {"finished": True},
    ], err
    assert "not written" not in err and "rlmetrics" not in err, err


def test_what_a_stalled_tracker_cannot_write_within_the_bound_is_said(tmp_path: Path) -> None:
    """A tracker that never answers holds the exit for ``exit_timeout_s`` only; its three
    rows are said to be lost, with the bound, and the process exits."""
    path = tmp_path / "rows.jsonl"
    err = _run("end", path, stall=True, exit_timeout_s=0.5)
    assert not path.exists()
    assert "backend 'slow'" in err and "3 rows not written" in err, err
    assert "within 0.5 s" in err and "process is exiting" in err, err
    assert "Traceback" not in err


def test_an_interrupt_during_the_exits_wait_cuts_it_short_and_says_what_was_lost(
    tmp_path: Path,
) -> None:
    """A second SIGTERM (or Ctrl-C) while the exit waits for a stalled tracker ends the wait:
    the rows it did not write are said in one line, with no traceback out of rlmetrics (an
    interrupt is no failure of rlmetrics), and the process exits long before its bound."""
    path = tmp_path / "rows.jsonl"
    err = _run("interrupted", path, stall=True, exit_timeout_s=600)
    assert "backend 'slow': the exit's wait was interrupted (SystemExit): 3 rows not written" in err
    assert "Traceback" not in err and "failed" not in err, err


def test_rows_left_unwritten_at_exit_are_counted(
    blocking_backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the exit drain could not write is counted as the backend's dropped rows
    (``rlmetrics.backend.dropped``) while telemetry still runs: the drain comes before
    telemetry's own exit shutdown."""
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={"blocking": {}}, exit_timeout_s=0.2)
        try:
            for step in range(4):
                logger.log_metrics({"loss": 1.0}, step=step)
            assert blocking_backend.entered.wait(10)
            # What the interpreter's exit runs, for this Logger only (not earlier tests').
            monkeypatch.setattr(logger_module, "_unfinished", weakref.WeakSet([logger]))
            logger_module._finish_at_exit()
        finally:
            blocking_backend.release.set()
        dropped = [p for p in points(reader) if p.name == "rlmetrics.backend.dropped"]
    # The first row is being written (blocked) when the exit comes: all four are unwritten.
    assert [(p.attributes, p.value) for p in dropped] == [({"rlmetrics.backend": "blocking"}, 4)]


def test_an_uncaught_exception_is_a_failed_run_except_in_an_interactive_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A notebook's kernel keeps the last cell's error in sys.last_value: a Logger never
    # finished there must not be marked failed at the kernel's exit for an error long gone.
    import sys
    import types

    from rlmetrics.backends.worker import ended_by_exception

    monkeypatch.delattr(sys, "last_exc", raising=False)
    monkeypatch.setattr(sys, "last_value", RuntimeError("the loop died"), raising=False)
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert ended_by_exception()
    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: object()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    assert not ended_by_exception()
    monkeypatch.delitem(sys.modules, "IPython")
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)
    assert not ended_by_exception()
    monkeypatch.delattr(sys, "ps1")
    monkeypatch.setattr(sys, "last_value", SystemExit(3))
    assert not ended_by_exception()


_HANDLER_SCRIPT = """
import os, signal, sys
import rlmetrics
from rlmetrics.plugins import register

path, where = sys.argv[1], sys.argv[2]

class Signals:
    # On the caller's thread: the SIGTERM it sends itself is handled while the Logger is
    # inside log_metrics, as a scheduler's SIGTERM often is in a loop that logs every step.
    inline = True

    def log_metrics(self, metrics, step, prefix):
        if where == "logger" and step == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    def finish(self):
        pass

class SignalOnWrite:
    # The JSONL file, sending the SIGTERM while the backend writes step 2's row; "buffer":
    # the signal is handled inside the file's own write, whose close then refuses, as
    # io.BufferedWriter does ("reentrant call").
    def __init__(self, file):
        self.file = file
        self.busy = False

    def write(self, text):
        self.file.write(text)
        if '"step": 2' in text:
            self.busy = where == "buffer"
            os.kill(os.getpid(), signal.SIGTERM)
            self.busy = False

    def close(self):
        if self.busy:
            raise RuntimeError("reentrant call inside <_io.BufferedWriter>")
        self.file.close()

    def __getattr__(self, name):
        return getattr(self.file, name)

class Offers:
    @rlmetrics.hookimpl
    def register_backends(self, register):
        register("signals", Signals)

register(Offers(), "offers")
logger = rlmetrics.Logger(backends={"jsonl": {"path": path}, "signals": {}})
if where in ("jsonl", "buffer"):
    backend = logger.backends["jsonl"]
    backend._file = SignalOnWrite(backend._file)

def on_sigterm(*_):
    logger.finish()  # what docs/troubleshooting.md advises a SIGTERM handler to do
    sys.exit(143)

signal.signal(signal.SIGTERM, on_sigterm)
for step in range(5):
    logger.log_metrics({"loss": float(step)}, step=step)
"""


@pytest.mark.parametrize("where", ["logger", "jsonl", "buffer"])
def test_a_sigterm_handler_that_finishes_the_logger_mid_log_metrics_exits(
    where: str, tmp_path: Path
) -> None:
    """A SIGTERM handler calling ``logger.finish()`` while the loop's thread is inside
    ``log_metrics`` (holding the Logger's lock, or the JSONL backend's) finishes and exits;
    it used to wait for that lock for ever, the job hung until its SIGKILL. Inside the file's
    own write, the file is left for the interpreter's exit to close, unsaid."""
    path = tmp_path / "m.jsonl"
    status, err = run_to_exit(_HANDLER_SCRIPT, (str(path), where), timeout_s=30)
    assert status == 143, err
    assert [row["step"] for row in _rows(path) if "step" in row] == [0, 1, 2], err
    assert "Traceback" not in err, err


_ANY_LINE_SCRIPT = """
import os, signal, sys
import rlmetrics
from rlmetrics.plugins import register

class Null:
    # A queued tracker: each row goes through its queue.
    def log_metrics(self, metrics, step, prefix):
        pass

    def finish(self):
        pass

class Offers:
    @rlmetrics.hookimpl
    def register_backends(self, register):
        register("null", Null)

register(Offers(), "offers")
path = sys.argv[1]
state = {"line": 0, "at": -1, "logger": None}

def on_sigterm(*_):
    state["at"] = -1  # once
    state["logger"].finish(timeout_s=10)  # what a SIGTERM handler is advised to do

def fire_at_line(frame, event, arg):
    # Sends the SIGTERM at the at-th line the loop's thread runs inside log_metrics (in
    # rlmetrics and in the standard library under it: a lock's, a queue's code).
    if event == "line":
        state["line"] += 1
        if state["line"] == state["at"]:
            os.kill(os.getpid(), signal.SIGTERM)
    return fire_at_line

signal.signal(signal.SIGTERM, on_sigterm)

def one_call(at):
    logger = rlmetrics.Logger(backends={"jsonl": {"path": path}, "null": {}})
    state.update(line=0, at=at, logger=logger)
    sys.settrace(fire_at_line)
    try:
        logger.log_metrics({"loss": 1.0}, step=max(at, 0))
    finally:
        sys.settrace(None)
    logger.finish(timeout_s=10)
    return state["line"]

lines = one_call(-1)  # how many lines one call runs
for at in range(1, lines + 1):
    one_call(at)
print(lines, "lines", file=sys.stderr)
"""


def test_a_sigterm_handler_that_finishes_the_logger_returns_wherever_the_signal_lands(
    tmp_path: Path,
) -> None:
    """The handler's ``logger.finish()`` is run at every line the loop's thread runs inside
    one ``log_metrics`` with a JSONL file and a queued tracker (the Logger's lock, the JSONL
    backend's, the tracker queue's own lock held or not): it returns each time. A queue
    whose lock the interrupted thread held made it wait for ever."""
    status, err = run_to_exit(_ANY_LINE_SCRIPT, (str(tmp_path / "m.jsonl"),), timeout_s=120)
    assert status == 0, err
    assert "lines" in err and "Traceback" not in err, err


_STATUS_SCRIPT = """
import json, signal, sys, threading, time
import rlmetrics
from rlmetrics.plugins import register

class Tracker:
    # A queued tracker with a notion of a failed run, as W&B, MLflow and SwanLab have.
    def __init__(self, path):
        self.path = path

    def log_metrics(self, metrics, step, prefix):
        pass

    def finish(self, failed=False):
        with open(self.path, "w") as f:
            json.dump({"failed": failed}, f)

class Offers:
    @rlmetrics.hookimpl
    def register_backends(self, register):
        register("tracker", Tracker)

register(Offers(), "offers")
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
how, path = sys.argv[1:3]
logger = rlmetrics.Logger(backends={"tracker": {"path": path}})
logger.log_metrics({"loss": 1.0}, step=1)
if how == "thread":  # ends that thread only; the script ends well
    worker = threading.Thread(target=sys.exit, args=(5,))
    worker.start()
    worker.join()
elif how == "sigterm":
    print("ready", flush=True)
    while True:
        time.sleep(0.01)
elif how == "message":
    sys.exit("no checkpoint to resume from")
elif how == "exit-builtin":  # site's exit(), as a script may end with it
    exit(4)
elif how == "quit-builtin":
    quit(5)
elif how == "caught":  # a wrapper's main() exits; the wrapper catches it and goes on
    try:
        sys.exit(3)
    except SystemExit:
        pass
elif how == "caught-then-logs":
    try:
        sys.exit(3)
    except SystemExit:
        pass
    logger.log_metrics({"loss": 2.0}, step=2)
elif how.startswith("caught-in-asyncio"):  # asyncio.run keeps the SystemExit on its task
    import asyncio

    async def main():
        await asyncio.sleep(0)
        sys.exit(3)

    try:
        asyncio.run(main())
    except SystemExit:
        pass
    if how == "caught-in-asyncio":
        # The task, its exception and its frames hold one another: they go at the
        # collector's next pass, which a program going on from here soon makes (or not:
        # caught-in-asyncio-no-collection ends first).
        import gc

        gc.collect()
elif how == "caught-and-kept":  # the wrapper keeps what it caught, to report it
    try:
        sys.exit(3)
    except SystemExit as exc:
        caught = exc
elif how == "asyncio":
    import asyncio

    async def main():
        await asyncio.sleep(0)
        sys.exit(3)

    asyncio.run(main())
elif how == "logged-then-reraised":  # a wrapper's cleanup, then the exit goes on
    try:
        sys.exit(3)
    except SystemExit:
        logger.log_metrics({"loss": 2.0}, step=2)
        raise
elif how == "finally":
    try:
        sys.exit(3)
    finally:
        logger.log_metrics({"loss": 2.0}, step=2)
elif how != "end":
    sys.exit(int(how))
"""

#: How the script ends: the status it exits with, and whether the run failed.
_ENDINGS = {
    "end": (0, False),
    "0": (0, False),
    "3": (3, True),
    "sigterm": (143, True),
    "message": (1, True),
    "thread": (0, False),
    "exit-builtin": (4, True),
    "quit-builtin": (5, True),
    # A SystemExit the program caught and went on from is no exit: the script ends well.
    "caught": (0, False),
    "caught-then-logs": (0, False),
    "caught-in-asyncio": (0, False),
    "caught-in-asyncio-no-collection": (0, False),
    "caught-and-kept": (0, False),
    "asyncio": (3, True),
    "logged-then-reraised": (3, True),
    "finally": (3, True),
}


@pytest.mark.parametrize("how", sorted(_ENDINGS))
def test_a_nonzero_sys_exit_finishes_the_trackers_as_a_failed_run(how: str, tmp_path: Path) -> None:
    """``sys.exit(3)`` at the end of a script, or a SIGTERM handler's ``sys.exit(143)``, ends
    the process with a failing status: a tracker finished at exit is told the run failed, as
    for an uncaught exception. It was told the run succeeded."""
    path = tmp_path / "finish.json"
    status, err = run_to_exit(
        _STATUS_SCRIPT, (how, str(path)), sigterm_when_ready=how == "sigterm", timeout_s=60
    )
    expected_status, failed = _ENDINGS[how]
    assert status == expected_status, err
    assert json.loads(path.read_text()) == {"failed": failed}, err
    assert "Traceback" not in err, err


_GIVEN_UP_SCRIPT = """
import sys, time
import rlmetrics
from rlmetrics.plugins import register

class Slow:
    # A tracker that falls behind: each write takes a while, and its finish closes the run.
    def __init__(self, path):
        self.path = path

    def log_metrics(self, metrics, step, prefix):
        time.sleep(0.2)

    def finish(self):
        with open(self.path, "w") as f:
            f.write("finished")

class Offers:
    @rlmetrics.hookimpl
    def register_backends(self, register):
        register("slow", Slow)

register(Offers(), "offers")
logger = rlmetrics.Logger(backends={"slow": {"path": sys.argv[1]}})
for step in range(50):
    logger.log_metrics({"loss": 1.0}, step=step)
logger.finish(timeout_s=0.1)  # gives up on it: the rows it holds are said to be lost
"""


def test_a_backend_finish_gave_up_on_is_still_finished_before_the_process_ends(
    tmp_path: Path,
) -> None:
    # Its thread was a daemon the interpreter's end cut off, still writing the rows said to
    # be lost: the tracker was never finished (an MLflow run left RUNNING for good).
    path = tmp_path / "finished"
    status, err = run_to_exit(_GIVEN_UP_SCRIPT, (str(path),), timeout_s=60)
    assert status == 0, err
    assert "did not finish within 0.1 s" in err, err
    assert path.read_text() == "finished", err
