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

from collections.abc import Collection, Iterable, Mapping, Sequence

import attrs

from rlmetrics.values import finite_float

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
    "Sample",
    "family_lines",
    "memory_from_samples",
    "memory_lines",
    "pick_value",
    "read_memory",
    "read_samples",
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


#: One sample of a family: its labels and its value.
Sample = tuple[Mapping[str, str], float]


@attrs.frozen
class MemoryReading:
    """One host's memory in bytes, from one exposition. ``used`` or ``total`` is None when
    the endpoint did not give a usable value for it."""

    used: float | None
    total: float | None
    source: str


def memory_lines(text: str) -> str:
    """The lines of ``text`` that belong to the four memory families (samples, HELP, TYPE)."""
    return family_lines(text, MEMORY_FAMILIES, (_COMMON_PREFIX,))


def family_lines(text: str, families: Collection[str], prefixes: Iterable[str]) -> str:
    """The lines of ``text`` that belong to ``families`` (samples, HELP, TYPE), found by a
    substring search for ``prefixes`` (what the families' names start with) rather than by
    parsing every line."""
    kept: list[tuple[int, str]] = []
    for prefix in prefixes:
        position = 0
        while True:
            found = text.find(prefix, position)
            if found < 0:
                break
            start = text.rfind("\n", 0, found) + 1
            end = text.find("\n", found)
            if end < 0:
                end = len(text)
            line = text[start:end]
            if _in_families(line, families):
                kept.append((start, line))
            position = end
    kept.sort()  # the exposition's own order, each line once, whatever prefix found it
    lines = [line for i, (start, line) in enumerate(kept) if i == 0 or kept[i - 1][0] != start]
    return "\n".join(lines) + "\n" if lines else ""


def _in_families(line: str, families: Collection[str]) -> bool:
    rest = line
    for comment in _COMMENTS:
        if line.startswith(comment):
            rest = line[len(comment) :]
            break
    for family in families:
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
    return memory_from_samples(read_samples(memory_lines(text), MEMORY_FAMILIES), ip)


def read_samples(lines: str, families: Collection[str]) -> dict[str, list[Sample]]:
    """``{family: [(labels, value), ...]}`` of ``families`` in ``lines`` (an exposition cut to
    those families by :func:`family_lines`). Raises ValueError when they do not parse."""
    from prometheus_client.parser import text_string_to_metric_families  # not at plugin load

    return _samples(text_string_to_metric_families(lines), families)


def memory_from_samples(
    samples: Mapping[str, Sequence[Sample]], ip: str | None = None
) -> MemoryReading | None:
    """The host memory the memory families' samples give (see :func:`read_memory`)."""
    readings = [
        MemoryReading(
            used=pick_value(samples.get(used_family, ()), ip),
            total=pick_value(samples.get(total_family, ()), ip),
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


def _samples(parsed: Iterable[object], families: Collection[str]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for family in parsed:
        name = getattr(family, "name", "")
        if name not in families:
            continue
        for sample in getattr(family, "samples", ()):
            if sample.name == name:
                out.setdefault(name, []).append((sample.labels, sample.value))
    return out


def _byte_count(value: object) -> float | None:
    """``value`` as a float if it can be a byte count (finite, not negative), else None."""
    number = finite_float(value)
    return number if number is not None and number >= 0 else None


def pick_value(samples: Iterable[Sample], ip: str | None) -> float | None:
    """The usable value (finite, not negative) of the node's own sample (labelled with its
    ``ip``), else the first usable one; None when there is none."""
    usable = [
        (labels, number) for labels, value in samples if (number := _byte_count(value)) is not None
    ]
    if not usable:
        return None
    for labels, value in usable:
        if ip is not None and labels.get("ip") == ip:
            return value
    return usable[0][1]
