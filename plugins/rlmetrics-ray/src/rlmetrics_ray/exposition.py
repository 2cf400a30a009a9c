"""What one Ray node's metrics endpoint says about its host's memory.

Every raylet's metrics agent serves a Prometheus exposition with ``ray_node_mem_used`` and
``ray_node_mem_total`` (bytes). Ray computes those two cgroup-aware: inside a container they
are the container's limit and usage, not the machine's. Newer Ray releases (2.60 among them)
also serve ``ray_node_mem_used_host`` / ``ray_node_mem_total_host``, the machine's own figures;
they are preferred when present, and :attr:`MemoryReading.source` says which pair a reading
came from.

A node's exposition is large (about 215 KB and 800 lines on Ray 2.60, mostly gRPC latency
histograms) and ``prometheus_client``'s parser takes ~190 ms over all of it; the four memory
families alone parse in well under a millisecond. So the lines of those families are picked
out first (a substring search, ~0.15 ms) and only they go through the parser.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import attrs

__all__ = [
    "MEMORY_FAMILIES",
    "SOURCE_CGROUP",
    "SOURCE_HOST",
    "SOURCES",
    "TOTAL_FAMILY",
    "TOTAL_HOST_FAMILY",
    "USED_FAMILY",
    "USED_HOST_FAMILY",
    "MemoryReading",
    "memory_lines",
    "read_memory",
]

USED_FAMILY = "ray_node_mem_used"
TOTAL_FAMILY = "ray_node_mem_total"
USED_HOST_FAMILY = "ray_node_mem_used_host"
TOTAL_HOST_FAMILY = "ray_node_mem_total_host"

#: ``rl.host.memory.source`` values: the machine's own figures (``*_host`` series) or Ray's
#: cgroup-aware ones (the container's inside a container, the machine's outside one).
SOURCE_HOST = "host"
SOURCE_CGROUP = "cgroup"
SOURCES = frozenset({SOURCE_HOST, SOURCE_CGROUP})

#: (used family, total family) per source, in order of preference.
_PAIRS: tuple[tuple[str, str, str], ...] = (
    (SOURCE_HOST, USED_HOST_FAMILY, TOTAL_HOST_FAMILY),
    (SOURCE_CGROUP, USED_FAMILY, TOTAL_FAMILY),
)
MEMORY_FAMILIES: frozenset[str] = frozenset(name for _, *pair in _PAIRS for name in pair)

_COMMON_PREFIX = "ray_node_mem_"
_COMMENTS = ("# HELP ", "# TYPE ")
# What may follow a family name in a line of that family: labels, or the value.
_AFTER_NAME = ("{", " ")


@attrs.frozen
class MemoryReading:
    """One host's memory in bytes, from one exposition. ``used`` or ``total`` is None when
    the endpoint did not give a usable value for it."""

    used: float | None
    total: float | None
    source: str


def memory_lines(text: str) -> str:
    """The lines of ``text`` that belong to the four memory families (samples, HELP, TYPE)."""
    kept: list[str] = []
    position = 0
    while True:
        found = text.find(_COMMON_PREFIX, position)
        if found < 0:
            break
        start = text.rfind("\n", 0, found) + 1
        end = text.find("\n", found)
        if end < 0:
            end = len(text)
        line = text[start:end]
        if _is_memory_line(line):
            kept.append(line)
        position = end
    return "\n".join(kept) + "\n" if kept else ""


def _is_memory_line(line: str) -> bool:
    rest = line
    for comment in _COMMENTS:
        if line.startswith(comment):
            rest = line[len(comment) :]
            break
    for family in MEMORY_FAMILIES:
        if rest.startswith(family) and rest[len(family) : len(family) + 1] in _AFTER_NAME:
            return True
    return False


def read_memory(text: str, ip: str | None = None) -> MemoryReading | None:
    """The host memory one node's exposition reports, or None when it reports none.

    Prefers the ``*_host`` pair, then the cgroup-aware pair, taking a pair with both values
    over one with only one. Where a family holds several samples, the one labelled with the
    node's own ``ip`` wins, else the first. Raises ValueError when the memory families do not
    parse (the rest of the exposition is never parsed).
    """
    from prometheus_client.parser import text_string_to_metric_families  # not at plugin load

    samples = _samples(text_string_to_metric_families(memory_lines(text)))
    readings = [
        MemoryReading(
            used=_pick(samples.get(used_family, ()), ip),
            total=_pick(samples.get(total_family, ()), ip),
            source=source,
        )
        for source, used_family, total_family in _PAIRS
    ]
    for reading in readings:
        if reading.used is not None and reading.total is not None:
            return reading
    for reading in readings:
        if reading.used is not None or reading.total is not None:
            return reading
    return None


Sample = tuple[Mapping[str, str], float]


def _samples(families: Iterable[object]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for family in families:
        name = getattr(family, "name", "")
        if name not in MEMORY_FAMILIES:
            continue
        for sample in getattr(family, "samples", ()):
            if sample.name == name:
                out.setdefault(name, []).append((sample.labels, sample.value))
    return out


def _pick(samples: Iterable[Sample], ip: str | None) -> float | None:
    """The usable value (finite, not negative) of the node's own sample, else the first."""
    usable = [
        (labels, float(value))
        for labels, value in samples
        if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0
    ]
    if not usable:
        return None
    for labels, value in usable:
        if ip is not None and labels.get("ip") == ip:
            return value
    return usable[0][1]
