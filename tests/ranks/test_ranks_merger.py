"""The merger's exchange without torch: ranks as threads of one process sharing a barrier
collective (the engine is what torch.distributed gives in tests/ranks/on_torch). The steady
state is one packed collective; a new key costs one object exchange; absences travel in the
mask (past one mask word too); a failed collective stops merging, said once."""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics import hookimpl
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.events import EfficiencySummary
from rlmetrics.plugins import register
from rlmetrics.ranks import RankMerger, gathered
from rlmetrics.ranks.joining import RanksNotJoined
from rlmetrics.spec import MAX, SUM
from rlmetrics.testing import in_memory_telemetry, isolated_state, points

WORLD = 3


class ThreadCollective:
    """``all_gather`` among threads: each puts its row, waits for all, reads them all."""

    def __init__(self, shared: dict[str, Any], rank: int) -> None:
        self.shared, self.rank, self.world_size = shared, rank, WORLD

    def _gather(self, obj: Any) -> list[Any]:
        if self.shared.get("fail"):
            raise RuntimeError("connection closed by peer")
        self.shared["slots"][self.rank] = obj
        self.shared["barrier"].wait(timeout=30)
        out = list(self.shared["slots"])
        self.shared["barrier"].wait(timeout=30)
        return out

    def all_gather(self, row: list[float]) -> list[list[float]]:
        out = self._gather(list(row))
        widths = {len(r) for r in out}
        if len(widths) > 1:
            # Where gloo aborts the process that receives the longer row: kept for the test
            # to fail on, whatever the merger makes of the exception.
            self.shared["mismatched"] = widths
        assert len(widths) == 1, f"rows of different widths: {widths}"
        return out

    def all_gather_object(self, obj: Any) -> list[Any]:
        return self._gather(obj)


def in_rank_threads(rank_loop: Callable[[int], None]) -> None:
    """``rank_loop(rank)`` for every rank, each on a thread of its own, to their end."""
    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(WORLD)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)


def merge_calls(
    calls: Mapping[int, list[tuple[dict[str, float], int, str]]],
) -> tuple[dict[int, list[Any]], list[RankMerger], dict[str, Any]]:
    """Each rank's ``(dict, step, prefix)`` calls merged in turn, each rank on a thread of
    its own (synchronous mergers); ``(results per rank, mergers, the collective's state)``."""
    shared: dict[str, Any] = {"slots": [None] * WORLD, "barrier": threading.Barrier(WORLD)}
    mergers = [
        RankMerger(ThreadCollective(shared, rank), raw_path=None, background=False)
        for rank in range(WORLD)
    ]
    results: dict[int, list[Any]] = {rank: [] for rank in range(WORLD)}

    def rank_loop(rank: int) -> None:
        for flat, at, under in calls[rank]:
            results[rank].append(mergers[rank].merge(flat, at, under))

    in_rank_threads(rank_loop)
    return results, mergers, shared


def thread_rank_logger(shared: dict[str, Any], rank: int, folder: Path) -> rlmetrics.Logger:
    """Rank ``rank``'s Logger of run ``r1`` over the threads' collective: its tracker file
    ``tracker{rank}.jsonl`` and raw file ``raw{rank}.jsonl`` in ``folder``."""
    merger = RankMerger(ThreadCollective(shared, rank), raw_path=folder / "raw{rank}.jsonl")
    return rlmetrics.Logger(
        backends={"jsonl": {"path": str(folder / f"tracker{rank}.jsonl")}},
        ranks=merger,
        run_id="r1",
    )


#: ``run_ranks``' default: each dict at its own number as its step.
NUMBERED: Any = object()


def run_ranks(
    steps: Callable[[int], list[Mapping[str, Any]]], step: Any = NUMBERED, **merger_kwargs: Any
) -> tuple[list[list[dict[str, Any] | None]], list[RankMerger]]:
    """Each rank merges its dicts in turn (each at ``step``, else at its number); ``(merged
    per rank per step, mergers)``."""
    shared: dict[str, Any] = {"slots": [None] * WORLD, "barrier": threading.Barrier(WORLD)}
    mergers = [
        RankMerger(ThreadCollective(shared, rank), raw_path=None, **merger_kwargs)
        for rank in range(WORLD)
    ]
    results: list[list[dict[str, Any] | None]] = [[] for _ in range(WORLD)]

    def rank_loop(rank: int) -> None:
        for number, flat in enumerate(steps(rank)):
            at = number if step is NUMBERED else step
            results[rank].append(mergers[rank].merge(flat, at, "train"))

    in_rank_threads(rank_loop)
    return results, mergers


def test_the_steady_state_is_one_packed_collective_and_a_new_key_one_exchange_more() -> None:
    def steps(rank: int) -> list[Mapping[str, Any]]:
        return [
            {"a": rank, "b": 1.0},
            {"a": rank + 1, "b": 2.0},
            {"a": rank + 2, "b": 3.0, "c": 5.0},  # a new key
            {"a": rank + 3, "b": 4.0, "c": 6.0},
        ]

    results, mergers = run_ranks(steps)
    assert mergers[0].exchanges == {"packed": 4, "objects": 2}
    assert [r["a"] for r in results[0]] == [1.0, 2.0, 3.0, 4.0]  # mean of rank + k
    assert results[0][3]["c"] == 6.0
    assert all(r is None for rank in results[1:] for r in rank)


def test_two_shapes_under_one_prefix_keep_a_table_each() -> None:
    shared: dict[str, Any] = {"slots": [None] * WORLD, "barrier": threading.Barrier(WORLD)}
    mergers = [RankMerger(ThreadCollective(shared, rank), raw_path=None) for rank in range(WORLD)]

    def rank_loop(rank: int) -> None:
        for step in range(4):
            mergers[rank].merge({"loss": 1.0 + rank}, step, "")
            mergers[rank].merge(
                {"efficiency/generation_s": 2.0 + rank}, step, "", stream="efficiency-summary"
            )

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(WORLD)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert mergers[0].exchanges == {"packed": 8, "objects": 2}
    assert mergers[0].stragglers["efficiency/generation_s"].slowest_rank == WORLD - 1


