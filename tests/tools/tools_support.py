"""Running the installed ``rlmetrics`` console script as a user runs it (a module with a name
no other test folder uses, so it imports the same whichever folders pytest collects)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["RLMETRICS", "not_run_files", "run_cli"]

#: The console script the installed distribution put beside this interpreter.
RLMETRICS = str(Path(sys.executable).with_name("rlmetrics"))


def run_cli(
    *args: str | os.PathLike[str], env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``rlmetrics ARGS`` in a subprocess; stdout and stderr captured as text."""
    return subprocess.run(
        [RLMETRICS, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def not_run_files(folder: Path) -> dict[str, Path]:
    """Files a user gives by mistake where a run's metrics JSONL is asked for, each with no
    metrics row: a run's traces and samples files (written by the real exporter and Logger),
    a CSV, a binary, an empty file."""
    import rlmetrics

    run = folder / "real-run"
    run.mkdir()
    with (
        rlmetrics.start(exporters={"otlp_file": {"path": run / "traces.jsonl"}}),
        rlmetrics.Logger(backends={"jsonl": {"path": str(run / "metrics.jsonl")}}) as logger,
    ):
        with rlmetrics.phase("generation", bucket="productive"):
            logger.log_metrics({"reward": 0.5}, step=1, prefix="train")
        logger.log_samples([{"prompt": "2+2", "completion": "4", "reward": 1.0}], step=1)
    files = {
        "traces": run / "traces.jsonl",
        "samples": run / "metrics.samples.jsonl",
        "csv": folder / "run.csv",
        "binary": folder / "binary.jsonl",
        "empty": folder / "empty.jsonl",
    }
    files["csv"].write_text("step,reward\n1,0.5\n")
    files["binary"].write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    files["empty"].write_bytes(b"")
    return files


def write_long_run(path: Path, steps: int = 3000) -> Path:
    """A run of ``steps`` train rows of 26 keys each at ``path`` (the memory tests' input: a
    reader that held its rows would hold several times the file)."""
    metrics = {f"extra/metric_{i}": i * 0.1 for i in range(25)}
    with path.open("w") as out:
        for step in range(steps):
            row = {"time": 1000.0 + step, "run_id": "r", "step": step, "prefix": "train"}
            out.write(json.dumps({**row, "metrics": {**metrics, "reward": step * 1e-3}}) + "\n")
    return path
