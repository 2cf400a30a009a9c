"""The shell commands of the pages, run as a reader runs them: one after another in one
folder. docs/trajectories.md's viewer commands wrote the demo into ``run``, where the README's
quickstart (run just before, in the same folder) had written ``run/metrics.jsonl``: the demo
refused the folder ("holds metrics.jsonl, which no previous demo wrote") and the page's next
command had no page to write."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RLMETRICS = str(Path(sys.executable).with_name("rlmetrics"))


def _block(page: str, fence: str, after: str) -> str:
    text = (ROOT / page).read_text()
    return re.findall(rf"^```{fence}\n(.*?)^```", text.split(after, 1)[1], re.S | re.M)[0]


def test_the_trajectory_viewer_commands_run_after_the_readme_quickstart(tmp_path: Path) -> None:
    # Loopback only, any free port: the quickstart's exporters as it names them.
    env = {
        **os.environ,
        "OTEL_EXPORTER_PROMETHEUS_PORT": "0",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
    }
    quickstart = _block("README.md", "python", "## Quickstart: in your training loop")
    done = subprocess.run(
        [sys.executable, "-c", quickstart], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    commands = _block("docs/trajectories.md", "bash", "### `rlmetrics report --html`")
    for line in commands.strip().splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[0] == "rlmetrics", line
        if argv[1] == "demo":  # quick, quiet, on any free port: the same run's files
            argv += ["--steps", "3", "--interval", "0", "--prometheus-port", "0", "--no-plot"]
        done = subprocess.run(
            [RLMETRICS, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, f"{line}\n{done.stderr}"
    page = re.search(r"--html (\S+)", commands)
    assert page is not None and (tmp_path / page.group(1)).stat().st_size > 0
