"""examples/agent_loop.py runs as its docstring says: twelve trajectories, their spans in the
OTLP/JSON file and their rows in the samples file, and no prompt text in either."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rlmetrics.exporters.otlp_file import read_spans

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_loop.py"


def test_the_agent_loop_example_logs_its_trajectories(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    out = tmp_path / "agent-loop-run"
    rows = [json.loads(line) for line in (out / "metrics.samples.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and {r["name"] for r in rows} == {"trajectories"}
    assert {r["sample"]["outcome"] for r in rows} <= {"success", "failure", "truncated"}
    spans = [span for _resource, span in read_spans(out / "traces.otlp.jsonl")]
    assert sum(1 for s in spans if s["name"] == "invoke_agent calc-agent") == 12
    for path in out.iterdir():
        assert "six times seven" not in path.read_text()
