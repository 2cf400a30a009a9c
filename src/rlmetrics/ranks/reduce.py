"""The reduction math: one step's values from every rank, merged key by key as declared.

Pure Python, no torch: the merger (:mod:`rlmetrics.ranks.merger`) hands this module a column
per key — one value per rank, ``None`` where the rank did not log the key — and gets the
run-level value back. A value that is not finite (NaN, an infinity) drops only itself: it is
left out of its key's merge and named in :attr:`Merged.dropped`, so the caller says it once.
A key no rank logged as a finite number is not finite in the run's row either, whatever its
reduction (every rank's +inf is inf, every rank's -inf is -inf, any other mix NaN), as one
process would log it — a divergence on every rank stays in sight — named in
:attr:`Merged.not_finite`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from operator import itemgetter, truediv
from typing import Any

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
    "ColumnPlan",
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
    ``(rank, key)`` of every value left out for not being finite (beside a finite one of
    another rank), the keys whose run value is not finite (no rank's value was), and the
    weighted means that fell back to a plain mean because some rank's weight was missing."""

    values: dict[str, float] = attrs.Factory(dict)
    stragglers: dict[str, Straggler] = attrs.Factory(dict)
    dropped: list[tuple[int, str]] = attrs.Factory(list)
    unweighted: list[str] = attrs.Factory(list)
    not_finite: list[str] = attrs.Factory(list)


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
    ranks, values, bad = [], [], []
    for rank, value in enumerate(column):
        if value is None:
            continue
        if value - value == 0:  # finite: NaN and infinities fail it
            ranks.append(rank)
            values.append(value)
        else:
            bad.append(rank)
    if values:  # left out beside a finite value (none finite: the run's value is not finite)
        dropped.extend((rank, key) for rank in bad)
    return ranks, values


def _not_finite(column: Sequence[float | None]) -> float | None:
    """The run's value of a column with no finite value: inf when every present value is
    +inf, -inf when every one is -inf, else NaN; None when no rank logged the key."""
    present = [value for value in column if value is not None]
    if not present:
        return None
    if all(value == math.inf for value in present):
        return math.inf
    if all(value == -math.inf for value in present):
        return -math.inf
    return math.nan


def merge_columns(
    columns: Sequence[Column], values: Mapping[str, Sequence[float | None]]
) -> Merged:
    """Merge ``values[key]`` (one entry per rank, None where absent) for every column.

    A key no rank logged is left out of the result; one no rank logged as a finite number is
    not finite (inf, -inf or NaN: :func:`_not_finite`), named in :attr:`Merged.not_finite`.
    ``sum``, ``min``,
    ``max`` and ``mean`` are over the ranks that logged a finite value; ``last`` is the
    highest rank's; ``weighted_mean`` weighs each rank by its value of the weight key (a
    rank without a finite, non-negative weight makes it a plain mean, listed in
    :attr:`Merged.unweighted`); ``straggler`` is the slowest rank's, with :class:`Straggler`.
    """
    return ColumnPlan(columns).merge([values[column.key] for column in columns], values)


def _picker(indices: Sequence[int]) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """``[seq[i] for i in indices]`` in C (an itemgetter of one index returns no tuple)."""
    if len(indices) == 1:
        only = indices[0]
        return lambda seq: (seq[only],)
    if not indices:
        return lambda seq: ()
    return itemgetter(*indices)


