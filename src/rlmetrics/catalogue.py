"""Metric tables generated from the registry, kept inside the docs pages that explain them.

A page marks where a table goes with a pair of comments naming the declaring modules::

    <!-- rlmetrics:metrics rlmetrics_vllm.family rlmetrics_vllm.gen_ai -->
    ...generated...
    <!-- /rlmetrics:metrics -->

:func:`update_tables` rewrites what is between them (``rlmetrics docs FILE...``); a test fails
when a committed page differs from what the installed plugins declare, as it does for
``docs/metrics.md``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence

from .registry import Declared

__all__ = [
    "END",
    "START",
    "marker_problems",
    "metrics_table",
    "table_cell",
    "undeclaring_modules",
    "update_tables",
]

START = "<!-- rlmetrics:metrics "
END = "<!-- /rlmetrics:metrics -->"
_BLOCK = re.compile(
    r"(?P<open><!-- rlmetrics:metrics (?P<modules>[\w. ]+?) -->\n)(?P<body>.*?)(?P<close>"
    + re.escape(END)
    + ")",
    re.DOTALL,
)


def table_cell(text: str) -> str:
    """``text`` as one markdown table cell: its ``|`` escaped and its line breaks (any run of
    white space) one space, so a description cannot split or end its row."""
    return " ".join(text.split()).replace("|", "\\|")


def _attributes(item: Declared) -> str:
    parts = []
    for key, allowed in item.spec.attributes:
        values = "open" if allowed is None else ", ".join(f"`{v}`" for v in sorted(allowed))
        parts.append(f"`{key}` ({values})")
    return "; ".join(parts) or "—"


def _logger_key(item: Declared) -> str:
    """The key a Logger's dict carries for the series, or ``—`` for one its family records
    through its API (:func:`~rlmetrics.known_keys.logger_key`)."""
    from .known_keys import logger_key

    key = logger_key(item.spec)
    return "—" if key is None else f"`{key}`"


def metrics_table(declared: Sequence[Declared], modules: Iterable[str]) -> str:
    """A markdown table of what ``modules`` declare, module by module, in declaration order."""
    lines = [
        "| Metric | Kind | Unit | Attributes | Logger key | Across ranks | Description |",
        "|---|---|---|---|---|---|---|",
    ]
    for module in modules:
        for item in declared:
            if item.owner != module:
                continue
            spec = item.spec
            buckets = (
                f" Buckets: {', '.join(f'{b:.12g}' for b in spec.buckets)}." if spec.buckets else ""
            )
            description = table_cell(spec.description + buckets)
            lines.append(
                f"| `{spec.name}` | {spec.kind.value.replace('_', ' ')} | `{spec.unit}` | "
                f"{_attributes(item)} | {_logger_key(item)} | {spec.reduction.describe()} | "
                f"{description} |"
            )
    return "\n".join(lines) + "\n"


def undeclaring_modules(text: str, declared: Sequence[Declared]) -> list[str]:
    """What is wrong with ``text``'s markers: one line for each module a marker names that
    declares no series (a misspelling writes an empty table), with the module meant."""
    owners = sorted({item.owner for item in declared})
    problems = []
    for match in _BLOCK.finditer(text):
        for module in match.group("modules").split():
            if module not in owners:
                close = difflib.get_close_matches(module, owners, n=1)
                problems.append(
                    f"{module} declares no series"
                    + (f" (did you mean {close[0]!r}?)" if close else "")
                )
    return problems


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def marker_problems(text: str, declared: Sequence[Declared]) -> list[str]:
    """What is wrong with ``text``'s markers, one line each: an opening marker (at the start
    of a line) that opens no table (no closing marker after it, a misspelt one, or names that
    are no module names: :func:`update_tables` would pass it over and leave the table stale),
    a table not closed before the next opens (it would take the next one in), and every
    module a marker names that declares no series (:func:`undeclaring_modules`)."""
    problems = []
    opened: set[int] = set()
    for block in _BLOCK.finditer(text):
        opened.add(block.start())
        inner = block.group("body").find(START)
        if inner >= 0:
            problems.append(
                f"line {_line(text, block.start())}: the table opened here is not closed before "
                f"line {_line(text, block.start('body') + inner)} opens another: close it with "
                f"{END}"
            )
    # Only a marker that starts a line: prose that quotes one (`<!-- rlmetrics:metrics ...`)
    # is no marker.
    for marker in re.finditer("^" + re.escape(START), text, re.MULTILINE):
        if marker.start() in opened or any(
            block.start("body") <= marker.start() < block.end("body")
            for block in _BLOCK.finditer(text)
        ):
            continue
        first_line = text[marker.start() :].split("\n", 1)[0]
        problems.append(
            f"line {_line(text, marker.start())}: {first_line!r} opens no table: name modules "
            f"(letters, digits, _ and .) and close it with {END} on a line of its own after it"
        )
    return problems + undeclaring_modules(text, declared)


def update_tables(text: str, declared: Sequence[Declared]) -> str:
    """``text`` with every marked table regenerated from ``declared``."""

    def replace(match: re.Match[str]) -> str:
        modules = match.group("modules").split()
        return match.group("open") + metrics_table(declared, modules) + match.group("close")

    return _BLOCK.sub(replace, text)
