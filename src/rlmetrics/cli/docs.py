"""Regenerate the metric tables inside markdown pages from the declared series of every
installed plugin. A page marks a table with <!-- rlmetrics:metrics MODULE... --> and
<!-- /rlmetrics:metrics -->, a key map's table with <!-- rlmetrics:keymap NAME --> and
<!-- /rlmetrics:keymap -->; --check only says which pages are stale (exit status 1)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..catalogue import marker_problems, update_tables
from ..keymaps import available_key_maps
from ..keymaps.tables import update_key_map_tables
from ..plugins import load_plugins
from ..registry import default_registry

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "docs"
HELP = "regenerate the metric tables marked in markdown pages (docs/*.md)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pages", type=Path, nargs="+", metavar="PAGE.md", help="pages to update")
    parser.add_argument("--check", action="store_true", help="change nothing; fail if stale")


def run(args: argparse.Namespace) -> int:
    plugins = load_plugins()
    declared = default_registry().declared()
    maps = {name: key_map for name, (_owner, key_map) in available_key_maps(plugins).items()}
    for page in args.pages:  # all checked before any is written
        why = "is a folder" if page.is_dir() else None if page.is_file() else "no such file"
        if why is not None:
            sys.stderr.write(f"rlmetrics docs: {page}: {why}\n")
            return 2
    stale: dict[Path, str] = {}
    for page in args.pages:  # every page worked out before any is written
        text = page.read_text(encoding="utf-8")
        try:
            problems = marker_problems(text, declared)
            if problems:
                raise ValueError("; ".join(problems))
            updated = update_key_map_tables(update_tables(text, declared), maps, declared)
        except (KeyError, ValueError) as exc:  # a marker naming nothing: say it, write nothing
            sys.stderr.write(f"rlmetrics docs: {page}: {exc.args[0]}\n")
            return 2
        if updated != text:
            stale[page] = updated
    if not args.check:
        for page, updated in stale.items():
            page.write_text(updated, encoding="utf-8")
    for page in stale:
        sys.stdout.write(f"{'stale' if args.check else 'updated'}: {page}\n")
    return 1 if (args.check and stale) else 0
