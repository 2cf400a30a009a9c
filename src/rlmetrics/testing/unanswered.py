"""A tracker whose server does not answer, met as a training script meets it.

:func:`start_beside_jsonl` runs in a test's child process (the start a backend gave up on goes
on with the tracker's own retries on its thread, logging into whatever runs next): a Logger with
the tracker and a JSONL file, one row, ``finish()``, on a thread so a ``Logger()`` still stuck
past a liveness bound is reported instead of waited for. It returns what came of it as plain
values, for the child to print as JSON on its last line; :func:`child_outcome` runs such a
child and reads that line, :func:`check_skipped_in_one_line` checks what it says.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .logs import captured_log

__all__ = [
    "check_skipped_in_one_line",
    "child_outcome",
    "documented_connect_timeout_s",
    "start_beside_jsonl",
]


def start_beside_jsonl(
    backend: str, options: Mapping[str, Any], path: Path, stuck_s: float
) -> dict[str, Any]:
    """``Logger(backends={backend: options, "jsonl": {"path": path}})``, one row at step 1
    (``train/loss`` 1.0) and ``finish()``; as JSON-ready values: whether ``Logger()`` was still
    stuck after ``stuck_s`` (``stuck``), the backends it started, what rlmetrics said at
    WARNING or above (``said``) and with how many tracebacks, and the rows in the file."""
    from ..backends.jsonl import read_jsonl
    from ..logger import Logger

    done: list[Logger] = []

    def run() -> None:
        logger = Logger(backends={backend: dict(options), "jsonl": {"path": path}})
        logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
        logger.finish()
        done.append(logger)

    with captured_log() as log:  # every thread's records, rlmetrics' only
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(stuck_s)
    warnings = [r for r in log.records if r.levelno >= logging.WARNING]
    return {
        "stuck": not done,
        "backends": sorted(done[0].backends) if done else None,
        "said": [r.getMessage() for r in warnings],
        "tracebacks": sum(r.exc_info is not None for r in warnings),
        "rows": [[r["step"], r["metrics"]] for r in read_jsonl(path)] if path.exists() else [],
    }


def child_outcome(
    case: str,
    *args: str,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> dict[str, Any]:
    """``python -c case *args`` run to its end (at most ``timeout_s``), which must exit 0; the
    JSON object on the last line of its output."""
    child = subprocess.run(
        [sys.executable, "-c", case, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=None if env is None else dict(env),
        cwd=cwd,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    outcome: dict[str, Any] = json.loads(child.stdout.splitlines()[-1])
    return outcome


def check_skipped_in_one_line(
    outcome: Mapping[str, Any], backend: str, where: str, bound_s: float
) -> None:
    """Assert that the :func:`start_beside_jsonl` ``outcome`` is a ``backend`` skipped after
    its bound of ``bound_s``: ``Logger()`` was not stuck, one line without a traceback names
    the backend, ``where`` it reached and the bound, and the row reached the JSONL file."""
    assert not outcome["stuck"], "Logger() was still stuck past the liveness bound"
    assert backend not in outcome["backends"] and "jsonl" in outcome["backends"]
    said = [message for message in outcome["said"] if f"'{backend}'" in message]
    assert len(said) == 1, outcome["said"]
    assert where in said[0] and f"within {bound_s:.1f} s" in said[0], said[0]
    assert "skipped" in said[0]
    assert outcome["tracebacks"] == 0
    assert outcome["rows"] == [[1, {"loss": 1.0}]]


def documented_connect_timeout_s(trackers_md: Path, backend: str) -> float:
    """The default of ``backend``'s ``connect_timeout_s`` in seconds, as the configuration
    table of ``trackers_md`` (docs/trackers.md) states it: what a tracker's test holds its
    constant to."""
    section = trackers_md.read_text().split(f"### `{backend}`", 1)[1].split("\n### ", 1)[0]
    (row,) = [line for line in section.splitlines() if "| `connect_timeout_s` |" in line]
    return float(row.rstrip(" |").rsplit("|", 1)[1].strip().removesuffix(" s"))
