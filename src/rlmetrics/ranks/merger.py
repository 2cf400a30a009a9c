"""RankMerger: every rank's logged dict merged into the run's, one collective per step.

A Logger built with a merger (``Logger(ranks=rlmetrics.ranks.torch_distributed())``) hands it
each flattened dict before anything is written. Every rank writes its raw values, tagged with
its rank and host, to a JSONL file of its own (so the merge can be checked); the ranks then
exchange their numbers in one collective and the logging rank (rank 0) gets the run-level
dict, which its trackers and the OpenTelemetry tee receive — one row per step, not one per
rank. The other ranks' tee gets their own values only when asked (``export_own=True``).

How each key merges is declared (:class:`~rlmetrics.ranks.declared.Reductions`): the series
that reads it under the dict's prefix (or the prefix its key carries), else the
``reductions`` given here, else the efficiency dict's own rule (category seconds are phase
times: stragglers), else a mean.

The exchange (the steady state, one fixed-width collective): each rank packs its numbers in
the order of a key table the ranks agreed on for the dict's prefix, a presence mask beside
them (a rank may lack a key; NaN is a value, not an absence), under a header carrying the
table's fingerprint. When a rank has a key the table lacks, or the fingerprints disagree, the
ranks exchange their dicts as objects once, merge from those, and every rank builds the same
new table (the sorted union) from what it received: a changed key set costs one exchange more,
once. A collective that fails (a rank died: the process group's timeout) stops the merging
for the rest of the run, said once: rank 0 logs its own values from then on, so the loop
goes on.

Off the step's thread (the default once a Logger binds a merger whose collective can open a
group of its own, as torch.distributed's does): :meth:`RankMerger.merge` copies the dict to
plain values and hands it to a thread of the merger's own (:class:`~.handoff.Handoff`), which
writes the raw row, runs the collective on a process group of its own (so it never interleaves
with the trainer's collectives) and, on rank 0, reduces and delivers the run's row to the
Logger's backends and tee when it is merged, in step order. The loop pays the copy and a
queue put; rank 0's row is written a collective later than the step that logged it.
``background=False`` keeps the merge on the calling thread (the row written before
``log_metrics`` returns).
"""

from __future__ import annotations

import functools
import json
import operator
import os
import socket
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any, Protocol

from .. import routing
from .._warn import warn_once
from ..backends.jsonl import JsonlBackend, to_json_value
from ..backends.worker import snapshot
from ..events import TRAIN_PREFIXES
from ..flatten import key_text
from ..identity import RunIdentity, new_run_id
from ..keyplans import KeyPlans
from ..registry import record
from ..spec import Reduce, Reduction
from ..values import as_real, as_step
from .declared import Reductions
from .handoff import DEFAULT_FULL_WAIT_S, DEFAULT_MAX_PENDING, Handoff
from .joining import RanksNotJoined
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

__all__ = [
    "DEFAULT_RAW_PATH",
    "Collective",
    "RankMerger",
    "RankRows",
    "SeparableCollective",
    "numbers_of",
    "run_row",
    "write_rank_hyperparams",
    "write_rank_samples",
]

#: Where each rank's raw rows go; ``{rank}`` is the rank.
DEFAULT_RAW_PATH = "rlmetrics.rank{rank}.jsonl"
#: Mask bits one float64 holds exactly.
_MASK_BITS = 52
#: Header: the table's fingerprint, whether this rank needs a new table, the step, the
#: stream (its prefix) as a number: the call every rank must be making.
_HEADER = 4
_HEADER_OF = operator.itemgetter(0, 1)
_CALL_OF = operator.itemgetter(2, 3)
_FLOATS = frozenset({float})
#: An own group that failed after this long waited for ranks that never came (one that fails
#: at once, every rank alike, leaves the merge on the loop's thread).
_OWN_GROUP_WAITED_S = 1.0


