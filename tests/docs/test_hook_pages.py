"""Every hook a plugin can implement is on the pages that introduce hooks: the table of
docs/concepts.md ("Hooks and plugins") and a section of docs/writing-a-plugin.md. The concepts
table had not grown with the hooks (trajectories, alerts, phases, alert rules, key maps,
variables were missing), so a reader took the six left out for hooks that do not exist."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from rlmetrics import hookspecs

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _hooks() -> set[str]:
    return {
        name
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(function, "rlmetrics_spec")  # what hookspec marks a spec with
    }


def _concepts_table() -> set[str]:
    text = (DOCS / "concepts.md").read_text()
    section = text.split("## Hooks and plugins", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([a-z_]+)(?:\(|`)", row.split("|")[1])}


def _plugin_page_sections() -> set[str]:
    text = (DOCS / "writing-a-plugin.md").read_text()
    return set(re.findall(r"^### `([a-z_]+)\(", text, re.M))


def test_every_hook_is_in_the_concepts_table_and_has_a_section_on_the_plugin_page() -> None:
    hooks = _hooks()
    assert "log_metrics" in hooks and "register_variables" in hooks  # the specs were found
    assert hooks - _concepts_table() == set(), "docs/concepts.md's hook table misses these"
    assert hooks - _plugin_page_sections() == set(), "docs/writing-a-plugin.md misses these"