def test_absences_travel_in_the_mask_past_one_mask_word() -> None:
    keys = [f"k{i:03d}" for i in range(130)]

    def steps(rank: int) -> list[Mapping[str, Any]]:
        full = {key: float(i + rank) for i, key in enumerate(keys)}
        holes = {k: v for k, v in full.items() if not (rank == 1 and int(k[1:]) % 7 == 0)}
        return [full, holes]

    results, mergers = run_ranks(steps, reductions={key: SUM for key in keys})
    assert mergers[0].exchanges == {"packed": 2, "objects": 1}
    second = results[0][1]
    assert second is not None
    for i, key in enumerate(keys):
        ranks = [r for r in range(WORLD) if not (r == 1 and i % 7 == 0)]
        assert second[key] == math.fsum(float(i + r) for r in ranks)


def test_a_dict_in_another_key_order_packs_into_the_table_s_order() -> None:
    # Each rank logs its keys in an order of its own, and changes it between steps: the
    # packing plan of each key sequence puts every value in the agreed table's slot.
    keys = ["z", "m", "a", "q"]

    def steps(rank: int) -> list[Mapping[str, Any]]:
        order = keys[rank:] + keys[:rank]
        values = {key: float(10 * i + rank) for i, key in enumerate(keys)}
        return [
            {key: values[key] for key in order},
            {key: values[key] for key in reversed(order)},
            {key: values[key] for key in order if key != "m" or rank != 2},
        ]

    results, mergers = run_ranks(steps, reductions={key: SUM for key in keys})
    assert mergers[0].exchanges == {"packed": 3, "objects": 1}
    for step, merged in enumerate(results[0]):
        assert merged is not None
        for i, key in enumerate(keys):
            ranks = [r for r in range(WORLD) if not (step == 2 and key == "m" and r == 2)]
            assert merged[key] == math.fsum(float(10 * i + r) for r in ranks)


def test_non_numbers_stay_rank_0_s_and_a_nan_drops_only_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def steps(rank: int) -> list[Mapping[str, Any]]:
        return [
            {"x": 1.0, "name": f"rank{rank}"},
            {"x": math.nan if rank == 2 else 2.0 + rank, "name": f"rank{rank}"},
        ]

    results, _ = run_ranks(steps, reductions={"x": MAX})
    assert results[0][1] == {"x": 3.0, "name": "rank0"}
    assert "rank 2 logged 'x' as a value that is not finite" in caplog.text


def test_a_value_not_finite_on_every_rank_is_not_finite_in_the_run_s_row_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every rank's loss diverges (NaN) from step 1 on, every rank's grad norm is +inf at
    step 2: the run's row holds NaN and inf, as one process's would, said once per key.
    Before: the key vanished from the run's row, hiding the divergence, said at the first
    step only as if one rank's value had been left out."""

    def steps(rank: int) -> list[Mapping[str, Any]]:
        return [
            {"loss": 1.0 + rank, "grad_norm": 1.0},
            {"loss": math.nan, "grad_norm": 2.0},
            {"loss": math.nan, "grad_norm": math.inf},
            {"loss": math.nan, "grad_norm": -math.inf if rank else math.inf},
        ]

    results, _ = run_ranks(steps)
    rows = results[0]
    assert rows[0] == {"loss": 2.0, "grad_norm": 1.0}
    assert [math.isnan(row["loss"]) for row in rows[1:]] == [True, True, True]  # type: ignore[index]
    assert [row["grad_norm"] for row in rows[1:3]] == [2.0, math.inf]  # type: ignore[index]
    assert math.isnan(rows[3]["grad_norm"])  # type: ignore[index]  # +inf and -inf: NaN
    said = [r.getMessage() for r in caplog.records if "not finite on every rank" in r.getMessage()]
    assert len(said) == 2, said  # once per key
    assert "left out" not in caplog.text


def test_a_failed_collective_stops_merging_said_once_and_rank_0_logs_its_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    shared: dict[str, Any] = {"fail": True}
    merger = RankMerger(ThreadCollective(shared, 0), raw_path=None)
    assert merger.merge({"a": 1.0}, 0, "") == {"a": 1.0}
    assert merger.merge({"a": 2.0}, 1, "") == {"a": 2.0}
    assert merger.broken is not None
    assert caplog.text.count("ranks are merged no more") == 1
    # gloo says "typically caused by a remote worker crashing" when a rank that logged fewer
    # steps finished its Logger: the message says what else stops a rank taking part.
    assert "finished its Logger, or logged fewer steps" in caplog.text
    other = RankMerger(ThreadCollective(shared, 1), raw_path=None)
    assert other.merge({"a": 1.0}, 0, "") is None


@pytest.mark.parametrize("extra", ["another step", "another prefix"])
def test_ranks_whose_calls_differ_stop_merging_said_once_instead_of_mixing_dicts(
    caplog: pytest.LogCaptureFixture, extra: str
) -> None:
    """A call made on rank 0 only (a second dict under ``if rank == 0:``) pairs rank 0's dict
    with the other ranks' next one. Before: merged all the same, silently, mixing rank 0's
    step-1 dict into the others' step 2 (``another step``), or its eval dict's keys into
    their train row (``another prefix``). Each is said once now, and the merge stops: the
    calls no longer line up, and rank 0 logs its own dicts as they are."""
    calls: dict[int, list[tuple[dict[str, float], int, str]]] = {
        rank: [
            ({"loss": 1.0 + rank}, 1, "train"),
            ({"accuracy": 0.25 + rank}, 1, "eval"),
            ({"loss": 2.0 + rank}, 2, "train"),
        ]
        for rank in range(WORLD)
    }
    extra_call = (
        ({"loss": 9.0}, 1, "train") if extra == "another step" else ({"accuracy": 0.5}, 2, "eval")
    )
    calls[0].insert(2, extra_call)
    results, mergers, _shared = merge_calls(calls)
    # The aligned calls merged; from the differing call on, rank 0 logs its own dicts.
    assert results[0] == [{"loss": 2.0}, {"accuracy": 1.25}, extra_call[0], {"loss": 2.0}]
    assert results[1] == results[2] == [None, None, None]
    assert all(merger.broken is not None for merger in mergers)
    said = [r.getMessage() for r in caplog.records if "ranks are merged no more" in r.getMessage()]
    assert len(said) == 1, said
    assert "every rank must call log_metrics with the same steps and prefixes" in said[0]


