"""The metric tables inside the docs pages are what the installed plugins declare, and every
page the README and the docs link to exists."""

from __future__ import annotations

import re
from pathlib import Path

from tools_support import run_cli

from rlmetrics.catalogue import END, START, metrics_table, update_tables
from rlmetrics.registry import Declared, default_registry
from rlmetrics.spec import OPEN, Kind, MetricSpec

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md"))


def test_every_marked_table_is_current() -> None:
    """Regenerate with `rlmetrics docs docs/*.md` in an environment with every distribution
    of this repository installed (any tox SDK env)."""
    declared = default_registry().declared()
    marked = [page for page in PAGES if START in page.read_text()]
    assert {p.name for p in marked} >= {
        "families.md",
        "vllm.md",
        "gym.md",
        "gym-server.md",
        "ray.md",
    }
    stale = [p.name for p in marked if update_tables(p.read_text(), declared) != p.read_text()]
    assert stale == [], f"stale metric tables in {stale}: run `rlmetrics docs docs/*.md`"


def test_every_declared_series_has_a_family_page() -> None:
    declared = default_registry().declared()
    owners = {item.owner for item in declared}
    text = "".join(page.read_text() for page in PAGES if page.name != "metrics.md")
    listed = {m for block in re.findall(START + r"([\w. ]+) -->", text) for m in block.split()}
    assert owners <= listed, f"modules without a table on a family page: {owners - listed}"


def test_a_table_is_generated_between_its_markers(tmp_path: Path) -> None:
    spec = MetricSpec(
        "acme.depth",
        Kind.GAUGE,
        unit="{batch}",
        description="a | b",
        attributes={"acme.queue": OPEN},
    )
    declared = [Declared("acme", spec, "acme.family")]
    page = tmp_path / "page.md"
    page.write_text(f"intro\n{START}acme.family -->\nold\n{END}\noutro\n")
    updated = update_tables(page.read_text(), declared)
    assert updated == (
        f"intro\n{START}acme.family -->\n{metrics_table(declared, ['acme.family'])}{END}\noutro\n"
    )
    assert (
        "| `acme.depth` | gauge | `{batch}` | `acme.queue` (open) | `acme.depth` | a \\| b |"
        in (updated)
    )


def test_the_command_checks_and_rewrites(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"{START}rlmetrics.families.setup -->\n{END}\n")
    assert run_cli("docs", "--check", page).returncode == 1
    assert run_cli("docs", page).returncode == 0
    assert "`rl.setup.duration`" in page.read_text()
    assert run_cli("docs", "--check", page).returncode == 0


def test_local_links_resolve() -> None:
    for page in [ROOT / "README.md", *PAGES]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
