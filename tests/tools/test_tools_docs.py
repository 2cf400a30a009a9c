"""The metric tables inside the docs pages are what the installed plugins declare, and every
page the README and the docs link to exists, down to the heading an anchor names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
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
    # No key of its own: recorded through its family's API, no Logger dict carries it.
    assert "| `acme.depth` | gauge | `{batch}` | `acme.queue` (open) | — | mean | a \\| b |" in (
        updated
    )
    teed = Declared("acme", MetricSpec("acme.rate", Kind.GAUGE, key="acme/rate"), "acme.family")
    assert "| `acme/rate` |" in metrics_table([teed], ["acme.family"])


def test_the_command_checks_and_rewrites(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"{START}rlmetrics.families.setup -->\n{END}\n")
    assert run_cli("docs", "--check", page).returncode == 1
    assert run_cli("docs", page).returncode == 0
    assert "`rl.setup.duration`" in page.read_text()
    assert run_cli("docs", "--check", page).returncode == 0


def test_a_page_that_cannot_be_read_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Before: ``FileNotFoundError`` with its traceback, exit 1."""
    for page, why in ((tmp_path / "missing.md", "no such file"), (tmp_path, "is a folder")):
        done = run_cli("docs", page)
        assert done.returncode == 2, done.stderr
        assert done.stderr == f"rlmetrics docs: {page}: {why}\n"


#: Every Markdown page a reader reaches from the README: its links are checked.
LINKED_PAGES = sorted(
    {
        ROOT / "README.md",
        ROOT / "benchmarks" / "README.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "examples").glob("*/README.md"),
    }
)
_LINK = re.compile(r"\]\(([^)\s]*)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text lower-cased, everything but
    letters, digits, spaces, hyphens and underscores removed, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = text.replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor ``page`` has: its headings' (repeats numbered as GitHub numbers them)
    and explicit ``<a id=...>`` ones. Fenced code is not a heading."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        found.update(_HTML_ANCHOR.findall(line))
        heading = None if fenced else _HEADING.match(line)
        if heading:
            anchor = github_anchor(heading.group(2))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def test_github_anchor_is_githubs() -> None:
    assert github_anchor("`rlmetrics check [--plugin NAME] [--json]`") == (
        "rlmetrics-check---plugin-name---json"
    )
    assert github_anchor("Async efficiency (`rlmetrics.families.efficiency`)") == (
        "async-efficiency-rlmetricsfamiliesefficiency"
    )
    assert github_anchor("`register_dashboard_rows(register)`") == (
        "register_dashboard_rowsregister"
    )
    assert github_anchor("Worker spans as children of the driver's step") == (
        "worker-spans-as-children-of-the-drivers-step"
    )


def test_local_links_resolve() -> None:
    """Every link to a file in the repository reaches it, and every ``#anchor`` (on another
    page or the same one) names a heading or an ``<a id>`` of that page."""
    broken = []
    for page in LINKED_PAGES:
        text = page.read_text()
        for target in _LINK.findall(text):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)} -> {target}"
            if not linked.exists():
                broken.append(f"{where}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{where}: no heading has that anchor")
    assert broken == []


def test_the_quickstart_the_readme_links_to_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    readme = (ROOT / "README.md").read_text()
    assert "](examples/quickstart.py)" in readme
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "rl_reward_mean{" in done.stdout and "rl_setup_duration_seconds{" in done.stdout
    assert "rows in quickstart-run/metrics.jsonl" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_marker_naming_what_nothing_declares_or_offers_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    """A misspelt module wrote an empty table (exit 0); a key map nobody offers was a KeyError
    traceback."""
    page = tmp_path / "page.md"
    page.write_text(f"{START}rlmetrics.families.setp -->\n{END}\n")
    done = run_cli("docs", page)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"rlmetrics docs: {page}: rlmetrics.families.setp declares no series (did you mean "
        "'rlmetrics.families.setup'?)\n"
    )
    assert page.read_text() == f"{START}rlmetrics.families.setp -->\n{END}\n"
    page.write_text("<!-- rlmetrics:keymap trll -->\n<!-- /rlmetrics:keymap -->\n")
    done = run_cli("docs", page)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"rlmetrics docs: {page}: no key map named 'trll' is offered")
    assert "(did you mean 'trl'?)" in done.stderr  # as a misspelt module is
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "page_text",
    [
        f"{START}rlmetrics_vllm.family -->\n| old |\n",  # no closing marker
        f"{START}rlmetrics_vllm.family -->\n| old |\n<!-- /rlmetrics:metric -->\n",  # misspelt
        f"{START}rlmetrics_vllm.family rlmetrics-gym.x -->\n| old |\n{END}\n",  # not a module
        # unclosed, so the next table's closing marker would take the next one in
        f"{START}rlmetrics_vllm.family -->\n| old |\n{START}rlmetrics_vllm.gen_ai -->\n{END}\n",
    ],
    ids=["unclosed", "misspelt-end", "not-a-module-name", "closed-by-the-next"],
)
def test_a_marker_that_opens_no_table_is_refused_naming_its_line(
    tmp_path: Path, page_text: str
) -> None:
    """An opening marker the command could not pair with its closing one (none, a misspelt
    one, a name that is no module) was passed over: exit 0, nothing said, the table stale."""
    page = tmp_path / "page.md"
    page.write_text("# A plugin\n\n" + page_text)
    done = run_cli("docs", page)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"rlmetrics docs: {page}: line 3: "), done.stderr
    assert END in done.stderr
    assert page.read_text() == "# A plugin\n\n" + page_text