def test_a_logger_on_rank_0_writes_the_run_s_row_and_each_rank_its_raw_rows(
    tmp_path: Path,
) -> None:
    shared: dict[str, Any] = {"slots": [None] * WORLD, "barrier": threading.Barrier(WORLD)}

    def rank_loop(rank: int) -> None:
        logger = thread_rank_logger(shared, rank, tmp_path)
        for step in range(2):
            logger.log_metrics({"num_samples": 4 + rank, "reward": 0.5 * rank}, step=step)
        logger.finish()

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(WORLD)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    rows = [row for row in read_jsonl(tmp_path / "tracker0.jsonl") if "metrics" in row]
    assert [row["step"] for row in rows] == [0, 1]
    # reward: weighted by num_samples (4, 5, 6) as the training family declares.
    assert rows[0]["metrics"]["num_samples"] == 15
    assert rows[0]["metrics"]["reward"] == (0 * 4 + 0.5 * 5 + 1.0 * 6) / 15
    for rank in (1, 2):  # the other ranks open no tracker at all (no file, no W&B run)
        assert not (tmp_path / f"tracker{rank}.jsonl").exists()
    for rank in range(WORLD):
        raw = list(read_jsonl(tmp_path / f"raw{rank}.jsonl"))
        assert [(r["rank"], r["step"], r["metrics"]["reward"]) for r in raw] == [
            (rank, 0, 0.5 * rank),
            (rank, 1, 0.5 * rank),
        ]
        assert all(r["run_id"] == "r1" and r["host"] for r in raw)


