from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from rlmetrics_test_dists import install

from rlmetrics.cli import main


def test_json_lists_the_builtins_as_entry_points(capsys: Any) -> None:
    assert main(["plugins", "--json"]) == 0
    listed = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert listed["jsonl"]["distribution"] == "rlmetrics"
    assert listed["jsonl"]["hooks"] == ["register_backends"]
    assert listed["jsonl"]["builtin"] is True
    assert listed["efficiency"]["status"] == "loaded"
    assert listed["efficiency"]["hooks"] == ["on_efficiency_summary", "register_phases"]
    assert listed["efficiency"]["series"] == ["rl.efficiency.seconds", "rl.efficiency.pct"]
    for exporter in ("otlp", "prometheus", "console_exporter"):
        assert listed[exporter]["hooks"] == ["register_exporters"]


def test_text_has_a_header_row_and_says_what_a_plugin_offers(capsys: Any) -> None:
    assert main(["plugins"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "DISTRIBUTION", "DETAIL"]
    setup = next(line for line in lines if line.startswith("setup "))
    assert "loaded" in setup and "hooks: on_setup_timing; declares 1 series" in setup


def test_a_plugin_that_only_declares_shows_its_series(
    capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(
        tmp_path,
        "declares-only",
        {
            "declares_only.py": """
                import rlmetrics

                rlmetrics.declare("decl", [rlmetrics.MetricSpec("decl.only", rlmetrics.Kind.GAUGE)])
            """
        },
        {"declares_only": "declares_only"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert main(["plugins"]) == 0
    finally:
        sys.modules.pop("declares_only", None)
    row = next(line for line in capsys.readouterr().out.splitlines() if "declares_only" in line)
    assert "declares 1 series" in row and "hooks" not in row
