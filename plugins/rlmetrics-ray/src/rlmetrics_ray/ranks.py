"""Many Ray actors, one run: the workers' values reduced on the driver, through Ray itself.

``Logger(ranks="ray")`` (this distribution's name in the ``rlmetrics.ranks`` entry-point
group) is, on the driver, a :class:`RayReducer`, and in a Ray actor or task, a
:class:`RayRank`:

- The driver's reducer starts a :class:`~rlmetrics_ray.step_buffer.StepBuffer` actor on the
  driver's node, named (``rlmetrics-ranks`` in the job's namespace, so the job's actors find
  it) and not detached (it ends with the driver). A thread of the driver long-polls it and
  logs each released step through the driver's Logger: the workers' numbers merged key by
  key as declared (:class:`rlmetrics.ranks.Reductions`, the same rules and straggler series
  as on torch.distributed), one row per step for the trackers and the tee. What the driver
  logs itself passes through unmerged.
- A worker's rank writes its raw values, with its rank and host, to a JSONL file of its own
  and pushes its numbers to the buffer without waiting for an answer, so a worker never
  waits on the driver; its trackers get nothing, its tee its own values only when asked
  (``export_own=True``).

Bounded: a step is logged when every expected rank pushed it or ``late_after_s`` after its
first row, with the ranks that did not come named once each; a dead worker is not waited
for again (docs/ranks.md, "Ray"). Ray is imported only when one of these is built.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlmetrics import warn_once
from rlmetrics.events import EfficiencySummary
from rlmetrics.identity import RunIdentity, new_run_id
from rlmetrics.ranks import (
    DEFAULT_RAW_PATH,
    Column,
    RankRows,
    Reductions,
    merge_columns,
    numbers_of,
    run_row,
    write_rank_hyperparams,
    write_rank_samples,
)
from rlmetrics.spec import Reduce, Reduction

from .step_buffer import Gathered, StepBuffer, Taken

__all__ = [
    "BUFFER_NAME",
    "EFFICIENCY_STREAM",
    "RayRank",
    "RayReducer",
    "ray_rank",
    "ray_ranks",
    "merge_step",
    "ray_reducer",
]

#: The buffer actor's name in the job's namespace.
BUFFER_NAME = "rlmetrics-ranks"
#: The Logger's stream for the efficiency summary (logged back as one, not as a dict).
EFFICIENCY_STREAM = "efficiency-summary"
#: How long a worker's Logger waits for the driver's Logger to name its run.
_RUN_WAIT_S = 10.0


def _in_actor_or_task() -> bool:
    import ray

    return bool(ray.get_runtime_context().worker.mode != ray.SCRIPT_MODE)


def ray_ranks() -> RayReducer | RayRank:
    """``Logger(ranks="ray")``: the driver's reducer on the driver, a worker's rank in a Ray
    actor or task (each with its defaults; build one yourself for others)."""
    import ray

    if not ray.is_initialized():
        raise RuntimeError(
            "Logger(ranks='ray') merges the ranks of a Ray job: call ray.init() first on the "
            "driver (a Ray actor is connected already)"
        )
    return ray_rank() if _in_actor_or_task() else ray_reducer()


def ray_reducer(
    *,
    world_size: int | None = None,
    late_after_s: float = 60.0,
    reductions: Mapping[str, Reduction | Reduce | str] | None = None,
    name: str = BUFFER_NAME,
    poll_s: float = 0.5,
) -> RayReducer:
    """The driver's side (see :class:`RayReducer`)."""
    return RayReducer(
        world_size=world_size,
        late_after_s=late_after_s,
        reductions=reductions,
        name=name,
        poll_s=poll_s,
    )


def ray_rank(
    *,
    rank: int | None = None,
    world_size: int | None = None,
    raw_path: str | os.PathLike[str] | None = DEFAULT_RAW_PATH,
    export_own: bool = False,
    name: str = BUFFER_NAME,
    find_timeout_s: float = 60.0,
) -> RayRank:
    """A worker's side (see :class:`RayRank`)."""
    return RayRank(
        rank=rank,
        world_size=world_size,
        raw_path=raw_path,
        export_own=export_own,
        name=name,
        find_timeout_s=find_timeout_s,
    )