def test_the_efficiency_summary_merges_its_phases_as_stragglers(tmp_path: Path) -> None:
    shared: dict[str, Any] = {"slots": [None] * WORLD, "barrier": threading.Barrier(WORLD)}

    def rank_loop(rank: int) -> None:
        merger = RankMerger(ThreadCollective(shared, rank), raw_path=None)
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / f"tracker{rank}.jsonl")}},
            ranks=merger,
            run_id="r1",
        )
        summary = EfficiencySummary(seconds={"generation": 1.0 + rank}, step_wall_time_s=2.0 + rank)
        logger.log_efficiency_summary(summary, step=0)
        logger.finish()

    threads = [threading.Thread(target=rank_loop, args=(r,)) for r in range(WORLD)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    (row,) = [row for row in read_jsonl(tmp_path / "tracker0.jsonl") if "metrics" in row]
    metrics = row["metrics"]
    wall = "efficiency/step_wall_time_s"
    assert metrics[wall] == 2.0 + WORLD - 1  # the step waits for its slowest rank
    assert metrics[wall + "/slowest_rank"] == WORLD - 1
    assert metrics[wall + "/rank_min"] == 2.0


def test_other_ranks_tee_their_own_values_only_when_asked() -> None:
    teed: list[tuple[str, dict[str, Any]]] = []

    class Capture:
        @hookimpl
        def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
            teed.append((threading.current_thread().name, dict(metrics)))

    register(Capture(), "capture")
    shared: dict[str, Any] = {"slots": [None] * WORLD, "barrier": threading.Barrier(WORLD)}

    def rank_loop(rank: int) -> None:
        merger = RankMerger(ThreadCollective(shared, rank), raw_path=None, export_own=rank == 1)
        logger = rlmetrics.Logger(backends={}, ranks=merger, run_id="r1")
        logger.log_metrics({"loss": float(rank**2)}, step=0)
        logger.finish()

    threads = [threading.Thread(target=rank_loop, args=(r,), name=f"rank{r}") for r in range(WORLD)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(teed) == [("rank0", {"loss": 5 / 3}), ("rank1", {"loss": 1.0})]


@pytest.mark.parametrize("background", [False, True])
def test_with_export_own_every_rank_tees_its_own_values_rank_0_too(
    tmp_path: Path, background: bool
) -> None:
    """export_own on every rank (for the recording rules, which merge the ranks' series by run
    id at query time): rank 0 tees its own values as the others do, and only its trackers get
    the run's row. Before, rank 0 teed the run's merged values beside the other ranks' own, so
    a rule summing by run id counted every other rank twice."""
    teed: list[tuple[str, dict[str, Any]]] = []

    class Capture:
        @hookimpl
        def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
            teed.append((threading.current_thread().name, dict(metrics)))

    register(Capture(), "capture")
    shared, own = _group(), _group()

    def rank_loop(rank: int) -> None:
        collective = (
            SeparableCollective(shared, rank, own) if background else ThreadCollective(shared, rank)
        )
        merger = RankMerger(collective, raw_path=None, export_own=True)
        path = tmp_path / f"tracker{rank}.jsonl"
        logger = rlmetrics.Logger(backends={"jsonl": {"path": str(path)}}, ranks=merger)
        logger.log_metrics({"num_samples": float(rank + 1)}, step=0)
        logger.finish()

    _run_loggers(rank_loop)
    assert sorted(teed) == [(f"rank{r}", {"num_samples": float(r + 1)}) for r in range(WORLD)]
    [row] = [r for r in read_jsonl(tmp_path / "tracker0.jsonl") if "metrics" in r]
    assert row["metrics"] == {"num_samples": 6.0}  # the run's: summed


def test_an_unknown_ranks_value_is_a_mistake() -> None:
    with pytest.raises(ValueError, match=r"pass one of .*'torch'.*'rlmetrics\.ranks' entry-point"):
        rlmetrics.Logger(backends={}, ranks="mpi")


@pytest.mark.parametrize(("ranks", "package"), [("torch", "torch"), ("ray", "ray")])
def test_an_engine_whose_package_is_missing_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, ranks: str, package: str
) -> None:
    """Before: the bare ``ModuleNotFoundError: No module named 'torch'`` from inside the
    engine, not saying that ``ranks=`` asked for it."""
    if ranks == "ray":
        pytest.importorskip("rlmetrics_ray")  # the engine is the rlmetrics-ray plugin's
    monkeypatch.setitem(sys.modules, package, None)  # as if it were not installed here
    with pytest.raises(
        ImportError, match=rf"Logger\(ranks='{ranks}'\) needs the package '{package}'"
    ):
        rlmetrics.Logger(backends={}, ranks=ranks)


@pytest.mark.parametrize("ranks", [5, {"engine": "torch"}, object()])
def test_a_ranks_value_that_is_no_merger_is_a_mistake(ranks: Any) -> None:
    """Before: ``AttributeError: 'int' object has no attribute 'logs'``."""
    with pytest.raises(
        TypeError, match=r"Logger\(ranks=\.\.\.\) takes one of .*'torch'.* or a merger"
    ):
        rlmetrics.Logger(backends={}, ranks=ranks)


def test_dicts_gathered_already_merge_as_the_exchange_does(tmp_path: Path) -> None:
    """Ray Train's controller holds every worker's report: merge_gathered gives the value the
    collective gives, writes one raw row per rank, and keeps rank 0's non-numbers."""

    def steps(rank: int) -> list[Mapping[str, Any]]:
        return [
            {"num_samples": 4 + rank, "reward": 0.5 * rank, "note": f"r{rank}", "loss": 1.0}
            | ({"only/rank2": 7.0} if rank == 2 else {}),
            {"num_samples": 2, "reward": math.nan if rank == 1 else 1.0, "loss": 2.0 + rank},
        ]

    exchanged, _ = run_ranks(steps)
    merger = gathered(raw_path=tmp_path / "ranks.jsonl")
    merger.bind(None)
    by_hand = [
        merger.merge_gathered([steps(r)[step] for r in range(WORLD)], step, "train", ["h0"])
        for step in range(2)
    ]
    merger.finish()
    assert by_hand == exchanged[0]
    assert by_hand[0]["note"] == "r0" and by_hand[0]["only/rank2"] == 7.0
    raw = list(read_jsonl(tmp_path / "ranks.jsonl"))
    assert [(r["rank"], r["step"], r["host"]) for r in raw] == [
        (rank, step, "h0" if rank == 0 else None) for step in range(2) for rank in range(WORLD)
    ]


def test_a_merge_of_gathered_dicts_never_raises() -> None:
    merger = gathered(raw_path=None)
    assert merger.merge_gathered([], 0, "train") == {}
    # The exchanging call has nothing to exchange with: said once, rank 0's own values.
    assert merger.merge({"a": 1.0}, 0, "train") == {"a": 1.0}
    assert merger.broken is not None


# -- merged off the loop's thread (a collective that opens a group of its own) -----------------


class SeparableCollective(ThreadCollective):
    """A thread "group" that opens another over the same ranks for the merger's thread."""

    def __init__(self, shared: dict[str, Any], rank: int, own: dict[str, Any]) -> None:
        super().__init__(shared, rank)
        self.own = own

    def own_group(self) -> OwnCollective:
        return OwnCollective(self.own, self.rank)


class OwnCollective(ThreadCollective):
    """The group a merger opened: each close() is counted by rank (``own["closed"]``); it
    raises when ``own["close_fails"]``."""

    def close(self) -> None:
        self.shared.setdefault("closed", []).append(self.rank)
        if self.shared.get("close_fails"):
            raise RuntimeError("already shut down")


def _group(timeout_s: float = 30.0) -> dict[str, Any]:
    return {"slots": [None] * WORLD, "barrier": threading.Barrier(WORLD, timeout=timeout_s)}


def _run_loggers(loop: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=loop, args=(r,), name=f"rank{r}") for r in range(WORLD)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)


def test_off_the_loop_s_thread_rows_arrive_in_step_order_each_exact_and_the_dict_reusable(
    tmp_path: Path,
) -> None:
    """Each rank reuses one dict (its values overwritten after every call) and runs its own
    collective on the trainer's group at every step while the merges run on the merger's."""
    trainer, own = _group(), _group()
    steps = 40
    teed: list[tuple[str, int]] = []

    class Capture:
        @hookimpl
        def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
            teed.append((threading.current_thread().name, step))

    register(Capture(), "capture-background")
    sums: dict[int, list[float]] = {rank: [] for rank in range(WORLD)}

    def loop(rank: int) -> None:
        collective = SeparableCollective(trainer, rank, own)
        merger = RankMerger(
            collective, raw_path=tmp_path / "raw{rank}.jsonl", reductions={"n": SUM}
        )
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / f"tracker{rank}.jsonl")}},
            ranks=merger,
            run_id="r1",
        )
        assert merger.handoff is not None
        metrics: dict[str, Any] = {}
        for step in range(steps):
            metrics.update(n=float(rank + step), loss=float(rank * step), tag=f"s{step}")
            logger.log_metrics(metrics, step=step, prefix="train")
            metrics.update(n=-1.0, loss=-1.0, tag="reused")  # the caller's buffer, refilled
            # The trainer's own collective, while the merger's thread runs its merges.
            sums[rank].append(
                sum(collective.all_gather([float(rank * step)])[r][0] for r in range(WORLD))
            )
        logger.finish()
        assert merger.unmerged == 0 and merger.broken is None

    _run_loggers(loop)
    rows = [row for row in read_jsonl(tmp_path / "tracker0.jsonl") if "metrics" in row]
    assert [row["step"] for row in rows] == list(range(steps))
    for row in rows:
        step = row["step"]
        assert row["metrics"]["n"] == math.fsum(float(r + step) for r in range(WORLD))
        assert row["metrics"]["loss"] == math.fsum(float(r * step) for r in range(WORLD)) / WORLD
        assert row["metrics"]["tag"] == f"s{step}"  # rank 0's, as it was at its call
    for rank in range(WORLD):
        assert sums[rank] == [float(sum(range(WORLD)) * step) for step in range(steps)]
        raw = list(read_jsonl(tmp_path / f"raw{rank}.jsonl"))
        assert [(r["step"], r["metrics"]["n"]) for r in raw] == [
            (step, float(rank + step)) for step in range(steps)
        ]
    # Rank 0's run rows reached the tee from the merger's thread, in step order.
    delivered = [step for name, step in teed if name == "rlmetrics-ranks"]
    assert delivered == list(range(steps))
    assert not [name for name, _ in teed if name.startswith("rank")]