class Collective(Protocol):
    """The two collectives a merger needs, on some engine's process group. ``rank`` is the
    rank within it; a collective over part of the world also names the process's rank in
    the world as ``global_rank`` (the raw file and its rows name that one)."""

    rank: int
    world_size: int

    def all_gather(self, row: list[float]) -> list[list[float]]:
        """Every rank's ``row`` (one fixed width on every rank), in rank order."""

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's picklable ``obj``, in rank order."""


class SeparableCollective(Collective, Protocol):
    """A collective that can open a process group of its own over the same ranks (called on
    every rank at once): the merger's thread merges there, apart from the trainer's."""

    def own_group(self) -> Collective:
        """The same ranks on a new group (a collective call itself). The merger owns it: its
        ``close()``, when it has one, is called once the merger's thread is done."""


class _Job:
    """One logged dict handed to the merger's thread: plain values, taken on the loop's
    thread (the caller may reuse its dict and its tensors at once)."""

    __slots__ = ("flat", "floats", "prefix", "step", "stream")

    def __init__(
        self, flat: dict[str, Any], floats: bool, step: int, prefix: str, stream: str | None
    ) -> None:
        self.flat, self.floats, self.step, self.prefix, self.stream = (
            flat,
            floats,
            step,
            prefix,
            stream,
        )


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


def write_rank_samples(
    rows_file: RankRows | None, rank: int, rows: Sequence[Mapping[str, Any]], step: int, name: str
) -> None:
    """A samples table (``log_samples``, ``log_trajectories``' rows) logged on ``rank``, a
    rank that writes no run rows and so has no tracker: beside its raw file
    (``rlmetrics.rank{rank}.samples.jsonl``), else (no raw file) said once, for a rank's
    rollouts must not vanish unsaid. Never raises."""
    if rows_file is None:
        warn_once(
            "ranks:samples-unwritten",
            f"rlmetrics: rank {rank} writes no tracker rows and has no raw file "
            "(raw_path=None), so its samples and trajectory rows are not written (its "
            "trajectories' spans and metrics are): give the merger a raw_path to keep them "
            "there, or log the tables on rank 0",
        )
        return
    try:
        rows_file.log_samples(rows, step, name)
    except Exception:
        warn_once("ranks:samples", f"rlmetrics: rank {rank} could not write its samples")


