"""Helpers shared by the commands: JSON, aligned tables with a header row, argument types."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "add_format_options",
    "input_problem",
    "positive_count",
    "print_json",
    "print_table",
    "prometheus_url",
]


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


def prometheus_url(text: str) -> str:
    """An argument's Prometheus server (``--prometheus``): a URL, or ``HOST:PORT`` as the
    stack's targets are given, asked over http (urllib calls a bare address an unknown URL
    type)."""
    given = text.strip()
    if "://" not in given:
        given = f"http://{given}"
    if not given.startswith(("http://", "https://")) or len(given) <= len("https://"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is no Prometheus server: give its http:// or https:// URL (or HOST:PORT)"
        )
    # urllib takes a port past 65535 modulo 65536 (99999 asks 34463): another server.
    from urllib.parse import urlsplit

    try:
        port = urlsplit(given).port
    except ValueError:
        port = 0
    if port == 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is no Prometheus server: its port is no port number (1-65535)"
        )
    return given


def print_json(value: Any, command: str = "rlmetrics", *, indent: int | None = 2) -> None:
    """``value`` as strict JSON on stdout. A number past float's range (a sum of step times
    of 1e308, say) is printed as null, and one line on stderr names where: ``Infinity`` and
    ``NaN`` are not JSON, and jq, ``JSON.parse`` and Go refuse a whole document over one.

    Written a part at a time (:func:`_parts`): a long run's steps are never held again as a
    copy and as one string beside the answer itself."""
    past: list[str] = []
    for part in _parts(value, "", past, indent, 0):
        sys.stdout.write(part)
    sys.stdout.write("\n")
    if past:
        named = ", ".join(past[:5]) + (f" and {len(past) - 5} more" if len(past) > 5 else "")
        sys.stderr.write(
            f"{command}: {len(past)} values past float's range printed as null: {named}\n"
        )


#: A dict or list deeper than the answer's own fields is written whole unless it has more
#: items than this (a run's steps): a part a small one at a time would only be slower.
_WHOLE_UP_TO = 256


def _parts(value: Any, path: str, past: list[str], indent: int | None, level: int) -> Iterator[str]:
    """``json.dumps(_finite(value), indent=indent)`` in parts: the items of the answer's
    dict, of its fields and of any long list one at a time, each made finite as it is
    written."""
    mapping = isinstance(value, dict)
    items: Iterable[tuple[Any, Any]] = ()
    if mapping:
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    if not items or not value or (level > 1 and len(value) <= _WHOLE_UP_TO):
        yield _dumps(_finite(value, path, past), indent, level)
        return
    inner = "" if indent is None else "\n" + " " * (indent * (level + 1))
    yield "{" if mapping else "["
    for n, (key, item) in enumerate(items):
        yield ("," if indent is not None else ", ") * (n > 0) + inner
        if mapping:  # the key as json.dumps writes it (an int's as a string)
            yield _dumps({key: None}, None, 0)[1 : -len(": null}")] + ": "
            where = f"{path}.{key}" if path else str(key)
        else:
            where = f"{path}[{key}]"
        yield from _parts(item, where, past, indent, level + 1)
    yield ("" if indent is None else "\n" + " " * (indent * level)) + ("}" if mapping else "]")


def _dumps(value: Any, indent: int | None, level: int) -> str:
    """``value``'s JSON as it reads ``level`` containers deep in an indented document."""
    text = json.dumps(value, indent=indent)
    return text if not indent or not level else text.replace("\n", "\n" + " " * (indent * level))


def _finite(value: Any, path: str, past: list[str]) -> Any:
    """``value`` with each non-finite float replaced by None, its dotted path noted."""
    if isinstance(value, float) and not math.isfinite(value):
        past.append(path or "(the whole answer)")
        return None
    if isinstance(value, dict):
        return {k: _finite(v, f"{path}.{k}" if path else str(k), past) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v, f"{path}[{i}]", past) for i, v in enumerate(value)]
    return value


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