class ColumnPlan:
    """The columns of one key table grouped by reduction, worked out once per table, so a
    step whose every value is present and finite (the common step) merges a group at a
    time in C — ``map(math.fsum, ...)``, ``map(min, ...)`` — rather than key by key. Any
    other step merges column by column (:func:`merge_columns`' definition); both give the
    same values."""

    def __init__(self, columns: Sequence[Column]) -> None:
        self.columns = list(columns)
        self.keys = [column.key for column in self.columns]
        by_kind: dict[Reduce, list[int]] = {}
        for i, column in enumerate(self.columns):
            by_kind.setdefault(column.kind, []).append(i)
        self._groups = [
            (kind, _picker(by_kind.get(kind, [])))
            for kind in (Reduce.SUM, Reduce.MEAN, Reduce.MIN, Reduce.MAX, Reduce.LAST)
        ]
        self._weighted = [(i, self.columns[i]) for i in by_kind.get(Reduce.WEIGHTED_MEAN, [])]
        self._stragglers = [(i, self.columns[i].key) for i in by_kind.get(Reduce.STRAGGLER, [])]
        grouped = [
            i
            for kind in (Reduce.SUM, Reduce.MEAN, Reduce.MIN, Reduce.MAX, Reduce.LAST)
            for i in by_kind.get(kind, [])
        ]
        rest = [
            i for kind in (Reduce.WEIGHTED_MEAN, Reduce.STRAGGLER) for i in by_kind.get(kind, [])
        ]
        self._rest = _picker(rest)
        # The grouped results, then the rest's, back in the table's order.
        position = {i: at for at, i in enumerate(grouped + rest)}
        self._in_order = _picker([position[i] for i in range(len(self.columns))])

    def merge(
        self,
        values: Sequence[Sequence[float | None]],
        by_key: Mapping[str, Sequence[float | None]] | None = None,
        *,
        present: bool = True,
    ) -> Merged:
        """Merge ``values[i]`` (the ranks' values of ``columns[i]``); ``by_key`` maps the
        weight keys (default: these columns). ``present=False`` says some value is absent
        (the per-column merge, without trying the grouped one first). A column of no
        values (no ranks) merges column by column too: it is left out."""
        if not present or not self.columns or not all(values) or not _clean(values):
            if by_key is None:
                by_key = dict(zip(self.keys, values, strict=True))
            return _merge_each(self.columns, by_key)
        merged = Merged()
        pooled: list[Any] = []
        for kind, pick in self._groups:
            group = pick(values)
            if not group:
                continue
            if kind is Reduce.SUM:
                pooled.extend(map(math.fsum, group))
            elif kind is Reduce.MEAN:
                pooled.extend(map(truediv, map(math.fsum, group), map(len, group)))
            elif kind is Reduce.MIN:
                pooled.extend(map(min, group))
            elif kind is Reduce.MAX:
                pooled.extend(map(max, group))
            else:  # last
                pooled.extend([column[-1] for column in group])
        if self._weighted and by_key is None:
            by_key = dict(zip(self.keys, values, strict=True))
        for i, column in self._weighted:
            found = list(values[i])
            every = list(range(len(found)))
            pooled.append(_weighted(column, every, found, by_key, merged))  # type: ignore[arg-type]
        stragglers = merged.stragglers
        for i, key in self._stragglers:
            seconds: Sequence[float] = values[i]  # type: ignore[assignment]
            slowest = max(seconds)
            mean = math.fsum(seconds) / len(seconds)
            stragglers[key] = Straggler(
                min(seconds),
                mean,
                slowest,
                seconds.index(slowest),
                slowest / mean if mean > 0 else None,
            )
            pooled.append(slowest)
        merged.values = dict(zip(self.keys, self._in_order(pooled), strict=True))
        return merged


def _clean(values: Sequence[Sequence[float | None]]) -> bool:
    """Whether every value is present and finite: their exact sum is finite (an absence
    raises, a NaN or an infinity makes it not finite), found in C."""
    try:
        total = math.fsum(chain.from_iterable(values))  # type: ignore[arg-type]
    except (TypeError, OverflowError, ValueError):  # an absence; a finite overflow; inf - inf
        return False
    return total - total == 0


def _merge_each(columns: Sequence[Column], values: Mapping[str, Sequence[float | None]]) -> Merged:
    """:func:`merge_columns` column by column: absences and values that are not finite."""
    merged = Merged()
    dropped = merged.dropped
    out = merged.values
    for column in columns:
        key, kind = column.key, column.kind
        ranks, found = _finite(values[key], key, dropped)
        if not found:
            not_finite = _not_finite(values[key])
            if not_finite is not None:
                out[key] = not_finite
                merged.not_finite.append(key)
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
