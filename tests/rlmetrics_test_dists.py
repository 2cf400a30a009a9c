"""Real installed distributions for the plugin-loading tests.

``install(site, name, files, entry_points)`` lays out what an installer leaves in
site-packages: the package files and a ``.dist-info`` folder with ``METADATA`` and
``entry_points.txt`` (its entry points in ``group``, ``rlmetrics`` unless given).
``importlib.metadata`` then finds it like any installed distribution once ``site`` is on
``sys.path``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path

__all__ = ["install"]


def install(
    site: Path,
    name: str,
    files: Mapping[str, str],
    entry_points: Mapping[str, str],
    version: str = "0.1",
    group: str = "rlmetrics",
) -> None:
    for relative, text in files.items():
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    dist_info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    )
    lines = "".join(f"{key} = {value}\n" for key, value in entry_points.items())
    (dist_info / "entry_points.txt").write_text(f"[{group}]\n{lines}")