def test_off_the_loop_s_thread_the_efficiency_summary_is_delivered_as_one(tmp_path: Path) -> None:
    trainer, own = _group(), _group()
    summaries: list[tuple[str, float]] = []

    class Capture:
        @hookimpl
        def on_efficiency_summary(self, summary: EfficiencySummary, step: int) -> None:
            summaries.append((threading.current_thread().name, summary.step_wall_time_s))

    register(Capture(), "capture-summary")

    def loop(rank: int) -> None:
        merger = RankMerger(SeparableCollective(trainer, rank, own), raw_path=None)
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / f"tracker{rank}.jsonl")}}, ranks=merger
        )
        summary = EfficiencySummary(seconds={"generation": 1.0 + rank}, step_wall_time_s=2.0 + rank)
        logger.log_efficiency_summary(summary, step=0)
        logger.finish()

    _run_loggers(loop)
    (row,) = [row for row in read_jsonl(tmp_path / "tracker0.jsonl") if "metrics" in row]
    assert row["metrics"]["efficiency/step_wall_time_s/slowest_rank"] == WORLD - 1
    assert summaries == [("rlmetrics-ranks", 2.0 + WORLD - 1)]


def test_a_merge_queue_left_full_is_said_once_counted_and_never_blocks_the_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rank 2 logs nothing until the others have logged every step: their merges wait in
    the collective, their queues fill, and what does not fit is counted and said."""
    trainer, own = _group(), _group(timeout_s=2.0)
    steps, others_done = 8, threading.Barrier(WORLD - 1)
    mergers: dict[int, RankMerger] = {}

    def loop(rank: int) -> None:
        merger = RankMerger(
            SeparableCollective(trainer, rank, own),
            raw_path=tmp_path / "raw{rank}.jsonl",
            max_pending=2,
            full_wait_s=0.0,
        )
        mergers[rank] = merger
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / f"tracker{rank}.jsonl")}}, ranks=merger
        )
        if rank == WORLD - 1:
            time.sleep(0.5)  # the slow rank: the others' loops go on without it
        for step in range(steps):
            logger.log_metrics({"n": float(rank + step)}, step=step)
        if rank != WORLD - 1:
            others_done.wait(30)
        logger.finish()

    _run_loggers(loop)
    # Said once (these ranks are threads of one process: once for both that fell behind).
    assert caplog.text.count("logged dicts behind") == 1
    assert mergers[1].unmerged > 0
    rows = [row for row in read_jsonl(tmp_path / "tracker0.jsonl") if "metrics" in row]
    logged = [row["step"] for row in rows]
    assert logged == sorted(set(logged))  # in step order, none twice
    assert mergers[0].unmerged > 0
    assert len(logged) + mergers[0].unmerged == steps  # each step logged or counted
    for rank in range(WORLD):  # every step in the raw file (the dropped ones written first)
        raw = sorted(r["step"] for r in read_jsonl(tmp_path / f"raw{rank}.jsonl"))
        assert raw == list(range(steps))


def test_finish_waits_a_bounded_time_for_a_merge_that_cannot_complete(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rank 0 alone logs (the other ranks build their Logger, and never log): its merge
    waits in the collective, and finish() returns after its timeout, the steps still pending
    counted and said."""
    trainer, own = _group(), _group(timeout_s=60.0)
    others: list[rlmetrics.Logger] = []

    def build_only(rank: int) -> None:
        merger = RankMerger(SeparableCollective(trainer, rank, own), raw_path=None)
        others.append(rlmetrics.Logger(backends={}, ranks=merger))

    building = [threading.Thread(target=build_only, args=(rank,)) for rank in (1, 2)]
    for thread in building:  # every rank binds its Logger at once (the run id's exchange)
        thread.start()
    merger = RankMerger(SeparableCollective(trainer, 0, own), raw_path=tmp_path / "raw.jsonl")
    logger = rlmetrics.Logger(
        backends={"jsonl": {"path": str(tmp_path / "tracker.jsonl")}}, ranks=merger
    )
    for thread in building:
        thread.join(30)
    assert len(others) == 2
    for step in range(3):
        logger.log_metrics({"n": float(step)}, step=step)
    started = time.monotonic()
    logger.finish(timeout_s=0.5)
    assert time.monotonic() - started < 20
    assert merger.unmerged == 3
    assert "3 logged dict(s) were still being merged across the 3 ranks" in caplog.text
    # The step in flight (in the collective) is in the raw file only too. Before: "steps
    # 1-2", the queued ones only.
    assert "steps 0-2 are in the raw file only" in caplog.text
    assert [r["step"] for r in read_jsonl(tmp_path / "raw.jsonl")] == [0, 1, 2]
    assert not [row for row in read_jsonl(tmp_path / "tracker.jsonl") if "metrics" in row]
    assert "closed" not in own  # its thread is still in a collective there
    own["barrier"].abort()  # the merger's thread ends with its collective
    assert merger.handoff is not None
    merger.handoff.thread.join(10)
    assert not merger.handoff.thread.is_alive()
    for other in others:
        other.finish()


