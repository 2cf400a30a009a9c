"""docs/dashboards.md's "What is on it" table names every row of the committed dashboard
(docs/grafana/rlmetrics.json, the one a user imports). The table had not grown with the
dashboard: five of its thirteen rows (reward components and validation datasets,
trajectories, off-policy rollouts, vLLM engine state and cache, GPUs) were on the dashboard
and nowhere on the page."""

from __future__ import annotations

import json
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _page_rows() -> set[str]:
    text = (DOCS / "dashboards.md").read_text()
    section = text.split("## What is on it", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # no header
    return {_name(row.split("|")[1]) for row in rows}


def _name(title: str) -> str:
    """A row's name without what follows it in parentheses: the distribution that adds it on
    the page ("vLLM engine (`rlmetrics-vllm`)"), a gloss in its title ("GenAI client (what the
    driver received)")."""
    return title.split(" (", 1)[0].strip()


def test_the_page_names_every_row_of_the_committed_dashboard() -> None:
    dashboard = json.loads((DOCS / "grafana" / "rlmetrics.json").read_text())
    rows = {_name(panel["title"]) for panel in dashboard["panels"] if panel["type"] == "row"}
    assert rows, "the committed dashboard has rows"
    assert rows - _page_rows() == set(), "docs/dashboards.md does not name these rows"
    assert _page_rows() - rows == set(), "docs/dashboards.md names rows the dashboard lacks"
