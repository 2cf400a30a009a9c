"""docs/troubleshooting.md's "The docs or the dashboard are stale" commands regenerate every
page a staleness test checks: its `rlmetrics docs docs/*.md` left the key-map tables of
docs/integrations/*.md stale, which tests/tools/test_tools_keymap_docs.py then failed on."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_regenerate_commands_cover_every_page_with_a_generated_table() -> None:
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    section = text.split("## The docs or the dashboard are stale", 1)[1]
    commands = re.findall(r"^```sh\n(.*?)^```", section, re.S | re.M)[0]
    globs = [
        pattern
        for line in commands.splitlines()
        if line.startswith("rlmetrics docs ")
        for pattern in shlex.split(line)[2:]
    ]
    marked = {
        str(page.relative_to(ROOT))
        for page in ROOT.glob("docs/**/*.md")
        if re.search(r"<!-- rlmetrics:(metrics|keymap)\b", page.read_text())
    }
    covered = {str(page.relative_to(ROOT)) for pattern in globs for page in ROOT.glob(pattern)}
    assert marked and marked <= covered, sorted(marked - covered)
