"""The core's extras install what their names say, and the README names every one (issue 25:
``rlmetrics[all]`` installed two exporters' packages of a dozen distributions)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with Python 3.11's tomllib")

ROOT = Path(__file__).resolve().parents[2]


def _extras() -> dict[str, list[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return dict(project["optional-dependencies"])


def _names(requirements: list[str]) -> set[str]:
    """The distributions (and ``rlmetrics[x]`` extras, expanded) a list of requirements asks
    for."""
    extras = _extras()
    found: set[str] = set()
    for requirement in requirements:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)  # type: ignore[union-attr]
        if name == "rlmetrics":
            for extra in re.search(r"\[([^\]]*)\]", requirement).group(1).split(","):  # type: ignore[union-attr]
                found |= _names(extras[extra.strip()])
        else:
            found.add(name)
    return found


def test_an_extra_named_all_installs_every_extra() -> None:
    extras = _extras()
    if "all" in extras:
        everything = set().union(*(_names(r) for n, r in extras.items() if n != "all"))
        assert _names(extras["all"]) == everything


def test_the_exporters_extra_installs_both_exporters() -> None:
    assert _names(_extras()["exporters"]) == {
        "opentelemetry-exporter-otlp-proto-grpc",
        "opentelemetry-exporter-prometheus",
        "prometheus-client",
    }


def test_every_plugin_distribution_has_its_extra_and_the_readme_names_each() -> None:
    extras = _extras()
    readme = (ROOT / "README.md").read_text()
    for plugin in sorted((ROOT / "plugins").glob("*/pyproject.toml")):
        name = tomllib.loads(plugin.read_text())["project"]["name"]
        extra = name.removeprefix("rlmetrics-")
        assert any(r.startswith(name) for r in extras.get(extra, [])), f"no extra for {name}"
        assert f"`rlmetrics[{extra}]`" in readme, f"the README does not name rlmetrics[{extra}]"
    for extra in extras:
        assert f"[{extra}]" in readme or f",{extra}" in readme or f"{extra}," in readme, extra