class RayReducer:
    """The driver's side of ``ranks="ray"``: the buffer actor, and the thread that logs the
    workers' merged steps through the driver's Logger (see the module).

    :param world_size: how many ranks a step waits for (default: what the workers say, from
        Ray Train's context or ``WORLD_SIZE``, else every rank that joined).
    :param late_after_s: how long a step waits for a missing rank after its first row.
    :param reductions: ``{logger key: reduction}`` for keys no spec declares.
    :param name: the buffer actor's name (two reducers in one job need two names).
    :param poll_s: how long one long poll of the buffer waits.
    """

    logs = True

    def __init__(
        self,
        *,
        world_size: int | None = None,
        late_after_s: float = 60.0,
        reductions: Mapping[str, Reduction | Reduce | str] | None = None,
        name: str = BUFFER_NAME,
        poll_s: float = 0.5,
    ) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if world_size is not None and (isinstance(world_size, bool) or world_size < 1):
            raise ValueError(f"ray_reducer(world_size={world_size!r}): a positive int or None")
        if not late_after_s > 0 or not poll_s > 0:
            raise ValueError("ray_reducer(): late_after_s and poll_s are positive seconds")
        self._ray = ray
        self.name = name
        self.poll_s = float(poll_s)
        self.reductions = Reductions(reductions)
        self._columns: dict[tuple[str, tuple[str, ...]], list[Column]] = {}
        node = ray.get_runtime_context().get_node_id()
        # On the driver's node, owned by the driver: it ends with the driver.
        try:
            self.buffer = (
                ray.remote(StepBuffer)
                .options(
                    name=name,
                    num_cpus=0,
                    max_restarts=0,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True),
                )
                .remote(world_size, float(late_after_s))
            )
        except ValueError as exc:  # the name is taken in this job
            raise ValueError(
                f"ray_reducer(): {exc}. Another reducer named {name!r} runs in this Ray job: "
                "finish its Logger first, or give this one another name= (and its workers "
                "the same name=)"
            ) from None
        self._logger: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._delivering = threading.local()
        self._said_world = False
        #: Steps logged from the workers' rows (for tests).
        self.steps_logged = 0

    def bind(self, identity: RunIdentity | None, logger: Any = None) -> None:
        """Name the driver's run to the workers, and start logging their steps through
        ``logger`` (called by the Logger)."""
        if identity is not None:
            # Not awaited: a worker that asks first waits in the buffer for this call.
            with contextlib.suppress(Exception):
                self.buffer.set_run.remote(identity.run_id, identity.resume)
        if logger is None or self._thread is not None:
            return
        self._logger = logger
        self._thread = threading.Thread(target=self._run, name="rlmetrics-ray-ranks", daemon=True)
        self._thread.start()

    @property
    def export_own(self) -> bool:
        """Whether the step this reducer is delivering came from workers that each export
        their own values (``ray_rank(export_own=True)``): the recording rules merge their
        series by run id, so its run row goes to the driver's trackers only, as rank 0's
        does on torch.distributed (the straggler series, which only the merge knows, are
        recorded all the same). What the driver logs itself is its own, teed as usual."""
        return bool(getattr(self._delivering, "exported", False))

    def merge(
        self, flat: Mapping[str, Any], step: int, prefix: str, stream: str | None = None
    ) -> dict[str, Any] | None:
        """What the driver logs itself passes as is; a merged step this reducer is logging
        through the Logger is that step's row (an efficiency summary's, with its straggler
        entries, which the summary the Logger rebuilt it from does not carry)."""
        row: dict[str, Any] | None = getattr(self._delivering, "row", None)
        return dict(flat) if row is None else row

    def drain(self, timeout_s: float) -> None:
        """Stop polling, then log what the buffer still holds: the steps that complete
        within ``timeout_s``, then every pending one with its missing ranks named."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.poll_s + timeout_s)
        deadline = time.monotonic() + timeout_s
        with contextlib.suppress(Exception):
            while True:
                remaining = deadline - time.monotonic()
                taken = self._take(min(self.poll_s, max(remaining, 0.0)), flush=remaining <= 0)
                self._deliver(taken)
                if taken.pending == 0 or remaining <= 0:
                    break

    def finish(self) -> None:
        """End the buffer actor, and wait (bounded) until its name is free for the next
        reducer of this job."""
        with contextlib.suppress(Exception):
            self._ray.kill(self.buffer)
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                try:
                    self._ray.get_actor(self.name)
                except ValueError:
                    return
                time.sleep(0.05)

    # -- the thread ---------------------------------------------------------------------------

    def _take(self, wait_s: float, flush: bool = False) -> Taken:
        taken: Taken = self._ray.get(self.buffer.take.remote(wait_s, flush), timeout=wait_s + 60.0)
        return taken

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                taken = self._take(self.poll_s)
            except Exception as exc:
                warn_once(
                    "ray:ranks:buffer",
                    f"rlmetrics-ray: the ranks' buffer actor did not answer ({type(exc).__name__}:"
                    f" {exc}); the workers' values are not merged from here on",
                )
                return
            self._deliver(taken)

    def _deliver(self, taken: Taken) -> None:
        for rank in taken.joined_twice:
            warn_once(
                f"ray:ranks:twice:{rank}",
                f"rlmetrics-ray: two workers joined as rank {rank} at once, so their values of a "
                "step overwrite each other's (unless the first one died and this one replaces "
                "it). Ray passes the driver's environment to its workers: a RANK (or WORLD_SIZE) "
                "the driver was started with reaches every worker. Give each worker its own "
                "ray_rank(rank=...), or leave RANK out of the workers' environment",
                expected=True,
            )
        for rank, stream, step in taken.late:
            warn_once(
                f"ray:ranks:late:{rank}",
                f"rlmetrics-ray: rank {rank}'s values of step {step} ({stream!r}) arrived after "
                "the step was logged without them; they are in its raw file only (said once "
                "per rank)",
            )
        if taken.world_size is None and taken.gathered and not self._said_world:
            self._said_world = True
            warn_once(
                "ray:ranks:world",
                "rlmetrics-ray: no world size given (ray_reducer(world_size=), the workers' "
                "ray_rank(world_size=), Ray Train or WORLD_SIZE); each step waits for the "
                "ranks that have joined so far",
                expected=True,
            )
        for gathered in taken.gathered:
            try:
                self._log(gathered)
            except Exception:
                warn_once("ray:ranks:log", "rlmetrics-ray: a merged step could not be logged")

    def _log(self, gathered: Gathered) -> None:
        for rank in gathered.missing:
            warn_once(
                f"ray:ranks:missing:{rank}",
                f"rlmetrics-ray: rank {rank} did not report step {gathered.step} within "
                f"late_after_s; the step is logged from the other ranks, and rank {rank} is "
                "not waited for again until it reports (said once per rank)",
                expected=True,
            )
        out = merge_step(gathered, self.reductions, self._columns)
        logger = self._logger
        if logger is None:
            return
        if gathered.exported:
            self._delivering.exported = True  # export_own, for the Logger, on this thread
            try:
                logger._log_merged_row(out, gathered.step, gathered.prefix, gathered.stream)
            finally:
                self._delivering.exported = False
        elif gathered.stream == EFFICIENCY_STREAM:
            self._delivering.row = out  # what merge() gives the Logger back, on this thread
            try:
                logger.log_efficiency_summary(EfficiencySummary.from_metrics(out), gathered.step)
            finally:
                self._delivering.row = None
        else:
            logger.log_metrics(out, step=gathered.step, prefix=gathered.prefix)
        self.steps_logged += 1


def merge_step(
    gathered: Gathered,
    reductions: Reductions,
    columns: dict[tuple[str, tuple[str, ...]], list[Column]] | None = None,
) -> dict[str, Any]:
    """The run's row of one gathered step: every key any rank sent, merged as declared
    under the step's prefix (the straggler series recorded, what was left out said once per
    key). ``columns`` keeps each prefix's key set's columns, so the declarations are read
    when a key set is new, as the torch path reads them when its ranks agree on a new
    table."""
    rows = gathered.rows
    width = max(rows) + 1 if rows else 0
    keys = tuple(sorted({key for numbers in rows.values() for key in numbers}))
    # One column entry per rank number, so a straggler's slowest rank is its real rank; each
    # rank's values looked up and the table transposed in C (None: the rank lacks the key).
    absent = (None,) * len(keys)
    per_rank = [
        absent if (numbers := rows.get(rank)) is None else tuple(map(numbers.get, keys))
        for rank in range(width)
    ]
    by_key = zip(*per_rank, strict=True)
    values: dict[str, Sequence[float | None]] = dict(zip(keys, by_key, strict=True))
    plan = (gathered.prefix, keys)
    found = None if columns is None else columns.get(plan)
    if found is None:
        found = reductions.columns(keys, gathered.prefix)
        if columns is not None:
            columns[plan] = found
    merged = merge_columns(found, values)
    return run_row({}, {}, merged, gathered.step, gathered.prefix)


class RayRank:
    """A worker's side of ``ranks="ray"``: its raw rows, and its numbers pushed to the
    driver's buffer (see the module).

    :param rank: this worker's rank (default: Ray Train's world rank, else ``RANK``, else
        the lowest the buffer has not given out).
    :param world_size: the number of ranks (default: Ray Train's, else ``WORLD_SIZE``).
    :param raw_path: this rank's raw JSONL file (``{rank}`` is the rank); None writes none.
    :param export_own: whether this worker tees its own values to OpenTelemetry.
    :param name: the driver's buffer actor's name.
    :param find_timeout_s: how long to wait for the driver's buffer to exist.
    """

    logs = False

    def __init__(
        self,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        raw_path: str | os.PathLike[str] | None = DEFAULT_RAW_PATH,
        export_own: bool = False,
        name: str = BUFFER_NAME,
        find_timeout_s: float = 60.0,
    ) -> None:
        import ray

        self._ray = ray
        self.export_own = export_own
        given_rank, given_world = _train_context()
        rank = rank if rank is not None else given_rank
        world_size = world_size if world_size is not None else given_world
        self.buffer = _find(name, find_timeout_s)
        self.rank: int = ray.get(self.buffer.join.remote(rank, world_size), timeout=60.0)
        self.raw_path = None if raw_path is None else Path(str(raw_path).format(rank=self.rank))
        self._rows: RankRows | None = None
        self._in_flight: list[Any] = []

    def bind(self, identity: RunIdentity | None, logger: Any = None) -> RunIdentity | None:
        """This worker's run: its own when given (its telemetry's, ``run_id=``), else the
        driver's, as a torch rank takes rank 0's; its raw rows name it, and the Logger takes
        it."""
        if identity is None or not identity.given:
            identity = self._driver_run() or identity
        if self.raw_path is not None and self._rows is None:
            self._rows = RankRows(self.raw_path, identity or RunIdentity(new_run_id()), self.rank)
        return identity

    def _driver_run(self) -> RunIdentity | None:
        """The driver's run, asked of the buffer (bounded); None when it cannot be known."""
        try:
            run = self._ray.get(self.buffer.run.remote(_RUN_WAIT_S), timeout=_RUN_WAIT_S + 60.0)
        except Exception as exc:
            warn_once(
                "ray:ranks:run",
                f"rlmetrics-ray: rank {self.rank} could not learn the driver's run id "
                f"({type(exc).__name__}: {exc}); its raw rows name its own",
            )
            return None
        if run is None:
            return None
        run_id, resume = run
        return RunIdentity(run_id, resume, given=False)

    def merge(
        self, flat: Mapping[str, Any], step: int, prefix: str, stream: str | None = None
    ) -> dict[str, Any] | None:
        """Write the raw row, push the numbers; None: a worker logs no run rows. Never
        raises, never waits for the driver."""
        try:
            if self._rows is not None:
                self._rows.log_metrics(flat, step, prefix)
        except Exception:
            warn_once("ranks:raw", f"rlmetrics: rank {self.rank} could not write its raw rows")
        try:
            ref = self.buffer.push.remote(
                self.rank,
                prefix if stream is None else stream,
                step,
                prefix,
                numbers_of(flat),
                self.export_own,
            )
            self._in_flight.append(ref)
            if len(self._in_flight) > 64:  # forget the acknowledged ones, without waiting
                _, self._in_flight = self._ray.wait(
                    self._in_flight, num_returns=len(self._in_flight), timeout=0
                )
        except Exception as exc:
            warn_once(
                "ray:ranks:push",
                f"rlmetrics-ray: rank {self.rank} could not send its values to the driver "
                f"({type(exc).__name__}: {exc}); its raw rows are still written",
            )
        return None

    def log_unmerged(self, flat: Mapping[str, Any], step: int, prefix: str) -> None:
        """A row no merge takes (a rollout checkpoint's sample): this worker's raw file."""
        try:
            if self._rows is not None:
                self._rows.log_metrics(flat, step, prefix)
        except Exception:
            warn_once("ranks:raw", f"rlmetrics: rank {self.rank} could not write its raw rows")

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """The configuration this worker logged (it has no tracker): a hyperparams row of
        its raw file, as a torch rank's."""
        write_rank_hyperparams(self._rows, self.rank, params)

    def log_samples(self, rows: Sequence[Mapping[str, Any]], step: int, name: str) -> None:
        """A samples table this worker logged (it has no tracker): beside its raw file, as a
        torch rank's (:func:`rlmetrics.ranks.write_rank_samples`)."""
        write_rank_samples(self._rows, self.rank, rows, step, name)

    def drain(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until the buffer has every push of this rank."""
        if self._in_flight:
            with contextlib.suppress(Exception):
                self._ray.wait(self._in_flight, num_returns=len(self._in_flight), timeout=timeout_s)
            self._in_flight = []

    def finish(self) -> None:
        """Close the raw file and leave the buffer (not awaited), so no later step waits for
        a worker that is done. The Logger drained this rank's pushes first: an async actor
        does not keep one caller's calls in order, so the leave must not overtake them."""
        with contextlib.suppress(Exception):
            self.buffer.leave.remote(self.rank)
        if self._rows is not None:
            self._rows.finish()


def _find(name: str, timeout_s: float) -> Any:
    """The driver's buffer actor, waited for (bounded): a worker may start its Logger
    before the driver's reducer exists."""
    import ray

    deadline = time.monotonic() + timeout_s
    delay = 0.05
    while True:
        try:
            return ray.get_actor(name)
        except ValueError:
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"Logger(ranks='ray') in a Ray worker found no reducer named {name!r} "
                    f"within {timeout_s:g} s: build the driver's Logger(ranks='ray') (or "
                    "rlmetrics_ray.ranks.ray_reducer()) before the workers' Loggers, in the "
                    "same Ray job"
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


def _train_context() -> tuple[int | None, int | None]:
    """This worker's rank and world size from Ray Train's context, else ``RANK`` and
    ``WORLD_SIZE``; None where neither says."""
    rank = world = None
    train: Any = sys.modules.get("ray.train")  # a Train worker has it; others do not import it
    if train is not None:
        with contextlib.suppress(Exception):
            context = train.get_context()
            rank, world = int(context.get_world_rank()), int(context.get_world_size())
    if rank is None:
        rank = _env_int("RANK")
    if world is None:
        world = _env_int("WORLD_SIZE")
    return rank, world


def _env_int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else None
