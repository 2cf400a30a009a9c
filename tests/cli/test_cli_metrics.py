from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlmetrics.cli import main
from rlmetrics.cli.metrics import metrics_markdown
from rlmetrics.registry import default_registry

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_json_lists_every_declared_series(capsys: Any) -> None:
    assert main(["metrics", "--json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)}
    assert listed["rl.setup.duration"]["attributes"] == {"rl.setup.phase": None}
    assert listed["rl.efficiency.pct"]["unit"] == "%"
    assert listed["rl.reward.mean"]["key"] == "reward"


def test_text_has_a_header_row(capsys: Any) -> None:
    assert main(["metrics"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "KIND", "UNIT", "ACROSS", "RANKS", "DECLARED", "BY"]
    assert any(line.startswith("rl.reward.mean ") for line in lines)


def test_docs_catalogue_is_current() -> None:
    """docs/metrics.md is exactly what the installed plugins declare: regenerate it with
    `rlmetrics metrics --markdown > docs/metrics.md` in an environment with every
    distribution of this repository installed (any tox SDK env)."""
    generated = metrics_markdown(default_registry().declared())
    assert DOCS.read_text() == generated, (
        "docs/metrics.md is stale: regenerate it with "
        "`rlmetrics metrics --markdown > docs/metrics.md`"
    )
