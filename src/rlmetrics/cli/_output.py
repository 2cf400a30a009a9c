"""Helpers shared by the commands: JSON, aligned tables with a header row, argument types."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["add_format_options", "input_problem", "positive_count", "print_json", "print_table"]


def add_format_options(parser: argparse.ArgumentParser, *, markdown: bool = False) -> None:
    """``--json`` (and ``--markdown``), mutually exclusive."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--json", action="store_true", help="print machine-readable JSON")
    if markdown:
        group.add_argument("--markdown", action="store_true", help="print a markdown document")


def positive_count(text: str) -> int:
    """An argument's positive whole number (``--steps``); argparse says what else it got."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2) + "\n")


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Columns padded to their widest cell; the last column is left ragged."""
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header) - 1)]
    for row in (header, *rows):
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=False)]
        sys.stdout.write("  ".join([*cells, str(row[-1])]).rstrip() + "\n")


def input_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as a run's JSONL file, or None (a folder is named as one,
    with the JSONL files in it)."""
    if path.is_dir():
        found = sorted(p for p in path.glob("*.jsonl") if not p.name.endswith(".samples.jsonl"))[:5]
        inside = f" (in it: {', '.join(map(str, found))})" if found else " (it holds no .jsonl)"
        return f"{path} is a folder: give a JSONL file{inside}"
    if not path.exists():
        return f"{path}: no such file"
    if not path.is_file():
        return f"{path} is not a regular file (a device or a FIFO): give a JSONL file"
    if not os.access(path, os.R_OK):
        return f"{path}: cannot read it (permission denied)"
    return None