def write_rank_hyperparams(
    rows_file: RankRows | None, rank: int, params: Mapping[str, Any]
) -> None:
    """The configuration logged on ``rank``, a rank with no tracker: a hyperparams row of
    its raw file (none without one, as its metrics). Never raises."""
    if rows_file is None:
        return
    try:
        rows_file.log_hyperparams(params)
    except Exception:
        warn_once(
            "ranks:hyperparams", f"rlmetrics: rank {rank} could not write its hyperparameters"
        )


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
    flat: Mapping[str, Any],
    numbers: Mapping[str, float],
    merged: Merged,
    step: int,
    prefix: str = "",
) -> dict[str, Any]:
    """The run's row of a merged step of a dict logged under ``prefix``: ``flat``'s values
    that are not numbers (the logging rank's), every merged number, each straggler phase's
    entries; the straggler series are recorded (each phase named by :func:`phase_of`) and
    what the merge left out is said once per key."""
    for rank, key in merged.dropped:
        warn_once(
            f"ranks:dropped:{key}",
            f"rlmetrics: rank {rank} logged {key!r} as a value that is not finite at step "
            f"{step}; it is left out of the merge of {key!r} (said once per key)",
        )
    for key in merged.not_finite:
        warn_once(
            f"ranks:not-finite:{key}",
            f"rlmetrics: {key!r} is not finite on every rank that logged it at step {step} "
            f"(the run's value is {merged.values.get(key)!r}, as one process would log it; "
            "each rank's raw file keeps its own; said once per key)",
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
        record(STRAGGLER_GROUP, values, {PHASE_ATTR: phase_of(key, prefix)})
    return out


def phase_of(key: str, prefix: str) -> str:
    """The straggler series' ``rl.ranks.phase`` of ``key`` logged under ``prefix``: the key as
    a train dict reads it (``policy_time`` whether logged under ``train`` or as
    ``train/policy_time`` without a prefix), else the key under its prefix
    (``eval/policy_time``), so another dict's phase never overwrites the training one's."""
    if not prefix:
        carried, rest = routing.carried(key)
        return rest if carried in TRAIN_PREFIXES else key
    return key if prefix in TRAIN_PREFIXES else f"{prefix}/{key}"


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
        #: The row's width before the padding every row gets to the widest agreed table's.
        self.width = self.start + len(self.keys)
        self.masks_of = operator.itemgetter(slice(_HEADER, self.start))
        self.values_of = operator.itemgetter(slice(self.start, self.width))
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
    :param raw_path: each rank's raw JSONL file; ``{rank}`` is replaced by the rank (in the
        whole world, when the collective is over a group of part of it). None writes none.
    :param export_own: whether every rank tees its own values to OpenTelemetry (rank 0's
        trackers still get the run's rows), for the recording rules to merge by run id.
    :param reductions: ``{logger key: reduction}`` for keys no spec declares (a spec's own
        reduction wins); any other undeclared key is merged by mean.
    :param background: merge on a thread of the merger's own, over a process group of its
        own, once a Logger binds it (when the collective can open one: torch.distributed's
        can); False merges on the calling thread, before ``merge`` returns.
    :param max_pending: dicts the merger's thread may fall behind before the loop is told:
        then a dict waits ``full_wait_s`` once for room, and one that finds none stops the
        merging for the rest of the run on this rank (said once, the dicts not merged
        counted in :attr:`unmerged`; the raw rows are still written).
    """

    def __init__(
        self,
        collective: Collective,
        *,
        raw_path: str | os.PathLike[str] | None = DEFAULT_RAW_PATH,
        export_own: bool = False,
        reductions: Mapping[str, Reduction | Reduce | str] | None = None,
        background: bool = True,
        max_pending: int = DEFAULT_MAX_PENDING,
        full_wait_s: float = DEFAULT_FULL_WAIT_S,
    ) -> None:
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(f"RankMerger(max_pending={max_pending!r}): a positive int")
        if not full_wait_s >= 0:
            raise ValueError(f"RankMerger(full_wait_s={full_wait_s!r}): seconds, 0 or more")
        self.collective = collective
        self.background = background
        self.max_pending = max_pending
        self.full_wait_s = float(full_wait_s)
        self.rank = collective.rank
        #: This process's rank in the whole world: the raw file's ``{rank}`` and its rows'
        #: ``rank`` (a group's rank would repeat across groups).
        self.global_rank: int = getattr(collective, "global_rank", collective.rank)
        self.world_size = collective.world_size
        self.export_own = export_own
        self.raw_path = (
            None if raw_path is None else Path(str(raw_path).format(rank=self.global_rank))
        )
        self.reductions = Reductions(reductions)
        self._tables: dict[str, _Table] = {}
        #: Every row is padded to this, the widest agreed table's row: the tables are agreed
        #: at collectives every rank takes part in, so it is the same on every rank, and a
        #: rank logging under another prefix than the others still sends a row as wide as
        #: theirs (gloo aborts the process that receives a longer one than it expects).
        self._width = _HEADER
        #: Each key's merge column by prefix, for :meth:`merge_gathered` (no table there).
        self._columns: dict[str, dict[str, Column]] = {}
        self._rows: RankRows | None = None
        self.broken: str | None = None
        #: The last merged step's phases (rank 0).
        self.stragglers: dict[str, Straggler] = {}
        #: Collectives made, by path (for tests and the benchmark).
        self.exchanges = {"packed": 0, "objects": 0}
        #: The merger's thread, once a Logger binds a background merger.
        self.handoff: Handoff | None = None
        #: The group bind() opened for that thread, until finish() closes it.
        self._own: Collective | None = None
        #: The run identity the ranks agreed on at bind() (None before).
        self._identity: RunIdentity | None = None
        #: The dict the merger's thread is merging now (None between dicts).
        self._in_flight: _Job | None = None
        self._deliver: Callable[[dict[str, Any], int, str, str | None], None] | None = None
        #: Dicts logged that were not merged because the merger's thread was behind
        #: (``max_pending``) or not done when the Logger finished.
        self.unmerged = 0
        self._rows_closed = False
        self._rows_lock = threading.Lock()

    @property
    def logs(self) -> bool:
        """Whether this rank writes the run's rows (rank 0)."""
        return self.rank == 0

    def bind(self, identity: RunIdentity | None, logger: Any = None) -> RunIdentity | None:
        """Bind this rank's merger to the Logger's run (called by the Logger as it is built,
        on every rank at once; a merger used without a Logger is bound with the run's
        identity, or None). With a ``logger`` to deliver to, a background merger opens its
        own process group and starts its thread. Then the ranks agree on the run's id (one
        object exchange): a rank whose id was not given (``RunIdentity.given``; None is not)
        takes rank 0's, a given one is kept and ids that still differ are said once. This
        rank's raw file is opened for that identity, which is returned."""
        if self._identity is not None:
            return self._identity
        self._join()
        deliver = getattr(logger, "_log_merged_row", None)
        own_group = getattr(self.collective, "own_group", None)
        if (
            self.background
            and self.handoff is None
            and deliver is not None
            and own_group
            and self.broken is None
        ):
            self._open_own_group(own_group)
        self._identity = agreed = self._agree(identity)
        if self.raw_path is not None and self._rows is None:
            self._rows = RankRows(self.raw_path, agreed, self.global_rank)
        if self._own is not None:
            self._deliver = deliver
            self.handoff = Handoff(
                self._merge_job, "rlmetrics-ranks", self.max_pending, self.full_wait_s
            )
        return agreed

    def _join(self) -> None:
        """Every rank binds its merger within the collective's bound (one that can tell,
        as torch.distributed's can: :meth:`~.torch.TorchCollective.join`), or none merges:
        the collectives that follow would wait for ranks that may never make them."""
        join = getattr(self.collective, "join", None)
        if join is None or self.world_size < 2:
            return
        try:
            join()
        except RanksNotJoined as exc:
            self.broken = f"the ranks did not all bind their merger ({exc})"
            waited = f"{exc.patience.total_seconds():g} s"
            if exc.late:
                said = (
                    f"this rank bound its merger (built its Logger with ranks=, or called "
                    f"log_ranks first) after the other ranks had stopped waiting for it "
                    f"({waited}; only {exc.joined} of the {exc.world_size} had by then)"
                )
            else:
                said = (
                    f"only {exc.joined} of the {exc.world_size} ranks bound their merger (built "
                    f"a Logger with ranks=, or called log_ranks) within {waited} of this one"
                )
            warn_once(
                "ranks:own-group",
                f"rlmetrics: rank {self.global_rank}: {said}. Binding the merger is a "
                "collective: build the Logger with ranks= on every rank (call log_ranks on "
                "every rank), at the same point (as the trainer's process group is made), not "
                "under `if rank == 0:` or `if accelerator.is_main_process:`; a rank that "
                "is that late at it on purpose needs torch_distributed(join_timeout_s=...), at "
                "most half the group's timeout. Ranks are merged no more in this run; rank 0 "
                "logs its own values (each rank's raw rows are still written)",
                expected=True,
            )
        except Exception as exc:  # no store to ask: the collectives say what they find
            warn_once(
                "ranks:join",
                f"rlmetrics: rank {self.global_rank} could not check that every rank binds its "
                f"merger ({type(exc).__name__}: {exc}); merging goes on without the check",
            )

    def _open_own_group(self, own_group: Callable[[], Collective]) -> None:
        """The merger's own group for its thread, or, when it cannot be opened, the merge on
        the loop's thread (it failed at once, every rank alike) or none (it failed after
        waiting: some rank never opened it)."""
        started = time.monotonic()
        try:
            self.collective = self._own = own_group()
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            if time.monotonic() - started < _OWN_GROUP_WAITED_S and "timeout" not in reason.lower():
                # Failed at once (no port, no gloo): every rank fails alike, and merges over
                # the group it was given, on the loop's thread.
                warn_once(
                    "ranks:own-group",
                    f"rlmetrics: rank {self.global_rank} could not open the merger's own process "
                    f"group ({reason}); it merges on the loop's thread instead",
                )
                return
            # Failed after waiting: some rank never opened it (its Logger not built, or built
            # later, as under `if rank == 0:`). Merging on the given group would wait in
            # collectives those ranks never make, or pair with the trainer's own.
            self.broken = f"the merger's own process group was not opened ({reason})"
            warn_once(
                "ranks:own-group",
                f"rlmetrics: rank {self.global_rank} could not open the merger's own process "
                f"group: not every one of the {self.world_size} ranks opened it within the "
                f"group's timeout ({reason}). Opening it is a collective: build the Logger with "
                "ranks= on every rank, at the same point (as the trainer's process group is "
                "made), not under `if rank == 0:`. Ranks are merged no more in this run; rank 0 "
                "logs its own values (each rank's raw rows are still written)",
                expected=True,
            )

    def _agree(self, identity: RunIdentity | None) -> RunIdentity:
        """The run identity this rank's rows carry: rank 0's unless this rank's was given
        (see :meth:`bind`). No exchange on one rank, on a merger whose ranks arrive gathered,
        or once the merging broke."""
        mine = identity if identity is not None else _unnamed_identity()
        if self.world_size < 2 or self.broken is not None:
            return mine
        try:
            told = self.collective.all_gather_object((mine.run_id, mine.resume, mine.given))
            first_id, first_resume, _ = told[0]
            ids = [run_id if given else first_id for run_id, _, given in told]
        except Exception as exc:  # a rank gone before the first merge: the merges fail too
            self.broken = f"the ranks' run ids could not be agreed ({type(exc).__name__}: {exc})"
            warn_once(
                "ranks:run-id",
                f"rlmetrics: rank {self.global_rank}: {self.broken}; ranks are merged no more "
                "in this run, and rank 0 logs its own values",
                expected=True,
            )
            return mine
        differ = [rank for rank, run_id in enumerate(ids) if run_id != first_id]
        if differ and (self.rank == 0 or self.rank in differ):
            named = ", ".join(f"rank {rank} {ids[rank]!r}" for rank in differ[:4])
            warn_once(
                "ranks:run-ids-differ",
                f"rlmetrics: the ranks' run ids differ: rank 0 {first_id!r}, {named}"
                + (f" and {len(differ) - 4} more" if len(differ) > 4 else "")
                + " (each given there: Logger(run_id=...), the configuration's run_id, or the "
                "running telemetry's, rlmetrics.start(run_id=...)). A rank's raw rows and "
                "telemetry carry its own, the tracker's rows rank 0's: give every rank the "
                "same run id, or none (a rank without one takes rank 0's)",
            )
        if mine.given:
            return mine
        return RunIdentity(first_id, first_resume, given=False)

    def drain(self, timeout_s: float) -> None:
        """Before the Logger closes: the merges handed to the merger's thread complete
        within ``timeout_s`` (a rank that died: the group's timeout ends its collective and
        the rest are logged unmerged); what is still queued then is written to the raw file
        only, counted in :attr:`unmerged` and said."""
        if self.handoff is None:
            return
        left = self.handoff.drain(timeout_s)
        running = self.handoff.pending - len(left)
        in_flight = self._in_flight  # its raw row is written; its run row never will be
        for job in left:
            self._write_raw(job.flat, job.step, job.prefix)
        if left or running > 0:
            self.unmerged += len(left) + max(running, 0)
            ahead = [in_flight] if running > 0 and in_flight is not None else []
            steps = sorted({job.step for job in [*ahead, *left]})
            warn_once(
                "ranks:drain",
                f"rlmetrics: rank {self.global_rank}: {len(left) + max(running, 0)} logged dict(s) "
                f"were still being merged across the {self.world_size} ranks when the Logger "
                f"finished ({timeout_s:g} s; a rank that stopped logging, or a collective "
                "still waiting for its process group's timeout)"
                + (f"; {_steps_text(steps)} in the raw file only" if steps else ""),
            )

    def log_unmerged(self, flat: Mapping[str, Any], step: int, prefix: str) -> None:
        """A row no merge takes (a rollout checkpoint's sample: each rank's stream is its
        own) that this rank logged while it writes no run rows: its raw file keeps it."""
        self._write_raw(flat, step, prefix)

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """The configuration this rank logged while it writes no run rows (not rank 0, so
        no tracker): a hyperparams row of its raw file. Never raises."""
        with self._rows_lock:
            if not self._rows_closed:
                write_rank_hyperparams(self._rows, self.global_rank, params)

    def log_samples(self, rows: Sequence[Mapping[str, Any]], step: int, name: str) -> None:
        """A samples table this rank logged while it writes no run rows (not rank 0): its
        raw file's samples (:func:`write_rank_samples`)."""
        with self._rows_lock:
            if not self._rows_closed:
                write_rank_samples(self._rows, self.global_rank, rows, step, name)

    def finish(self) -> None:
        if self._rows is not None:
            with self._rows_lock:
                self._rows_closed = True
                self._rows.finish()
        self._close_own_group()

    def _close_own_group(self) -> None:
        """Close the group bind() opened, once the merger's thread has ended: a gloo group
        left to the interpreter's exit has its threads torn down after Python's, which can
        abort the process ("terminate called without an active exception"). A thread still
        in a collective (a drain that timed out, said there) keeps its group."""
        own, handoff = self._own, self.handoff
        if own is None or handoff is None or handoff.thread.is_alive():
            return
        self._own = None
        close = getattr(own, "close", None)
        if close is None:
            return
        try:
            close()
        except Exception as exc:
            warn_once(
                "ranks:close",
                f"rlmetrics: rank {self.global_rank} could not close the merger's own process "
                f"group ({type(exc).__name__}: {exc})",
            )

    # -- one step ---------------------------------------------------------------------

    def merge(
        self, flat: Mapping[str, Any], step: int, prefix: str, stream: str | None = None
    ) -> dict[str, Any] | None:
        """The run-level dict on rank 0, None on the other ranks — and None on rank 0 too
        when the merge runs on the merger's thread, which delivers the run's row to the
        Logger itself once merged. Never raises: a failed exchange is said once and rank 0
        gets its own values.

        The ranks agree on one key table per ``stream`` (default: the prefix): dicts of other
        shapes logged under one prefix (the efficiency summary's beside a loop's own) keep a
        table each, so alternating them costs no exchange."""
        if self.handoff is not None:
            self._hand_off(flat, step, prefix, stream)
            return None
        self._write_raw(flat, step, prefix)
        # The common dict (every value a float) is its own numbers: no copy, no test per key.
        numbers = flat if _FLOATS.issuperset(map(type, flat.values())) else numbers_of(flat)
        return self._merged_row(flat, numbers, step, prefix, stream)

    def _write_raw(self, flat: Mapping[str, Any], step: int, prefix: str) -> None:
        try:
            if self._rows is not None:
                # The merger's thread writes, and the loop's when a dict does not fit the
                # queue: one writer at a time, none after finish().
                with self._rows_lock:
                    if not self._rows_closed:
                        self._rows.log_metrics(flat, step, prefix)
        except Exception:
            warn_once(
                "ranks:raw", f"rlmetrics: rank {self.global_rank} could not write its raw rows"
            )

    def _merged_row(
        self,
        flat: Mapping[str, Any],
        numbers: Mapping[str, float],
        step: int,
        prefix: str,
        stream: str | None,
    ) -> dict[str, Any] | None:
        """Rank 0's row of ``flat`` (whose numbers are ``numbers``): merged by the exchange,
        or its own values once the merging broke; None on the other ranks."""
        if self.broken is None:
            try:
                merged = self._exchange(numbers, step, prefix if stream is None else stream, prefix)
            except Exception as exc:
                self.broken = f"{type(exc).__name__}: {exc}"
                # The engine's own words name a crash (gloo: "typically caused by a remote
                # worker crashing") where a rank may only have ended its logging early.
                why = (
                    ""
                    if isinstance(exc, RanksOutOfStep)
                    else " (a rank stopped taking part: it died or hung, or it finished its "
                    "Logger, or logged fewer steps, before this one)"
                )
                warn_once(
                    "ranks:broken",
                    f"rlmetrics: rank {self.global_rank}: the merge of step {step} across "
                    f"{self.world_size} ranks failed ({self.broken}){why}; ranks are merged no "
                    "more in this run, and rank 0 logs its own values from this step on (each "
                    "rank's raw rows are still written)",
                    expected=True,
                )
            else:
                if merged is None:
                    return None
                out = run_row(flat, numbers, merged, step, prefix)
                self.stragglers = merged.stragglers
                return out
        return dict(flat) if self.logs else None

    # -- off the step's thread ----------------------------------------------------------

    def _hand_off(
        self, flat: Mapping[str, Any], step: int, prefix: str, stream: str | None
    ) -> None:
        """The loop's side: ``flat`` copied to plain values (a dict of floats in C; any
        other as a queued backend's snapshot: NumPy and torch scalars become numbers now),
        then queued. Never raises."""
        assert self.handoff is not None
        try:
            floats = _FLOATS.issuperset(map(type, flat.values()))
            job = _Job(dict(flat) if floats else snapshot(dict(flat)), floats, step, prefix, stream)
            if self.handoff.put(job):
                return
            if self.handoff.closed:  # logged after finish(): written raw, as a merge would
                self._write_raw(job.flat, step, prefix)
                return
            # Full past the wait: this rank's merges would no longer line up with the
            # others' (they would merge this step with a later one); it stops merging.
            self.unmerged += 1
            self._write_raw(job.flat, step, prefix)
            if self.broken is None:
                self.broken = f"{self.max_pending} logged dicts behind"
            warn_once(
                "ranks:behind",
                f"rlmetrics: rank {self.global_rank}: the merge across {self.world_size} ranks is "
                f"{self.max_pending} logged dicts behind (max_pending; a collective waits on a "
                f"rank that stopped, or the loop logs faster than the ranks merge), still "
                f"after {self.full_wait_s:g} s: step {step} and the steps after it while it "
                "stays behind are written to the raw file only (counted in "
                "RankMerger.unmerged), and this rank merges no more in this run (the other "
                "ranks' next merge then ends with their group's timeout); rank 0 logs its own "
                "values from then on",
                expected=True,
            )
        except Exception:
            warn_once("ranks:handoff", "rlmetrics: a logged dict could not be handed to the merge")

    def _merge_job(self, job: _Job) -> None:
        """The merger thread's side of one dict: its raw row, the collective, and on rank 0
        the run's row delivered to the Logger. Never raises."""
        flat = job.flat
        self._in_flight = job
        self._write_raw(flat, job.step, job.prefix)
        try:
            numbers = flat if job.floats else numbers_of(flat)
            out = self._merged_row(flat, numbers, job.step, job.prefix, job.stream)
            if out is not None and self._deliver is not None and not self.handoff_closed:
                self._deliver(out, job.step, job.prefix, job.stream)
        except Exception:
            warn_once(
                "ranks:deliver",
                f"rlmetrics: rank {self.global_rank} could not log a merged row (step {job.step})",
            )
        finally:
            self._in_flight = None

    @property
    def handoff_closed(self) -> bool:
        """Whether the merger's thread delivers no more (the Logger finished)."""
        return self.handoff is not None and self.handoff.closed

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
            known = self._columns.setdefault(prefix, {})
            new = [key for key in keys if key not in known]
            if new:  # declarations read only when a key is new, as a table is agreed
                known.update(zip(new, self.reductions.columns(new, prefix), strict=True))
            columns = [known[key] for key in keys]
            merged = merge_columns(columns, {key: [n.get(key) for n in numbers] for key in keys})
            out = run_row(first, numbers[0] if numbers else {}, merged, step, prefix)
            self.stragglers = merged.stragglers
            return out
        except Exception as exc:
            warn_once(
                "ranks:gathered",
                f"rlmetrics: the merge of {len(dicts)} ranks' values failed "
                f"({type(exc).__name__}: {exc}); rank 0's values are logged instead",
            )
            return dict(first)

    def _exchange(
        self, numbers: Mapping[str, float], step: int, stream: str, prefix: str
    ) -> Merged | None:
        table = self._tables.get(stream, _EMPTY)
        pack = table.packs(tuple(numbers))
        call = (_step_number(step), _stream_number(stream))
        row = [table.fingerprint, 0.0 if pack.fits else 1.0, *call]
        if pack.fits:
            values = list(numbers.values())
            row += pack.mask
            if pack.order is None:
                row += values
            else:
                values.append(0.0)  # an absent key's slot
                row += pack.order(values)[:-1]
        if len(row) < self._width:
            row += [0.0] * (self._width - len(row))
        self.exchanges["packed"] += 1
        rows = self.collective.all_gather(row)
        if any(map(call.__ne__, map(_CALL_OF, rows))):
            # Every rank sees the same rows, so every rank stops here, none left waiting.
            raise RanksOutOfStep(_out_of_step(rows, call, step, stream))
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
        columns = self.reductions.columns(keys, prefix)
        self._tables[stream] = agreed = _Table(keys, columns)
        self._width = max(self._width, agreed.width)
        if not self.logs:
            return None
        return merge_columns(columns, {key: [d.get(key) for d in dicts] for key in keys})


def _steps_text(steps: Sequence[int]) -> str:
    """``step 4 is``, ``steps 3-5 are``: sorted steps as a warning names them."""
    if len(steps) == 1:
        return f"step {steps[0]} is"
    return f"steps {steps[0]}-{steps[-1]} are"


def _unnamed_identity() -> RunIdentity:
    """A run identity for a merger bound without one: the running telemetry's (given: its
    resource carries it), else a new id, which gives way to rank 0's."""
    from ..telemetry import current

    telemetry = current()
    if telemetry is not None:
        return RunIdentity(telemetry.run_id, telemetry.resume)
    return RunIdentity(new_run_id(), given=False)


class RanksOutOfStep(RuntimeError):
    """The ranks made different calls at one collective: their dicts cannot be merged, and
    neither can any after them (one rank made a call the others did not)."""


def _step_number(step: Any) -> float:
    """The step as a row carries it: an int (a NumPy one too) as a float; anything else, which
    the ranks are equally likely to pass alike (an adapter's None), as -1.0, not an error
    that would end the merging."""
    if type(step) is int:
        return float(step)
    number = as_step(step)
    return -1.0 if number is None else float(number)


@functools.lru_cache(maxsize=256)
def _stream_number(stream: str) -> float:
    """A stream (a prefix) as a float a row carries exactly: its CRC-32, never 0.0."""
    return float(zlib.crc32(stream.encode("utf-8", "surrogatepass")) + 1)


def _out_of_step(
    rows: Sequence[Sequence[float]], call: tuple[float, float], step: int, stream: str
) -> str:
    other, (their_step, _) = next((r, c) for r, c in enumerate(map(_CALL_OF, rows)) if c != call)
    where = f"step {int(their_step)}" if their_step != call[0] else "another prefix"
    return (
        f"this rank logged step {step} under {stream!r} where rank {other} logged {where}: "
        "every rank must call log_metrics with the same steps and prefixes (a call made on "
        "some ranks only, as under `if rank == 0:`, pairs every later dict with the wrong one)"
    )


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
