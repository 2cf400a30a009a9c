"""Real child processes for the exit-path tests: a tiny script run to its exit, optionally
stopped by a SIGTERM the way a scheduler stops a job; and where a process's main thread waits,
for a test that sends a signal another thread takes."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["READY", "main_thread_blocked_in", "run_to_exit"]

#: The line a child prints when it is ready for its SIGTERM.
READY = "ready"
#: How long a hung child has to write its threads' stacks before it is killed.
_DUMP_S = 10.0


def run_to_exit(
    script: str,
    args: Sequence[str] = (),
    *,
    sigterm_when_ready: bool = False,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
) -> tuple[int, str]:
    """Run ``python -c script *args`` to its exit; its exit status and stderr. With
    ``sigterm_when_ready``, the child is sent SIGTERM once it prints :data:`READY` on a line
    of its own. A child still running after ``timeout_s`` is aborted (its status is then
    the abort's, and its stderr ends with every thread's stack, faulthandler's), else
    killed: a bound so a hung child fails its test, saying where it hung."""
    child = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-c", script, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else dict(env),
    )
    try:
        if sigterm_when_ready:
            assert child.stdout is not None
            line = child.stdout.readline()
            if line == f"{READY}\n":
                child.send_signal(signal.SIGTERM)
        _out, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGABRT)  # faulthandler writes every thread's stack first
        try:
            _out, err = child.communicate(timeout=_DUMP_S)
        except subprocess.TimeoutExpired:
            child.kill()
            _out, err = child.communicate()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.returncode, err


def main_thread_blocked_in(function: Callable[..., Any]) -> bool:
    """Whether this process's main thread is inside a call ``function`` made: a frame running
    ``function`` on its stack, a frame of another file on top (a lock's wait, a join), not
    ``function``'s own code. Poll it with :func:`~rlmetrics.testing.wait_until` before
    sending a signal that is to arrive while the main thread waits."""
    code, main = function.__code__, threading.main_thread().ident
    frame = None if main is None else sys._current_frames().get(main)  # the one way to see it
    if frame is None or frame.f_code.co_filename == code.co_filename:
        return False
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False
