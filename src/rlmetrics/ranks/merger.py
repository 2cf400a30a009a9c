"""RankMerger: every rank's logged dict merged into the run's, one collective per step.

A Logger built with a merger (``Logger(ranks=rlmetrics.ranks.torch_distributed())``) hands it
each flattened dict before anything is written. Every rank writes its raw values, tagged with
its rank and host, to a JSONL file of its own (so the merge can be checked); the ranks then
exchange their numbers in one collective and the logging rank (rank 0) gets the run-level
dict, which its trackers and the OpenTelemetry tee receive — one row per step, not one per
rank. The other ranks' tee gets their own values only when asked (``export_own=True``).

How each key merges is declared (:class:`~rlmetrics.ranks.declared.Reductions`): the spec
whose logger key it is, else the ``reductions`` given here, else the efficiency dict's own
rule (category seconds are phase times: stragglers), else a mean.

The exchange (the steady state, one fixed-width collective): each rank packs its numbers in
the order of a key table the ranks agreed on for the dict's prefix, a presence mask beside
them (a rank may lack a key; NaN is a value, not an absence), under a header carrying the
table's fingerprint. When a rank has a key the table lacks, or the fingerprints disagree, the
ranks exchange their dicts as objects once, merge from those, and every rank builds the same
new table (the sorted union) from what it received: a changed key set costs one exchange more,
once. A collective that fails (a rank died: the process group's timeout) stops the merging
for the rest of the run, said once: rank 0 logs its own values from then on, so the loop
goes on.
"""

from __future__ import annotations

import json
import operator
import os
import socket
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any, Protocol

from .._warn import warn_once
from ..backends.jsonl import JsonlBackend, to_json_value
from ..flatten import key_text
from ..identity import RunIdentity, new_run_id
from ..keyplans import KeyPlans
from ..registry import record
from ..spec import Reduce, Reduction
from ..values import as_real
from .declared import Reductions
from .reduce import (
    PHASE_ATTR,
    STRAGGLER_GROUP,
    STRAGGLER_MAX,
    STRAGGLER_MEAN,
    STRAGGLER_MIN,
    STRAGGLER_SKEW,
    STRAGGLER_SLOWEST,
    Column,
    ColumnPlan,
    Merged,
    Straggler,
    merge_columns,
)

__all__ = ["DEFAULT_RAW_PATH", "Collective", "RankMerger", "RankRows", "numbers_of", "run_row"]

#: Where each rank's raw rows go; ``{rank}`` is the rank.
DEFAULT_RAW_PATH = "rlmetrics.rank{rank}.jsonl"
#: Mask bits one float64 holds exactly.
_MASK_BITS = 52
#: Header: the table's fingerprint, whether this rank needs a new table, the step.
_HEADER = 3
_HEADER_OF = operator.itemgetter(0, 1)
_FLOATS = frozenset({float})


class Collective(Protocol):
    """The two collectives a merger needs, on some engine's process group."""

    rank: int
    world_size: int

    def all_gather(self, row: list[float]) -> list[list[float]]:
        """Every rank's ``row`` (one fixed width on every rank), in rank order."""

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's picklable ``obj``, in rank order."""


class RankRows(JsonlBackend):
    """A rank's raw rows: the JSONL backend's, with ``rank`` and ``host`` on each."""

    def __init__(self, path: str | os.PathLike[str], identity: RunIdentity, rank: int) -> None:
        super().__init__(path, identity)
        self.rank = rank
        self.host = socket.gethostname()

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        self.log_rank(metrics, step, prefix, self.rank, self.host)

    def log_rank(
        self, metrics: Mapping[str, Any], step: int, prefix: str, rank: int, host: str | None
    ) -> None:
        """One row of ``rank``'s: a process that holds every rank's values (Ray Train's
        controller) writes them all, with the host it was told (None: not known there)."""
        row = {
            "time": time.time(),
            "run_id": self.run_id,
            "rank": rank,
            "host": host,
            "step": step,
            "prefix": prefix,
            "metrics": {key_text(k): to_json_value(v) for k, v in metrics.items()},
        }
        self._write(json.dumps(row, allow_nan=False) + "\n")


