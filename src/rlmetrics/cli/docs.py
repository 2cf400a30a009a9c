"""Regenerate the metric tables inside markdown pages from the declared series of every
installed plugin. A page marks a table with <!-- rlmetrics:metrics MODULE... --> and
<!-- /rlmetrics:metrics -->; --check only says which pages are stale (exit status 1)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..catalogue import update_tables
from ..plugins import load_plugins
from ..registry import default_registry

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "docs"
HELP = "regenerate the metric tables marked in markdown pages (docs/*.md)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pages", type=Path, nargs="+", metavar="PAGE.md", help="pages to update")
    parser.add_argument("--check", action="store_true", help="change nothing; fail if stale")


def run(args: argparse.Namespace) -> int:
    load_plugins()
    declared = default_registry().declared()
    stale = []
    for page in args.pages:
        text = page.read_text(encoding="utf-8")
        updated = update_tables(text, declared)
        if updated != text:
            stale.append(page)
            if not args.check:
                page.write_text(updated, encoding="utf-8")
    for page in stale:
        sys.stdout.write(f"{'stale' if args.check else 'updated'}: {page}\n")
    return 1 if (args.check and stale) else 0
