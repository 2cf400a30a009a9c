"""docs/conventions.md maps every series rlmetrics and its installed plugins declare to the
proposed RL conventions' name for it, or says none: a series in no row of its table fails
here, so the table stays true as series are added (run where the plugins are installed)."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

from rlmetrics.plugins import get_plugins
from rlmetrics.registry import default_registry

DOCS = Path(__file__).resolve().parents[2] / "docs" / "conventions.md"
HEADING = "### Every rlmetrics series in the proposal's terms"


def _patterns() -> list[str]:
    """The names and globs (``rl.sft_v2.*``) of the first cell of each row of the table."""
    lines = DOCS.read_text().splitlines()
    start = lines.index(HEADING)
    header = next(i for i in range(start, len(lines)) if lines[i].startswith("| rlmetrics series"))
    patterns: list[str] = []
    for line in lines[header + 2 :]:
        if not line.startswith("|"):
            break
        first = line.strip().strip("|").split(" | ")[0]
        patterns += re.findall(r"`([^`]+)`", first)
    return patterns


def test_every_declared_series_has_a_row() -> None:
    get_plugins()  # every installed plugin's declarations
    patterns = _patterns()
    declared = sorted({item.spec.name for item in default_registry().declared()})
    assert len(declared) > 20
    missing = [n for n in declared if not any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    assert not missing, f"docs/conventions.md's table lacks rows for {missing}"


def test_every_row_names_a_declared_series() -> None:
    """A row for a series no longer declared would be a stale promise (checked where the
    plugins whose series the table names are installed: the SDK envs)."""
    for plugin in ("rlmetrics_vllm", "rlmetrics_gym", "rlmetrics_ray"):
        pytest.importorskip(plugin)
    get_plugins()
    declared = {item.spec.name for item in default_registry().declared()}
    stale = [p for p in _patterns() if not fnmatch.filter(declared, p)]
    assert not stale, f"docs/conventions.md's table names series nobody declares: {stale}"
