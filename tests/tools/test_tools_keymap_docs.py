"""Each key map's table on its trainer's page is what the map says, and the integration pages'
links resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tools_support import run_cli

from rlmetrics import KeyMap, KeyRule
from rlmetrics.keymaps import STEP_WALL_TIME, available_key_maps
from rlmetrics.keymaps.tables import END, START, key_map_table, update_key_map_tables
from rlmetrics.registry import default_registry

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs" / "integrations").glob("*.md"))


def _maps() -> dict[str, KeyMap]:
    return {name: key_map for name, (_owner, key_map) in available_key_maps().items()}


def test_every_key_map_table_is_current_and_every_map_has_one() -> None:
    """Regenerate with `rlmetrics docs docs/integrations/*.md` in any tox SDK env."""
    maps, declared = _maps(), default_registry().declared()
    documented = [
        name for page in PAGES for name in re.findall(START + r"([\w.-]+) -->", page.read_text())
    ]
    assert sorted(documented) == sorted(maps), "one table per offered key map"
    stale = [
        p.name
        for p in PAGES
        if update_key_map_tables(p.read_text(), maps, declared) != p.read_text()
    ]
    assert stale == [], (
        f"stale key-map tables in {stale}: run `rlmetrics docs docs/integrations/*.md`"
    )


def test_a_table_says_what_each_kind_of_rule_becomes() -> None:
    key_map = KeyMap(
        "t",
        [
            KeyRule("kl", series="rl.kl.divergence", note="a | b"),
            KeyRule("timing/step", category=STEP_WALL_TIME),
            KeyRule("timing/sync", category="idle/refit_bubble"),
            KeyRule("epoch"),
            KeyRule("gone", series="no.such"),
        ],
    )
    rows = key_map_table(key_map, default_registry().declared()).splitlines()[2:]
    assert rows == [
        "| `kl` | `rl.kl.divergence` | gauge | `1` | — | a \\| b |",
        "| `timing/step` | the step's wall time: the denominator of `rl.efficiency.pct` "
        "(window `step`) | — | — | — |  |",
        "| `timing/sync` | `rl.efficiency.seconds` | gauge | `s` | "
        "`rl.efficiency.category`=`idle/refit_bubble` |  |",
        "| `epoch` | backends only | — | — | — |  |",
        "| `gone` | `no.such` (not declared) | — | — | — |  |",
    ]


def test_a_page_naming_a_map_nobody_offers_is_an_error() -> None:
    with pytest.raises(KeyError, match="no key map named 'nope'"):
        update_key_map_tables(f"{START}nope -->\n{END}\n", _maps(), [])


def test_the_command_checks_and_rewrites(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"{START}openrlhf -->\n{END}\n")
    assert run_cli("docs", "--check", page).returncode == 1
    assert run_cli("docs", page).returncode == 0
    assert "| `rollout/reward_mean` | `rl.reward.mean` |" in page.read_text()
    assert run_cli("docs", "--check", page).returncode == 0


def test_local_links_resolve() -> None:
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target:
                assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
