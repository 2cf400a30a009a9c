"""Sample tables on every rank (``log_samples``, and ``log_trajectories``' rows): rank 0's
reach its trackers; a rank that writes no run rows keeps its own beside its raw file, so no
rank's rollouts vanish. Ranks are threads of one process (test_ranks_merger's collective)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from test_ranks_merger import WORLD, ThreadCollective, in_rank_threads, thread_rank_logger

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl, samples_path
from rlmetrics.events import CheckpointSave
from rlmetrics.ranks import RankMerger


def _rank_logs_tables(folder: Path, raw_path: Any) -> Any:
    """Each rank logs two steps of metrics, a samples table and two trajectories."""
    shared: dict[str, Any] = {"slots": [None] * WORLD, "barrier": threading.Barrier(WORLD)}

    def rank_loop(rank: int) -> None:
        merger = RankMerger(ThreadCollective(shared, rank), raw_path=raw_path, background=False)
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(folder / f"tracker{rank}.jsonl")}},
            ranks=merger,
            run_id="r1",
        )
        for step in range(2):
            logger.log_metrics({"num_samples": 4 + rank}, step=step)
            logger.log_samples([{"prompt": f"p{rank}", "reward": rank}], step=step)
            logger.log_trajectories(
                [{"sample_id": f"s{rank}-{step}-{i}", "reward": float(rank)} for i in range(2)],
                step=step,
            )
        logger.finish()

    in_rank_threads(rank_loop)


def _tables(path: Path) -> list[tuple[int, str, Any]]:
    rows = read_jsonl(samples_path(path))
    return sorted(
        (row["step"], row["name"], row["sample"].get("prompt") or row["sample"]["sample_id"])
        for row in rows
    )


def test_every_rank_s_samples_and_trajectory_rows_are_written_once(tmp_path: Path) -> None:
    _rank_logs_tables(tmp_path, tmp_path / "raw{rank}.jsonl")
    assert _tables(tmp_path / "tracker0.jsonl") == [
        (0, "samples", "p0"),
        (0, "trajectories", "s0-0-0"),
        (0, "trajectories", "s0-0-1"),
        (1, "samples", "p0"),
        (1, "trajectories", "s0-1-0"),
        (1, "trajectories", "s0-1-1"),
    ]
    for rank in (1, 2):  # no tracker there: their tables beside their raw rows
        assert not (tmp_path / f"tracker{rank}.jsonl").exists()
        assert _tables(tmp_path / f"raw{rank}.jsonl") == [
            (0, "samples", f"p{rank}"),
            (0, "trajectories", f"s{rank}-0-0"),
            (0, "trajectories", f"s{rank}-0-1"),
            (1, "samples", f"p{rank}"),
            (1, "trajectories", f"s{rank}-1-0"),
            (1, "trajectories", f"s{rank}-1-1"),
        ]
    assert not samples_path(tmp_path / "raw0.jsonl").exists()  # rank 0's are in its trackers


def test_without_a_raw_file_the_other_ranks_say_their_tables_are_not_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _rank_logs_tables(tmp_path, None)
    assert len(_tables(tmp_path / "tracker0.jsonl")) == 6
    assert caplog.text.count("writes no tracker rows and has no raw file (raw_path=None)") == 1


def test_every_rank_s_rollout_checkpoints_are_written_once(tmp_path: Path) -> None:
    """A rollout checkpoint is not merged (its stream's samples are each rank's own): rank 0's
    reach its trackers; before, another rank's went nowhere, unsaid. Now its raw file has it."""
    shared: dict[str, Any] = {"slots": [None] * WORLD, "barrier": threading.Barrier(WORLD)}

    def rank_loop(rank: int) -> None:
        merger = RankMerger(
            ThreadCollective(shared, rank), raw_path=tmp_path / "raw{rank}.jsonl", background=False
        )
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / f"tracker{rank}.jsonl")}},
            ranks=merger,
            run_id="r1",
        )
        logger.log_metrics({"num_samples": 4 + rank}, step=0)
        for saved in range(2):
            event = CheckpointSave({"total_save_seconds": rank + saved / 10}, wall_time_s=5.0)
            logger.log_rollout_checkpoint(event)
        logger.finish()

    in_rank_threads(rank_loop)

    def checkpoints(path: Path) -> list[tuple[int, float]]:
        return [
            (row["step"], row["metrics"]["total_save_seconds"])
            for row in read_jsonl(path)
            if row["prefix"] == CheckpointSave.PREFIX
        ]

    assert checkpoints(tmp_path / "tracker0.jsonl") == [(0, 0.0), (1, 0.1)]
    for rank in (1, 2):
        assert checkpoints(tmp_path / f"raw{rank}.jsonl") == [(0, rank), (1, rank + 0.1)]


def test_a_rank_s_hyperparameters_are_kept_in_its_raw_file(tmp_path: Path) -> None:
    """log_hyperparams on a rank that writes no run rows (no tracker there): before, its
    configuration went nowhere, unsaid; its raw file now keeps it as a hyperparams row (rank
    0's reach its trackers as before)."""
    shared: dict[str, Any] = {"slots": [None] * WORLD, "barrier": threading.Barrier(WORLD)}

    def rank_loop(rank: int) -> None:
        logger = thread_rank_logger(shared, rank, tmp_path)
        logger.log_hyperparams({"seed": rank, "optim": {"lr": 0.1}})
        logger.log_metrics({"num_samples": 4 + rank}, step=0)
        logger.finish()

    in_rank_threads(rank_loop)
    tracker = [
        r
        for r in read_jsonl(tmp_path / "tracker0.jsonl", every_row=True)
        if r.get("kind") == "hyperparams"
    ]
    assert [r["hyperparams"]["seed"] for r in tracker] == [0]
    for rank in (1, 2):
        raw = [
            r
            for r in read_jsonl(tmp_path / f"raw{rank}.jsonl", every_row=True)
            if r.get("kind") == "hyperparams"
        ]
        assert [(r["run_id"], r["hyperparams"]) for r in raw] == [
            ("r1", {"seed": rank, "optim": {"lr": 0.1}})
        ]
