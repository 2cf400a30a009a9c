"""Every generated alert has its section in docs/operations.md, with the summary of when it
fires and its runbook line, word for word."""

from __future__ import annotations

from pathlib import Path

from rlmetrics.alerts.rules import collect_rules

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_every_alert_has_a_section_with_its_runbook_line() -> None:
    text = OPERATIONS.read_text()
    sections = {block.split("\n", 1)[0].strip(): block for block in text.split("\n### ")[1:]}
    rules, _, _ = collect_rules()
    for rule in rules:
        assert rule.name in sections, f"docs/operations.md has no '### {rule.name}' section"
        assert f"**What to do:** {rule.runbook}" in sections[rule.name], rule.name
        assert f"*{rule.severity}," in sections[rule.name], rule.name
