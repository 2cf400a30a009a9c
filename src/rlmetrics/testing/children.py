"""Real child processes for the exit-path tests: a tiny script run to its exit, optionally
stopped by a SIGTERM the way a scheduler stops a job."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

__all__ = ["READY", "run_to_exit"]

#: The line a child prints when it is ready for its SIGTERM.
READY = "ready"


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
    of its own. A child still running after ``timeout_s`` is killed (its status is then
    the kill's): a bound so a hung child fails its test instead of hanging the suite."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, *args],
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
        child.kill()
        _out, err = child.communicate()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.returncode, err
