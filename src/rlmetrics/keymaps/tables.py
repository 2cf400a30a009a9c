"""A key map's table, kept inside the docs page of its trainer.

A page marks where the table goes with a pair of comments naming the map::

    <!-- rlmetrics:keymap trl -->
    ...generated...
    <!-- /rlmetrics:keymap -->

:func:`update_key_map_tables` rewrites what is between them (``rlmetrics docs PAGE...``); a
test fails when a committed page differs from what the map says, as it does for the metric
tables (:mod:`rlmetrics.catalogue`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ..configuration import suggest
from ..registry import Declared
from . import RUN_WALL_TIME, STEP_WALL_TIME, WILDCARD, KeyMap, KeyRule

__all__ = ["END", "START", "key_map_table", "update_key_map_tables"]

START = "<!-- rlmetrics:keymap "
END = "<!-- /rlmetrics:keymap -->"
_BLOCK = re.compile(
    r"(?P<open><!-- rlmetrics:keymap (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(?P<close>"
    + re.escape(END)
    + ")",
    re.DOTALL,
)
_EFFICIENCY_SERIES = "rl.efficiency.seconds"
_WALL_TIMES = {
    STEP_WALL_TIME: "the step's wall time: the denominator of `rl.efficiency.pct` (window `step`)",
    RUN_WALL_TIME: "the run's elapsed time: the denominator of `rl.efficiency.pct` (window `run`)",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _row(rule: KeyRule, by_name: Mapping[str, Declared]) -> str:
    kind = unit = "—"
    attributes = [f"`{k}`=`{v}`" for k, v in rule.attributes]
    if rule.series is not None:
        becomes = f"`{rule.series}`"
        item = by_name.get(rule.series)
        if item is None:
            becomes += " (not declared)"
        else:
            kind, unit = item.spec.kind.value.replace("_", " "), f"`{item.spec.unit}`"
        if rule.attribute is not None:
            attributes.append(f"`{rule.attribute}` = the `{WILDCARD}` part")
    elif rule.category in _WALL_TIMES:
        becomes = _WALL_TIMES[rule.category]
    elif rule.category is not None:
        becomes = f"`{_EFFICIENCY_SERIES}`"
        item = by_name.get(_EFFICIENCY_SERIES)
        if item is not None:
            kind, unit = item.spec.kind.value.replace("_", " "), f"`{item.spec.unit}`"
        attributes.append(f"`rl.efficiency.category`=`{rule.category}`")
    else:
        becomes = "backends only"
    if rule.backends_beside:
        beside = ", ".join(f"`{key}`" for key in rule.backends_beside)
        becomes += f" (backends only beside {beside})"
    return (
        f"| `{_cell(rule.key)}` | {becomes} | {kind} | {unit} | "
        f"{_cell(', '.join(attributes)) or '—'} | {_cell(rule.note)} |"
    )


def key_map_table(key_map: KeyMap, declared: Sequence[Declared]) -> str:
    """A markdown table of what each key of ``key_map`` becomes, in the map's order."""
    by_name = {item.spec.name: item for item in declared}
    lines = [
        "| Trainer key | Becomes | Kind | Unit | Attributes | Note |",
        "|---|---|---|---|---|---|",
        *(_row(rule, by_name) for rule in key_map.rules),
    ]
    return "\n".join(lines) + "\n"


def update_key_map_tables(
    text: str, maps: Mapping[str, KeyMap], declared: Sequence[Declared]
) -> str:
    """``text`` with every marked key-map table regenerated; a marker naming no offered map
    raises ``KeyError`` (a page that documents a map nobody offers is wrong)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in maps:
            meant = suggest(name, maps)
            raise KeyError(
                f"no key map named {name!r} is offered{meant} (available: {sorted(maps)})"
            )
        return match.group("open") + key_map_table(maps[name], declared) + match.group("close")

    return _BLOCK.sub(replace, text)