@pytest.mark.parametrize("close_fails", [False, True])
def test_finish_closes_the_group_the_merger_opened_once_and_never_the_given_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, close_fails: bool
) -> None:
    trainer, own = _group(), _group() | {"close_fails": close_fails}
    given_closed: list[int] = []

    class Given(SeparableCollective):
        def close(self) -> None:
            given_closed.append(self.rank)

    def loop(rank: int) -> None:
        merger = RankMerger(Given(trainer, rank, own), raw_path=None)
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / f"tracker{rank}.jsonl")}}, ranks=merger
        )
        logger.log_metrics({"n": float(rank)}, step=0)
        logger.finish()
        logger.finish()
        merger.finish()

    _run_loggers(loop)
    assert sorted(own["closed"]) == list(range(WORLD))  # once per rank
    assert given_closed == []
    (row,) = [row for row in read_jsonl(tmp_path / "tracker0.jsonl") if "metrics" in row]
    assert row["metrics"]["n"] == 1.0
    said = caplog.text.count("could not close the merger's own process group")
    assert said == (1 if close_fails else 0)


def test_a_group_of_its_own_that_cannot_be_opened_leaves_the_merge_on_the_loop_s_thread(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trainer = _group()

    class Unopenable(ThreadCollective):
        def own_group(self) -> ThreadCollective:
            raise RuntimeError("no more ports")

    def loop(rank: int) -> None:
        merger = RankMerger(Unopenable(trainer, rank), raw_path=None)
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / f"tracker{rank}.jsonl")}}, ranks=merger
        )
        assert merger.handoff is None
        logger.log_metrics({"n": float(rank)}, step=0)
        logger.finish()

    _run_loggers(loop)
    assert "could not open the merger's own process group" in caplog.text
    (row,) = [row for row in read_jsonl(tmp_path / "tracker0.jsonl") if "metrics" in row]
    assert row["metrics"]["n"] == 1.0  # the mean of 0, 1 and 2


@pytest.mark.parametrize("given", ["none", "on rank 0", "on every rank", "another on rank 2"])
def test_every_rank_s_rows_carry_rank_0_s_run_id_unless_one_was_given(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, given: str
) -> None:
    """The ranks agree on the run id as their Loggers bind: a rank whose id was not given
    takes rank 0's, so its raw rows join the tracker's; a given id is kept, and ids that
    differ across ranks are said once. Before: every rank generated its own, so rank 1's raw
    rows carried another run id than the tracker's rows."""
    trainer, own = _group(), _group()
    ids: dict[int, str] = {}

    def loop(rank: int) -> None:
        run_id = {
            "none": None,
            "on rank 0": "chosen" if rank == 0 else None,
            "on every rank": "chosen",
            "another on rank 2": "theirs" if rank == 2 else None,
        }[given]
        merger = RankMerger(
            SeparableCollective(trainer, rank, own), raw_path=tmp_path / "raw{rank}.jsonl"
        )
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / f"tracker{rank}.jsonl")}},
            ranks=merger,
            run_id=run_id,
        )
        ids[rank] = logger.identity.run_id
        logger.log_metrics({"n": float(rank)}, step=0)
        logger.finish()

    _run_loggers(loop)
    (row,) = [row for row in read_jsonl(tmp_path / "tracker0.jsonl") if "metrics" in row]
    run = row["run_id"]
    assert run == ("chosen" if given in ("on rank 0", "on every rank") else ids[0])
    expected = {rank: run for rank in range(WORLD)}
    if given == "another on rank 2":
        expected[2] = "theirs"  # given: kept, and said
    assert ids == expected
    raw = {rank: {r["run_id"] for r in read_jsonl(tmp_path / f"raw{rank}.jsonl")} for rank in ids}
    assert raw == {rank: {run_id} for rank, run_id in expected.items()}
    said = [r.getMessage() for r in caplog.records if "run ids differ" in r.getMessage()]
    assert len(said) == (1 if given == "another on rank 2" else 0), said
    if said:
        assert f"rank 0 {run!r}" in said[0] and "rank 2 'theirs'" in said[0]