def numbers_of(flat: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a flattened dict (what merges): floats as they are, any other real
    (ints, NumPy and torch scalars, bools) as a float; strings and the like are left out."""
    numbers: dict[str, float] = {}
    for key, value in flat.items():
        if type(value) is float:  # the common value, without a call
            numbers[key] = value
            continue
        number = as_real(value)
        if number is not None and type(key) is str:
            try:
                numbers[key] = float(number)
            except OverflowError:
                continue
    return numbers


def run_row(
    flat: Mapping[str, Any], numbers: Mapping[str, float], merged: Merged, step: int
) -> dict[str, Any]:
    """The run's row of a merged step: ``flat``'s values that are not numbers (the logging
    rank's), every merged number, each straggler phase's entries; the straggler series are
    recorded and what the merge left out is said once per key."""
    for rank, key in merged.dropped:
        warn_once(
            f"ranks:dropped:{key}",
            f"rlmetrics: rank {rank} logged {key!r} as a value that is not finite at step "
            f"{step}; it is left out of the merge of {key!r} (said once per key)",
        )
    for key in merged.unweighted:
        warn_once(
            f"ranks:unweighted:{key}",
            f"rlmetrics: {key!r} is a weighted mean, but some rank logged it without a "
            "usable weight; it was merged as a plain mean (said once per key)",
        )
    # numbers' keys are flat's: as many means every value is a number (the common dict).
    if len(numbers) == len(flat):
        out = dict(merged.values)
    else:
        out = {k: v for k, v in flat.items() if k not in numbers}
        out.update(merged.values)
    for key, straggler in merged.stragglers.items():
        out.update(straggler.items(key))
        values = {
            STRAGGLER_MAX: straggler.max,
            STRAGGLER_MIN: straggler.min,
            STRAGGLER_MEAN: straggler.mean,
            STRAGGLER_SLOWEST: straggler.slowest_rank,
            STRAGGLER_SKEW: straggler.skew,
        }
        record(STRAGGLER_GROUP, values, {PHASE_ATTR: key})
    return out


class _Table:
    """The keys the ranks agreed on for one prefix, in order, with their merge columns, and
    what packing a dict against it needs, worked out once per key sequence."""

    def __init__(self, keys: Sequence[str], columns: Sequence[Column]) -> None:
        self.keys = list(keys)
        self.index = {key: i for i, key in enumerate(self.keys)}
        self.columns = list(columns)
        self.plan = ColumnPlan(self.columns)
        self.words = words = -(-len(self.keys) // _MASK_BITS)
        self.start = _HEADER + words
        last = len(self.keys) - (words - 1) * _MASK_BITS
        #: Each mask word with every key present, as ints and as the floats a row carries.
        self.full = [(1 << _MASK_BITS) - 1] * (words - 1) + [(1 << last) - 1] if words else []
        self.full_row = [float(word) for word in self.full]
        self.masks_of = operator.itemgetter(slice(_HEADER, self.start))
        self.values_of = operator.itemgetter(slice(self.start, None))
        digest = zlib.crc32("\0".join(self.keys).encode("utf-8", "surrogatepass"))
        self.fingerprint = float(digest + 1)  # never 0.0, a table nobody agreed on
        self.packs: KeyPlans[_Pack] = KeyPlans(lambda found: _Pack(self, found))


class _Pack:
    """How a dict of one key sequence packs against a table: whether its keys fit, its mask
    words, and which of its values goes where (an absent key's slot takes a 0.0 appended
    to the values)."""

    __slots__ = ("fits", "mask", "order")

    def __init__(self, table: _Table, keys: tuple[str, ...]) -> None:
        index = table.index
        self.fits = all(key in index for key in keys)
        mask = [0] * table.words
        at: dict[int, int] = {}
        if self.fits:
            for position, key in enumerate(keys):
                i = index[key]
                at[i] = position
                mask[i // _MASK_BITS] |= 1 << (i % _MASK_BITS)
        self.mask = [float(word) for word in mask]
        places = [at.get(i, len(keys)) for i in range(len(table.keys))]
        #: None: the dict's values are in the table's order already, every key present.
        self.order: Callable[[Sequence[float]], Sequence[float]] | None = (
            None if places == list(range(len(keys))) else operator.itemgetter(*places, 0)
        )


_EMPTY = _Table((), ())


class RankMerger:
    """Merges one step's dicts across the ranks of ``collective`` (see the module).

    :param collective: the engine's collectives (:func:`rlmetrics.ranks.torch_distributed`
        builds one on torch.distributed).
    :param raw_path: each rank's raw JSONL file; ``{rank}`` is replaced by the rank. None
        writes none.
    :param export_own: whether a rank other than 0 tees its own values to OpenTelemetry.
    :param reductions: ``{logger key: reduction}`` for keys no spec declares (a spec's own
        reduction wins); any other undeclared key is merged by mean.
    """

    def __init__(
        self,
        collective: Collective,
        *,
        raw_path: str | os.PathLike[str] | None = DEFAULT_RAW_PATH,
        export_own: bool = False,
        reductions: Mapping[str, Reduction | Reduce | str] | None = None,
    ) -> None:
        self.collective = collective
        self.rank = collective.rank
        self.world_size = collective.world_size
        self.export_own = export_own
        self.raw_path = None if raw_path is None else Path(str(raw_path).format(rank=self.rank))
        self.reductions = Reductions(reductions)
        self._tables: dict[str, _Table] = {}
        #: Each key's merge column, for :meth:`merge_gathered` (no table there).
        self._columns: dict[str, Column] = {}
        self._rows: RankRows | None = None
        self.broken: str | None = None
        #: The last merged step's phases (rank 0).
        self.stragglers: dict[str, Straggler] = {}
        #: Collectives made, by path (for tests and the benchmark).
        self.exchanges = {"packed": 0, "objects": 0}

    @property
    def logs(self) -> bool:
        """Whether this rank writes the run's rows (rank 0)."""
        return self.rank == 0

    def bind(self, identity: RunIdentity | None, logger: Any = None) -> None:
        """Open this rank's raw file for the Logger's run (called by the Logger)."""
        if self.raw_path is not None and self._rows is None:
            self._rows = RankRows(self.raw_path, identity or RunIdentity(new_run_id()), self.rank)

    def drain(self, timeout_s: float) -> None:
        """Nothing is in flight between steps: every merge ended in its collective."""

    def finish(self) -> None:
        if self._rows is not None:
            self._rows.finish()

    # -- one step ---------------------------------------------------------------------

    def merge(
        self, flat: Mapping[str, Any], step: int, prefix: str, stream: str | None = None
    ) -> dict[str, Any] | None:
        """The run-level dict on rank 0, None on the other ranks. Never raises: a failed
        exchange is said once and rank 0 gets its own values.

        The ranks agree on one key table per ``stream`` (default: the prefix): dicts of other
        shapes logged under one prefix (the efficiency summary's beside a loop's own) keep a
        table each, so alternating them costs no exchange."""
        try:
            if self._rows is not None:
                self._rows.log_metrics(flat, step, prefix)
        except Exception:
            warn_once("ranks:raw", f"rlmetrics: rank {self.rank} could not write its raw rows")
        # The common dict (every value a float) is its own numbers: no copy, no test per key.
        numbers = flat if _FLOATS.issuperset(map(type, flat.values())) else numbers_of(flat)
        if self.broken is None:
            try:
                merged = self._exchange(numbers, step, prefix if stream is None else stream)
            except Exception as exc:
                self.broken = f"{type(exc).__name__}: {exc}"
                warn_once(
                    "ranks:broken",
                    f"rlmetrics: rank {self.rank}: the merge of step {step} across "
                    f"{self.world_size} ranks failed ({self.broken}); ranks are merged no more "
                    "in this run, and rank 0 logs its own values from this step on (each "
                    "rank's raw rows are still written)",
                    expected=True,
                )
            else:
                if merged is None:
                    return None
                out = run_row(flat, numbers, merged, step)
                self.stragglers = merged.stragglers
                return out
        return dict(flat) if self.logs else None

    def merge_gathered(
        self,
        dicts: Sequence[Mapping[str, Any]],
        step: int,
        prefix: str,
        hosts: Sequence[str | None] | None = None,
    ) -> dict[str, Any]:
        """The run-level dict of every rank's flattened dict, gathered already (``dicts[i]``
        from rank ``i``; Ray Train's controller receives every worker's report so): the same
        reductions, raw rows (one per rank, with ``hosts[i]``, else no host) and straggler
        series as :meth:`merge`, with no collective. Never raises: a merge that fails is said
        once and rank 0's dict is returned."""
        first = dicts[0] if dicts else {}
        try:
            if self._rows is not None:
                for rank, flat in enumerate(dicts):
                    host = hosts[rank] if hosts is not None and rank < len(hosts) else None
                    self._rows.log_rank(flat, step, prefix, rank, host)
        except Exception:
            warn_once("ranks:raw", "rlmetrics: the ranks' raw rows could not be written")
        try:
            numbers = [numbers_of(flat) for flat in dicts]
            keys = sorted({key for found in numbers for key in found})
            new = [key for key in keys if key not in self._columns]
            if new:  # declarations read only when a key is new, as a table is agreed
                self._columns.update(zip(new, self.reductions.columns(new), strict=True))
            columns = [self._columns[key] for key in keys]
            merged = merge_columns(columns, {key: [n.get(key) for n in numbers] for key in keys})
            out = run_row(first, numbers[0] if numbers else {}, merged, step)
            self.stragglers = merged.stragglers
            return out
        except Exception as exc:
            warn_once(
                "ranks:gathered",
                f"rlmetrics: the merge of {len(dicts)} ranks' values failed "
                f"({type(exc).__name__}: {exc}); rank 0's values are logged instead",
            )
            return dict(first)

    def _exchange(self, numbers: Mapping[str, float], step: int, stream: str) -> Merged | None:
        table = self._tables.get(stream, _EMPTY)
        pack = table.packs(tuple(numbers))
        row = [table.fingerprint, 0.0 if pack.fits else 1.0, float(step)]
        if pack.fits:
            values = list(numbers.values())
            row += pack.mask
            if pack.order is None:
                row += values
            else:
                values.append(0.0)  # an absent key's slot
                row += pack.order(values)[:-1]
        else:
            row += [0.0] * (table.words + len(table.keys))
        self.exchanges["packed"] += 1
        rows = self.collective.all_gather(row)
        # Every rank packed against this table (itemgetter: the 1,024-rank check in C).
        if set(map(_HEADER_OF, rows)) == {(table.fingerprint, 0.0)}:
            if not self.logs:
                return None
            if all(map(operator.eq, repeat(table.full_row), map(table.masks_of, rows))):
                # Every rank logged every key: the columns are the rows transposed, in C.
                return table.plan.merge(list(zip(*map(table.values_of, rows), strict=True)))
            found = _unpack(rows, table)
            return table.plan.merge(list(found.values()), found, present=False)
        # Some rank has a key the table lacks (or the ranks' tables differ): exchange the
        # dicts themselves, once, and agree on the union from what every rank received.
        self.exchanges["objects"] += 1
        dicts: list[Mapping[str, float]] = self.collective.all_gather_object(dict(numbers))
        keys = sorted({key for d in dicts for key in d})
        columns = self.reductions.columns(keys)
        self._tables[stream] = _Table(keys, columns)
        if not self.logs:
            return None
        return merge_columns(columns, {key: [d.get(key) for d in dicts] for key in keys})


def _unpack(rows: Sequence[Sequence[float]], table: _Table) -> dict[str, Sequence[float | None]]:
    """``{key: [value or None per rank]}`` from the packed rows: transposed in C, then the
    few absences a mask marks set to None (only the missing bits are visited)."""
    if not table.keys:
        return {}
    full, full_row = table.full, table.full_row
    columns: list[Sequence[float | None]] = list(zip(*map(table.values_of, rows), strict=True))
    for rank, masks in enumerate(map(table.masks_of, rows)):
        if masks == full_row:
            continue
        for word, (mask, every) in enumerate(zip(masks, full, strict=True)):
            missing = every & ~int(mask)
            while missing:
                low = missing & -missing
                i = word * _MASK_BITS + low.bit_length() - 1
                column = columns[i]
                if type(column) is tuple:  # a column with an absence becomes a list, once
                    column = columns[i] = list(column)
                column[rank] = None  # type: ignore[index]
                missing ^= low
    return dict(zip(table.keys, columns, strict=True))
