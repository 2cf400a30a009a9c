from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlmetrics.cli import main, metrics_markdown
from rlmetrics.registry import default_registry

DOCS = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


def test_plugins_lists_the_builtins_as_entry_points(capsys: Any) -> None:
    assert main(["plugins", "--json"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert listed["jsonl"]["distribution"] == "rlmetrics"
    assert listed["jsonl"]["hooks"] == ["register_backends"]
    assert listed["efficiency"]["status"] == "loaded"
    assert listed["efficiency"]["hooks"] == ["on_efficiency_summary"]


def test_metrics_lists_every_declared_series(capsys: Any) -> None:
    assert main(["metrics", "--json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert listed["rl.setup.duration"]["attributes"] == {"rl.setup.phase": None}
    assert listed["rl.efficiency.pct"]["unit"] == "%"
    assert listed["rl.reward.mean"]["key"] == "reward"


def test_docs_catalogue_is_current() -> None:
    """docs/metrics.md must hold the row of every series declared here; regenerate it with
    `rlmetrics metrics --markdown > docs/metrics.md` (with every plugin installed)."""
    documented = DOCS.read_text().splitlines()
    generated = metrics_markdown(default_registry().declared()).splitlines()
    missing = [line for line in generated if line.startswith("| `") and line not in documented]
    assert not missing, "docs/metrics.md is stale:\n" + "\n".join(missing)