def test_a_logger_built_on_rank_0_only_stops_merging_once_said_and_never_blocks_the_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rank 0 alone builds its Logger with ranks (as under ``if rank == 0:``): opening the
    merger's own group waits for the other ranks until its timeout. Then the merging stops,
    said once with what to change, and rank 0 logs its own values at once. Before: it fell
    back to merging on the loop's thread, over the trainer's group, where every step's
    log_metrics waited in a collective the other ranks never join (and one they do join for
    the trainer's own would be paired with it)."""
    trainer = _group(timeout_s=20.0)
    own = _group(timeout_s=1.5)  # the merger's own group: the other ranks never open it

    class Alone(SeparableCollective):
        def own_group(self) -> OwnCollective:
            own["barrier"].wait()  # waits its timeout for ranks that never come
            raise AssertionError("unreachable")  # pragma: no cover

    merger = RankMerger(Alone(trainer, 0, own), raw_path=tmp_path / "raw.jsonl")
    logger = rlmetrics.Logger(
        backends={"jsonl": {"path": str(tmp_path / "tracker.jsonl")}}, ranks=merger
    )
    started = time.monotonic()
    for step in range(3):
        logger.log_metrics({"n": float(step)}, step=step)
    logger.finish()
    assert time.monotonic() - started < 10  # not a collective's timeout per step
    rows = [row for row in read_jsonl(tmp_path / "tracker.jsonl") if "metrics" in row]
    assert [(row["step"], row["metrics"]) for row in rows] == [
        (step, {"n": float(step)}) for step in range(3)
    ]
    assert merger.broken is not None and merger.handoff is None
    said = [r.getMessage() for r in caplog.records if "own process group" in r.getMessage()]
    assert len(said) == 1, said
    assert "build the Logger with ranks= on every rank" in said[0]
    assert [r["step"] for r in read_jsonl(tmp_path / "raw.jsonl")] == [0, 1, 2]


_CALL = st.tuples(st.integers(min_value=0, max_value=3), st.sampled_from(["train", "eval"]))


@given(
    shared_calls=st.lists(_CALL, max_size=4),
    rank_0_next=_CALL,
    others_next=_CALL,
    tail=st.lists(_CALL, max_size=2),
)
def test_merged_dicts_are_always_of_one_call_on_every_rank(
    shared_calls: list[tuple[int, str]],
    rank_0_next: tuple[int, str],
    others_next: tuple[int, str],
    tail: list[tuple[int, str]],
) -> None:
    """Whatever the ranks' calls, a merged row is of one (step, prefix) on every rank: the
    calls they share merge (the mean of the ranks' values), and from the first call where
    rank 0's differs from the others' (in step or prefix) rank 0 logs its own dicts, and
    nothing waits in a collective the others never join."""
    assume(rank_0_next != others_next)

    def value(rank: int, call: int) -> dict[str, float]:
        return {"x": float(10 * call + rank)}

    calls = {
        rank: [
            (value(rank, call), step, prefix)
            for call, (step, prefix) in enumerate(
                [*shared_calls, rank_0_next if rank == 0 else others_next, *tail]
            )
        ]
        for rank in range(WORLD)
    }
    results, mergers, shared = merge_calls(calls)
    assert "mismatched" not in shared
    merged = len(shared_calls)
    for call, row in enumerate(results[0]):
        if call < merged:
            assert row == {"x": math.fsum(10 * call + r for r in range(WORLD)) / WORLD}
        else:
            assert row == value(0, call)
    assert all(m.broken is not None for m in mergers)


@pytest.mark.parametrize("step", [None, "x", 2.5, np.int64(3)])
def test_a_step_that_is_no_int_does_not_break_the_merge(step: Any) -> None:
    """``RankMerger.merge`` is public (an adapter hands it the trainer's step as given).
    Before: a step ``float()`` could not take (None, "x") ended the merging for the run."""
    results, mergers = run_ranks(lambda rank: [{"x": float(rank)}], step=step)
    assert results[0] == [{"x": 1.0}]
    assert all(merger.broken is None for merger in mergers)


class UnjoinedCollective(ThreadCollective):
    """A collective whose ranks did not all bind their merger in time (as log_ranks called
    under ``if accelerator.is_main_process:``)."""

    def join(self) -> None:
        raise RanksNotJoined(1, WORLD, timedelta(seconds=60), late=False)


def test_ranks_that_did_not_all_bind_say_it_for_log_ranks_too_and_log_their_own(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A merger bound without a Logger (Accelerate's log_ranks) whose ranks did not all come:
    the message names log_ranks, not only the Logger, and rank 0 gets its own values, with no
    collective made. Before, it spoke of building a Logger the user never built."""
    shared: dict[str, Any] = {"slots": [None] * WORLD, "barrier": threading.Barrier(WORLD)}
    merger = RankMerger(UnjoinedCollective(shared, 0), raw_path=None, background=False)
    merger.bind(None)
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "call log_ranks on every rank" in text and "accelerator.is_main_process" in text
    assert merger.merge({"loss": 1.0}, 0, "train") == {"loss": 1.0}


@pytest.mark.parametrize("ranks", ["x", "Torch", object()], ids=["unknown", "case", "object"])
def test_a_ranks_argument_no_engine_takes_is_a_configuration_error(ranks: Any) -> None:
    """Before: a bare ValueError (a TypeError for an object), where every other mistake in
    a Logger's arguments is a ConfigurationError saying what to pass."""
    from rlmetrics.configuration import ConfigurationError

    with isolated_state(), pytest.raises(ConfigurationError, match="'torch'"):
        rlmetrics.Logger(backends={}, ranks=ranks)


def test_keys_that_carry_their_prefix_merge_as_under_it() -> None:
    """{"train/reward": r} logged without a prefix is the training reward (docs/concepts.md):
    across ranks it merges as reward does under train, weighted by the same dict's
    train/num_samples, and train/grad_norm as grad_norm (the largest)."""
    rows = [
        {"num_samples": 1, "reward": 0.0, "grad_norm": 1.0},
        {"num_samples": 3, "reward": 1.0, "grad_norm": 5.0},
        {"num_samples": 4, "reward": 0.5, "grad_norm": 2.0},
    ]
    merger = gathered()
    merger.bind(None)
    under_train = merger.merge_gathered(rows, 0, "train", ["h0"])
    carried = [{f"train/{k}": v for k, v in row.items()} for row in rows]
    in_keys = merger.merge_gathered(carried, 1, "", ["h0"])
    merger.finish()
    assert under_train["reward"] == pytest.approx(5.0 / 8.0)
    assert under_train["grad_norm"] == 5.0
    assert {k.removeprefix("train/"): v for k, v in in_keys.items()} == under_train


def test_each_key_merges_as_the_series_it_is_read_as_under_its_prefix(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A key merges as what reads it under the prefix it is logged under (docs/ranks.md): a
    reward component (``reward/<component>``) weighs by the step's samples as
    rl.reward.component_mean declares, not a plain mean; ``reward`` under ``validation-<dataset>``
    is rl.validation.reward.mean's plain mean, said nowhere as a weighted mean missing its
    weight; and an evaluation dict's keys merge alike whether the prefix is given or carried in
    the keys ({"eval/num_samples": n} sums, as under prefix="eval")."""
    shared: dict[str, Any] = {"slots": [None] * WORLD, "barrier": threading.Barrier(WORLD)}
    samples, rewards = [10.0, 30.0, 60.0], [1.0, 0.0, 0.5]

    def rank_loop(rank: int) -> None:
        merger = RankMerger(ThreadCollective(shared, rank), raw_path=None)
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / f"tracker{rank}.jsonl")}}, ranks=merger
        )
        n, r = samples[rank], rewards[rank]
        logger.log_metrics(
            {"reward": r, "num_samples": n, "reward/math": r}, step=0, prefix="train"
        )
        logger.log_metrics({"reward": r, "accuracy": r}, step=0, prefix="validation-math")
        logger.log_metrics({"reward": r, "num_samples": n}, step=0, prefix="eval")
        logger.log_metrics({"eval/reward": r, "eval/num_samples": n}, step=0)
        logger.finish()

    with isolated_state():
        in_rank_threads(rank_loop)
    rows = {
        row["prefix"]: row["metrics"]
        for row in read_jsonl(tmp_path / "tracker0.jsonl")
        if "metrics" in row
    }
    weighted = math.fsum(n * r for n, r in zip(samples, rewards, strict=True)) / sum(samples)
    plain = math.fsum(rewards) / WORLD
    assert rows["train"] == {"reward": weighted, "num_samples": 100.0, "reward/math": weighted}
    assert rows["validation-math"] == {"reward": plain, "accuracy": plain}
    assert rows["eval"] == {"reward": weighted, "num_samples": 100.0}
    assert rows[""] == {"eval/reward": weighted, "eval/num_samples": 100.0}
    assert "weighted mean" not in caplog.text


def test_a_straggler_phase_is_named_as_read_under_its_prefix() -> None:
    """The straggler series name a phase by its key as the train dict reads it: a loop that
    carries its prefix in the keys ({"train/policy_time": t}) gets the series prefix="train"
    gets (rl.ranks.phase="policy_time"), and an evaluation dict's phase is its own
    ("eval/policy_time"), not the training phase's series overwritten by it."""
    rows = [{"policy_time": 0.1}, {"policy_time": 0.4}, {"policy_time": 0.1}]
    with isolated_state(), in_memory_telemetry() as (_handle, reader):
        merger = gathered(raw_path=None)
        merger.bind(None)
        under_train = merger.merge_gathered(rows, 0, "train")
        carried = [{"train/policy_time": row["policy_time"]} for row in rows]
        in_keys = merger.merge_gathered(carried, 1, "")
        evaluation = [{"policy_time": 2.0 * row["policy_time"]} for row in rows]
        merger.merge_gathered(evaluation[::-1], 1, "eval")
        merger.finish()
        found = {
            (p.attributes.get("rl.ranks.phase"), p.value)
            for p in points(reader)
            if p.name == "rl.ranks.duration.max"
        }
    assert under_train["policy_time/slowest_rank"] == in_keys["train/policy_time/slowest_rank"]
    assert found == {("policy_time", 0.4), ("eval/policy_time", 0.8)}


def test_check_run_knows_the_straggler_entries_of_a_merged_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The entries a merge adds beside a straggler key (``policy_time/rank_min`` ...) are the
    merger's own, exported as the rl.ranks.* series: ``rlmetrics check --run`` on rank 0's
    tracker file names none of them as a typo ("did you mean 'policy_time'?"), as
    ``Logger(unknown_keys="warn")`` would not."""
    from rlmetrics.cli import main

    shared: dict[str, Any] = {"slots": [None] * WORLD, "barrier": threading.Barrier(WORLD)}

    def rank_loop(rank: int) -> None:
        merger = RankMerger(ThreadCollective(shared, rank), raw_path=None)
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / f"tracker{rank}.jsonl")}}, ranks=merger
        )
        for step in range(2):
            logger.log_metrics({"loss": 1.0, "policy_time": 0.1 * (rank + 1)}, step=step)
        logger.log_efficiency_summary(
            EfficiencySummary({"train/policy": 0.5 + rank}, step_wall_time_s=4.0), step=1
        )
        logger.finish()

    with isolated_state():
        in_rank_threads(rank_loop)
    path = tmp_path / "tracker0.jsonl"
    logged = {k for row in read_jsonl(path) if "metrics" in row for k in row["metrics"]}
    assert "policy_time/rank_skew" in logged
    main(["check", "--run", str(path), "--json"])
    unknown = json.loads(capsys.readouterr().out)["run"]["unknown_keys"]
    assert [u["key"] for u in unknown] == []


def test_the_merge_works_with_the_training_family_disabled() -> None:
    """With the training family left out (RLMETRICS_DISABLE_PLUGINS=training) and telemetry
    started, the merge reads the declarations it has: looking up how a key merges must not
    import that family (its declarations would come after the freeze and fail the merge)."""
    import subprocess

    code = (
        "import rlmetrics\n"
        "from rlmetrics.ranks import gathered\n"
        "handle = rlmetrics.start(service_name='t', exporters=[])\n"
        "merger = gathered(raw_path=None)\n"
        "merger.bind(None)\n"
        "rows = [{'reward/math': 1.0, 'x': 1.0}, {'reward/math': 0.0, 'x': 3.0}]\n"
        "print(merger.merge_gathered(rows, 0, 'validation-math'))\n"
        "print(merger.merge_gathered(rows, 1, 'train'))\n"
        "handle.shutdown(timeout_s=2)\n"
    )
    env = {**os.environ, "RLMETRICS_DISABLE_PLUGINS": "training"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["{'reward/math': 0.5, 'x': 2.0}"] * 2, done.stderr
    assert "merge of 2 ranks' values failed" not in done.stderr
