"""The reduction math: one step's values from every rank, merged key by key as declared.

Pure Python, no torch: the merger (:mod:`rlmetrics.ranks.merger`) hands this module a column
per key — one value per rank, ``None`` where the rank did not log the key — and gets the
run-level value back. A value that is not finite (NaN, an infinity) drops only itself: it is
left out of its key's merge and named in :attr:`Merged.dropped`, so the caller says it once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs

from ..spec import Reduce

__all__ = [
    "PHASE_ATTR",
    "STRAGGLER_GROUP",
    "STRAGGLER_MAX",
    "STRAGGLER_MEAN",
    "STRAGGLER_MIN",
    "STRAGGLER_SKEW",
    "STRAGGLER_SLOWEST",
    "STRAGGLER_SUFFIXES",
    "Column",
    "Merged",
    "Straggler",
    "merge_columns",
]

#: The straggler series (declared by :mod:`rlmetrics.families.ranks`): a few per phase, the
#: phase (the logged key) as their one attribute, never a series per rank.
STRAGGLER_GROUP = "rl.ranks"
STRAGGLER_MAX = "rl.ranks.duration.max"
STRAGGLER_MIN = "rl.ranks.duration.min"
STRAGGLER_MEAN = "rl.ranks.duration.mean"
STRAGGLER_SLOWEST = "rl.ranks.slowest"
STRAGGLER_SKEW = "rl.ranks.skew"
PHASE_ATTR = "rl.ranks.phase"

#: What a straggler key adds to the merged dict beside itself (the slowest rank's seconds).
STRAGGLER_SUFFIXES = ("/rank_min", "/rank_mean", "/rank_max", "/slowest_rank", "/rank_skew")


@attrs.frozen
class Column:
    """How one key merges: its reduction, and for a weighted mean the key of its weight."""

    key: str
    kind: Reduce
    weight: str | None = None


@attrs.frozen
class Straggler:
    """One phase's seconds across ranks: the fastest, the mean, the slowest and which rank
    was slowest (the lowest rank on a tie), and the skew: slowest over mean (None when the
    mean is 0)."""

    min: float
    mean: float
    max: float
    slowest_rank: int
    skew: float | None

    def items(self, key: str) -> dict[str, float]:
        """The dict entries this phase adds under ``key`` (:data:`STRAGGLER_SUFFIXES`)."""
        out = {
            key + "/rank_min": self.min,
            key + "/rank_mean": self.mean,
            key + "/rank_max": self.max,
            key + "/slowest_rank": float(self.slowest_rank),
        }
        if self.skew is not None:
            out[key + "/rank_skew"] = self.skew
        return out


@attrs.define
class Merged:
    """A step merged across ranks: the run-level values, the straggler phases, the
    ``(rank, key)`` of every value left out for not being finite, and the weighted means
    that fell back to a plain mean because some rank's weight was missing."""

    values: dict[str, float] = attrs.Factory(dict)
    stragglers: dict[str, Straggler] = attrs.Factory(dict)
    dropped: list[tuple[int, str]] = attrs.Factory(list)
    unweighted: list[str] = attrs.Factory(list)


def _finite(
    column: Sequence[float | None], key: str, dropped: list[tuple[int, str]]
) -> tuple[list[int] | None, list[float]]:
    """The ranks (None: every rank, in order) and their finite values; a value that is not
    finite is named in ``dropped``. The common column (every rank, every value finite) is
    found in C: its exact sum is finite (None in it raises)."""
    try:
        total = math.fsum(column)  # type: ignore[arg-type]
    except (TypeError, OverflowError, ValueError):  # an absence; a finite overflow; inf - inf
        total = math.nan
    if total - total == 0:
        return None, list(column)  # type: ignore[arg-type]
    ranks, values = [], []
    for rank, value in enumerate(column):
        if value is None:
            continue
        if value - value == 0:  # finite: NaN and infinities fail it
            ranks.append(rank)
            values.append(value)
        else:
            dropped.append((rank, key))
    return ranks, values


def merge_columns(
    columns: Sequence[Column], values: Mapping[str, Sequence[float | None]]
) -> Merged:
    """Merge ``values[key]`` (one entry per rank, None where absent) for every column.

    A key no rank logged a finite value for is left out of the result. ``sum``, ``min``,
    ``max`` and ``mean`` are over the ranks that logged a finite value; ``last`` is the
    highest rank's; ``weighted_mean`` weighs each rank by its value of the weight key (a
    rank without a finite, non-negative weight makes it a plain mean, listed in
    :attr:`Merged.unweighted`); ``straggler`` is the slowest rank's, with :class:`Straggler`.
    """
    merged = Merged()
    dropped = merged.dropped
    out = merged.values
    for column in columns:
        key, kind = column.key, column.kind
        ranks, found = _finite(values[key], key, dropped)
        if not found:
            continue
        if kind is Reduce.SUM:
            out[key] = math.fsum(found)
        elif kind is Reduce.MEAN:
            out[key] = math.fsum(found) / len(found)
        elif kind is Reduce.MIN:
            out[key] = min(found)
        elif kind is Reduce.MAX:
            out[key] = max(found)
        elif kind is Reduce.LAST:
            out[key] = found[-1]
        elif kind is Reduce.WEIGHTED_MEAN:
            every = range(len(found)) if ranks is None else ranks
            out[key] = _weighted(column, list(every), found, values, merged)
        else:  # straggler
            slowest = max(found)
            mean = math.fsum(found) / len(found)
            at = found.index(slowest)
            rank = at if ranks is None else ranks[at]
            out[key] = slowest
            merged.stragglers[key] = Straggler(
                min(found), mean, slowest, rank, slowest / mean if mean > 0 else None
            )
    return merged


def _weighted(
    column: Column,
    ranks: list[int],
    found: list[float],
    values: Mapping[str, Sequence[float | None]],
    merged: Merged,
) -> float:
    weights = values.get(column.weight) if column.weight is not None else None
    pairs: list[tuple[float, float]] = []
    if weights is not None:
        for rank, value in zip(ranks, found, strict=True):
            weight = weights[rank]
            if weight is None or weight - weight != 0 or weight < 0:
                pairs = []
                break
            pairs.append((value, weight))
    total = math.fsum(w for _, w in pairs)
    if not pairs or total <= 0:
        merged.unweighted.append(column.key)
        return math.fsum(found) / len(found)
    return math.fsum(v * w for v, w in pairs) / total
