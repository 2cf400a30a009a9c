"""A Ctrl-C (a notebook's interrupt) that ends a step wherever it lands leaves the next step
working: its phases are timed and its efficiency summary reaches the Logger's JSONL."""

from __future__ import annotations

import json
from pathlib import Path

from rlmetrics.testing import run_to_exit

_SCRIPT = """
import os, signal, sys
import rlmetrics
from rlmetrics.tracing import accounting, phases, scopes

SOURCES = {accounting.__file__, phases.__file__, scopes.__file__}
state = {"line": 0, "at": -1}

def interrupt_at_line(frame, event, arg):
    # Sends SIGINT at the at-th line the step runs in the tracing modules. Under a Python
    # tracer (a debugger's, a notebook's) the KeyboardInterrupt can be raised at any line,
    # the end of a with block before its lock is released too.
    if frame.f_code.co_filename not in SOURCES:
        return None
    if event == "line":
        state["line"] += 1
        if state["line"] == state["at"]:
            os.kill(os.getpid(), signal.SIGINT)
    return interrupt_at_line

logger = rlmetrics.Logger(backends={"jsonl": {"path": sys.argv[1]}})

def one_step(n, at=-1):
    state.update(line=0, at=at)
    sys.settrace(interrupt_at_line)
    try:
        with rlmetrics.step(n, logger=logger):
            with rlmetrics.phase("idle/buffer_starvation"):
                pass
            with rlmetrics.phase("policy_update", bucket="productive"):
                pass
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
    return state["line"]

lines = one_step(0)
for at in range(1, lines + 1):
    one_step(2 * at - 1, at)
    one_step(2 * at)  # the next cell's step
logger.finish()
print(lines, "lines", file=sys.stderr)
"""


def test_a_step_after_one_interrupted_at_any_line_is_timed_and_summarised(
    tmp_path: Path,
) -> None:
    """The interrupted step's accounting lock, taken in a ``with`` block, stayed held when the
    KeyboardInterrupt landed at the block's end (CPython's bpo-29988, under a tracer): the
    next step's end waited for it for ever, the notebook's kernel hung."""
    path = tmp_path / "m.jsonl"
    status, err = run_to_exit(_SCRIPT, (str(path),), timeout_s=120)
    assert status == 0, err
    lines = int(err.split(" lines")[0].split()[-1])
    assert lines > 50, err
    summarised = {
        row["step"]
        for row in map(json.loads, path.read_text().splitlines())
        if any(key.startswith("efficiency/") for key in row.get("metrics", row))
    }
    assert {2 * at for at in range(lines + 1)} <= summarised, err
