"""Every `pip install` a page shows installs what it says from a clone: nothing is on a package
index yet, so an extra that stands for one of the plugin distributions (`rlmetrics[accelerate]`
is `rlmetrics-accelerate`) resolves only with that distribution's folder named beside it. The
trainer pages said `pip install 'rlmetrics[accelerate]'` alone, which pip refuses ("No matching
distribution found for rlmetrics-accelerate")."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the config extra's tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
#: The first-hour pages and the trackers' page.
PAGES = [
    ROOT / "README.md",
    *(
        ROOT / "docs" / f"{name}.md"
        for name in (
            "architecture",
            "concepts",
            "configuration",
            "conventions",
            "families",
            "integrations",
            "trackers",
            "troubleshooting",
            "writing-a-plugin",
        )
    ),
    *sorted((ROOT / "docs" / "integrations").glob("*.md")),
]
_COMMAND = re.compile(r"pip install ([^`\n]+)")
_EXTRAS = re.compile(r"(?:rlmetrics|\.)\[([a-z0-9_,-]+)\]")


def _plugin_extras() -> dict[str, str]:
    """``{extra: distribution}`` for the core's extras that stand for a plugin distribution."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    found = {}
    for extra, requirements in extras.items():
        for requirement in requirements:
            name = re.match(r"[A-Za-z0-9_.-]+", requirement)
            if name and name.group(0).startswith("rlmetrics-"):
                found[extra] = name.group(0)
    return found


COMMANDS = [
    (f"{page.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}", m.group(1))
    for page in PAGES
    for text in [page.read_text()]
    for m in _COMMAND.finditer(text)
]


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_a_plugin_extra_is_installed_with_its_folder(where: str, command: str) -> None:
    plugins = _plugin_extras()
    assert {"accelerate", "wandb", "vllm"} <= set(plugins)
    needed = {
        plugins[extra]
        for group in _EXTRAS.findall(command)
        for extra in group.split(",")
        if extra in plugins
    }
    missing = sorted(d for d in needed if f"plugins/{d}" not in command)
    assert not missing, f"{where}: name ./plugins/{missing[0]} beside the extra: {command}"
