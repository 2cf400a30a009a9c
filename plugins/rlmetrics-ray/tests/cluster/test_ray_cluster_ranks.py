"""Many Ray actors, one run, on a real one-node Ray cluster on 127.0.0.1: three actor workers
log through ``Logger(ranks=...)`` and the driver's reducer logs the run's rows.

- each declared kind is, on the driver, the value computed by hand from the workers' raw
  JSONL, exactly; the driver's tracker gets one row per step, the workers' none;
- the straggler series name the slow rank;
- ``ranks="ray"`` (the entry point) on both sides;
- a worker killed mid-run costs one bounded wait: the others' steps are logged and the
  missing rank is said once.

Skipped where Ray is not installed; the tox env ``ray`` runs them.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("ray") is None:
    if os.environ.get("RLMETRICS_REQUIRE_RAY") == "1":
        raise ImportError("RLMETRICS_REQUIRE_RAY=1 but Ray is not installed")
    pytest.skip("needs Ray (ray[default]); the tox env 'ray' installs it", allow_module_level=True)

from ray_support_cluster import RAY_ENV, RayHead, driver

os.environ.update(RAY_ENV)  # before Ray is imported: it reads them at import

import ray
from ray_support import wait_until
from rlmetrics_ray.ranks import RayReducer, ray_reducer

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.spec import MIN
from rlmetrics.testing import in_memory_telemetry, isolated_state, points

WORLD = 3
STEPS = 3
SLOW_RANK, SLOW_STEP = 2, 1
#: Actor starts and calls on a loaded two-core host.
CALL_S = 120.0


def values(rank: int, step: int) -> dict[str, float]:
    """Numbers distinct per rank and step; the keys are declared series (the driver's
    families say how they merge) and two the reducer is told of or not."""
    return {
        "num_samples": float(8 + 4 * rank + step),  # rl.train.samples: sum
        "reward": 0.1 * rank + 0.01 * step + 0.5,  # rl.reward.mean: weighted by num_samples
        "loss": 1.0 + rank * 0.25 - step * 0.125,  # mean
        "lr": 1e-5 * (rank + 1),  # last
        "grad_norm": 2.0 + 0.5 * ((rank + step) % 4),  # max
        "custom/queue_min": float(10 - rank - step),  # given: min
        "custom/undeclared": float(rank * 3 + step),  # undeclared: mean
        "policy_time": 1.5 if (rank, step) == (SLOW_RANK, SLOW_STEP) else 0.1 + 0.01 * rank,
    }


def worker_class() -> Any:
    """The worker actor, defined in a function so Ray ships it by value (the workers cannot
    import this test module)."""

    @ray.remote(num_cpus=0)
    class Worker:
        """One rank: a Logger with ``ranks=`` and a tracker of its own (which must stay empty)."""

        def __init__(
            self, folder: str, rank: int | None, by_name: bool, export_own: bool = False
        ) -> None:
            os.chdir(folder)  # ranks="ray" writes its raw file in the working directory
            if by_name:
                ranks: Any = "ray"
            else:
                from rlmetrics_ray.ranks import ray_rank

                ranks = ray_rank(
                    rank=rank,
                    world_size=WORLD,
                    raw_path="rank{rank}.jsonl",
                    export_own=export_own,
                )
            self.logger = rlmetrics.Logger(
                backends={"jsonl": {"path": f"worker{os.getpid()}.jsonl"}}, ranks=ranks
            )
            self.rank = self.logger._ranks.rank  # type: ignore[union-attr]

        def step(self, step: int, metrics: dict[str, float]) -> int:
            self.logger.log_metrics(metrics, step=step, prefix="train")
            return int(self.rank)

        def tables(self, step: int) -> None:
            """A samples table and a trajectory, which a worker (no tracker) keeps beside
            its raw file."""
            self.logger.log_samples([{"prompt": f"p{self.rank}"}], step=step)
            self.logger.log_trajectories(
                [{"sample_id": f"s{self.rank}-{step}", "reward": 1.0}], step=step
            )
            from rlmetrics.events import CheckpointSave

            self.logger.log_rollout_checkpoint(CheckpointSave({"total_save_seconds": step}))

        def efficiency(self, step: int, seconds: float) -> None:
            from rlmetrics.events import EfficiencySummary

            summary = EfficiencySummary({"train/policy": seconds}, step_wall_time_s=2 * seconds)
            self.logger.log_efficiency_summary(summary, step)

        def run_id(self) -> str:
            return str(self.logger.identity.run_id)

        def finish(self) -> None:
            self.logger.finish()

    return Worker


Worker = worker_class()


@pytest.fixture(scope="module")
def head() -> Iterator[RayHead]:
    with RayHead(num_cpus=2) as ray_head:
        yield ray_head


@pytest.fixture(scope="module")
def cluster(head: RayHead) -> Iterator[None]:
    with driver(head):
        yield


def tracker_rows(path: Path) -> list[dict[str, Any]]:
    return [row for row in read_jsonl(path) if "metrics" in row] if path.exists() else []


def raw_rows(folder: Path, ranks: range) -> dict[int, dict[int, dict[str, Any]]]:
    """``{rank: {step: metrics}}`` of the ``train`` rows of each worker's raw file (rank and
    host checked on every row)."""
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for rank in ranks:
        for row in read_jsonl(folder / f"rank{rank}.jsonl"):
            assert (row["rank"], row["host"]) == (rank, socket.gethostname())
            if row["prefix"] == "train":
                out.setdefault(rank, {})[row["step"]] = row["metrics"]
    return out


@pytest.fixture(scope="module")
def kinds(cluster: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Three workers log three steps; the driver's tracker rows and exported points."""
    folder = tmp_path_factory.mktemp("kinds")
    with isolated_state(), in_memory_telemetry(run_id="ray-ranks") as (_handle, reader):
        reducer = ray_reducer(
            world_size=WORLD, late_after_s=CALL_S, reductions={"custom/queue_min": MIN}
        )
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(folder / "driver.jsonl")}}, ranks=reducer
        )
        workers = [Worker.remote(str(folder), rank, False) for rank in range(WORLD)]
        for step in range(STEPS):
            ray.get(
                [w.step.remote(step, values(r, step)) for r, w in enumerate(workers)],
                timeout=CALL_S,
            )
            ray.get([w.tables.remote(step) for w in workers], timeout=CALL_S)
        worker_runs = ray.get([w.run_id.remote() for w in workers], timeout=CALL_S)
        ray.get([w.finish.remote() for w in workers], timeout=CALL_S)
        logger.finish()
        found = [
            {"name": p.name, "attributes": dict(p.attributes), "value": p.value}
            for p in points(reader)
            if p.name.startswith("rl.ranks.") or p.name == "rl.reward.mean"
        ]
    for worker in workers:
        ray.kill(worker)
    return {"folder": folder, "points": found, "reducer": reducer, "worker_runs": worker_runs}


def test_each_declared_kind_is_the_hand_computed_value_of_the_workers_raw_rows(
    kinds: dict[str, Any],
) -> None:
    folder: Path = kinds["folder"]
    raw = raw_rows(folder, range(WORLD))
    rows = tracker_rows(folder / "driver.jsonl")
    assert [row["step"] for row in rows] == list(range(STEPS))
    for row in rows:
        step, merged = row["step"], row["metrics"]
        column = {k: [raw[r][step][k] for r in range(WORLD)] for k in raw[0][step]}
        weights = column["num_samples"]
        assert merged["num_samples"] == math.fsum(weights)  # sum
        assert merged["reward"] == math.fsum(
            v * w for v, w in zip(column["reward"], weights, strict=True)
        ) / math.fsum(weights)  # weighted mean
        assert merged["loss"] == math.fsum(column["loss"]) / WORLD  # mean
        assert merged["lr"] == column["lr"][-1]  # last: the highest rank's
        assert merged["grad_norm"] == max(column["grad_norm"])  # max
        assert merged["custom/queue_min"] == min(column["custom/queue_min"])  # given: min
        assert merged["custom/undeclared"] == math.fsum(column["custom/undeclared"]) / WORLD
        seconds = column["policy_time"]
        assert merged["policy_time"] == max(seconds)  # straggler: the slowest rank's
        assert merged["policy_time/rank_min"] == min(seconds)
        assert merged["policy_time/rank_mean"] == math.fsum(seconds) / WORLD
        assert merged["policy_time/slowest_rank"] == seconds.index(max(seconds))


def test_the_trackers_get_one_row_per_step_on_the_driver_and_none_on_the_workers(
    kinds: dict[str, Any],
) -> None:
    folder: Path = kinds["folder"]
    assert len(tracker_rows(folder / "driver.jsonl")) == STEPS
    assert all(tracker_rows(path) == [] for path in folder.glob("worker*.jsonl"))
    reducer: RayReducer = kinds["reducer"]
    assert reducer.steps_logged == STEPS


def test_each_worker_keeps_its_tables_and_rollout_checkpoints_beside_its_raw_rows(
    kinds: dict[str, Any],
) -> None:
    """Before, a worker's ``log_samples``, ``log_trajectories`` and ``log_rollout_checkpoint``
    rows went nowhere (it opens no tracker), unsaid."""
    folder = kinds["folder"]
    for rank in range(WORLD):
        rows = read_jsonl(folder / f"rank{rank}.samples.jsonl")
        assert sorted(
            (row["step"], row["name"], row["sample"].get("prompt") or row["sample"]["sample_id"])
            for row in rows
        ) == [
            (step, name, value)
            for step in range(STEPS)
            for name, value in (("samples", f"p{rank}"), ("trajectories", f"s{rank}-{step}"))
        ]
        # Its rollout checkpoints (not merged) in its raw file, under their prefix.
        saved = [
            row["metrics"]["total_save_seconds"]
            for row in read_jsonl(folder / f"rank{rank}.jsonl")
            if row["prefix"] == "timing/rollout_checkpoint"
        ]
        assert saved == list(range(STEPS))


def test_the_straggler_series_name_the_slow_rank(kinds: dict[str, Any]) -> None:
    by_name = {
        p["name"]: p["value"]
        for p in kinds["points"]
        if p["attributes"].get("rl.ranks.phase") == "policy_time"
    }
    # The last step's (a gauge keeps its last value); the slow step's row names the rank.
    last = [values(r, STEPS - 1)["policy_time"] for r in range(WORLD)]
    assert by_name["rl.ranks.slowest"] == last.index(max(last))
    assert by_name["rl.ranks.duration.max"] == max(last)
    rows = tracker_rows(kinds["folder"] / "driver.jsonl")
    assert rows[SLOW_STEP]["metrics"]["policy_time/slowest_rank"] == SLOW_RANK
    assert rows[SLOW_STEP]["metrics"]["policy_time/rank_skew"] > 1.5 / 0.7
    # The driver's tee exported the run's value.
    reward = [p for p in kinds["points"] if p["name"] == "rl.reward.mean"]
    assert reward and reward[0]["value"] == rows[-1]["metrics"]["reward"]


def test_the_workers_raw_rows_and_loggers_name_the_drivers_run(kinds: dict[str, Any]) -> None:
    """A worker whose run id nobody gave takes the driver's, as a torch rank takes rank 0's:
    its raw rows belong to the run the driver's rows are in."""
    for rank in range(WORLD):
        rows = list(read_jsonl(kinds["folder"] / f"rank{rank}.jsonl"))
        assert rows and {row["run_id"] for row in rows} == {"ray-ranks"}
    assert kinds["worker_runs"] == ["ray-ranks"] * WORLD


def test_workers_that_export_their_own_values_leave_the_driver_s_merged_row_to_its_trackers(
    cluster: None, tmp_path: Path
) -> None:
    """``ray_rank(export_own=True)``: each worker exports its own series and the recording
    rules merge them by run id, so the driver's tee exporting the merged row beside them would
    count every worker twice (the sum of num_samples doubled); its trackers still get the
    row, as rank 0's do on torch.distributed."""
    with isolated_state(), in_memory_telemetry(run_id="ray-own") as (_handle, reader):
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / "driver.jsonl")}},
            ranks=ray_reducer(world_size=WORLD, late_after_s=CALL_S),
        )
        workers = [Worker.remote(str(tmp_path), rank, False, True) for rank in range(WORLD)]
        for step in range(2):
            ray.get(
                [w.step.remote(step, values(r, step)) for r, w in enumerate(workers)],
                timeout=CALL_S,
            )
        ray.get([w.finish.remote() for w in workers], timeout=CALL_S)
        logger.log_metrics({"driver_only": 1.0}, step=5, prefix="train")
        logger.finish()
        exported = {p.name for p in points(reader)}
    for worker in workers:
        ray.kill(worker)
    rows = tracker_rows(tmp_path / "driver.jsonl")
    # The driver's own row and the reducer's merged ones come from two threads: any order.
    assert sorted(row["step"] for row in rows) == [0, 1, 5]
    rows.sort(key=lambda row: row["step"])
    assert rows[0]["metrics"]["num_samples"] == sum(values(r, 0)["num_samples"] for r in range(3))
    merged_series = {"rl.train.samples", "rl.reward.mean", "rl.policy.loss", "rl.grad_norm"}
    assert not exported & merged_series, exported
    assert "rl.ranks.duration.max" in exported  # only the merge knows the straggler series


def test_ranks_ray_by_name_on_the_driver_and_in_the_workers(cluster: None, tmp_path: Path) -> None:
    """The entry point: the driver's ``ranks="ray"`` learns the world size from the workers,
    which take their rank and world size from ``RANK`` and ``WORLD_SIZE``."""
    with isolated_state():
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / "driver.jsonl")}}, ranks="ray"
        )
        assert isinstance(logger._ranks, RayReducer)
        workers = [
            Worker.options(runtime_env={"env_vars": {"RANK": str(rank), "WORLD_SIZE": "2"}}).remote(
                str(tmp_path), None, True
            )
            for rank in range(2)
        ]
        for step in range(2):
            ranks = ray.get(
                [w.step.remote(step, {"loss": float(r + step)}) for r, w in enumerate(workers)],
                timeout=CALL_S,
            )
            assert ranks == [0, 1]
        ray.get([w.efficiency.remote(2, 1.0 + r) for r, w in enumerate(workers)], timeout=CALL_S)
        ray.get([w.finish.remote() for w in workers], timeout=CALL_S)
        logger.finish()
    rows = tracker_rows(tmp_path / "driver.jsonl")
    assert [(row["step"], row["metrics"]["loss"]) for row in rows[:2]] == [(0, 0.5), (1, 1.5)]
    # The efficiency summary: a category's seconds are a straggler phase, as on torch.
    (efficiency,) = rows[2:]
    assert efficiency["step"] == 2
    assert efficiency["metrics"]["efficiency/train/policy_s"] == 2.0
    assert efficiency["metrics"]["efficiency/train/policy_s/slowest_rank"] == 1
    assert efficiency["metrics"]["efficiency/step_wall_time_s"] == 4.0
    assert sorted(p.name for p in tmp_path.glob("rlmetrics.rank*.jsonl")) == [
        "rlmetrics.rank0.jsonl",
        "rlmetrics.rank1.jsonl",
    ]
    for worker in workers:
        ray.kill(worker)


def test_a_worker_killed_mid_run_costs_one_bounded_wait_and_is_said_once(
    cluster: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    late_after_s = 3.0
    with caplog.at_level(logging.WARNING, logger="rlmetrics"), isolated_state():
        reducer = ray_reducer(world_size=WORLD, late_after_s=late_after_s)
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / "driver.jsonl")}}, ranks=reducer
        )
        workers = [Worker.remote(str(tmp_path), rank, False) for rank in range(WORLD)]
        ray.get([w.step.remote(0, values(r, 0)) for r, w in enumerate(workers)], timeout=CALL_S)
        ray.kill(workers[2])  # SIGKILL-like: no finish, no last push
        alive = workers[:2]
        for step in (1, 2):
            ray.get(
                [w.step.remote(step, values(r, step)) for r, w in enumerate(alive)],
                timeout=CALL_S,
            )
        # Logged while the run goes on, not only at finish: the wait for rank 2 is bounded.
        wait_until(lambda: reducer.steps_logged == STEPS, CALL_S, "the three steps logged")
        ray.get([w.finish.remote() for w in alive], timeout=CALL_S)
        logger.finish()
    rows = tracker_rows(tmp_path / "driver.jsonl")
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert rows[0]["metrics"]["num_samples"] == math.fsum(
        values(r, 0)["num_samples"] for r in range(WORLD)
    )
    for step in (1, 2):
        assert rows[step]["metrics"]["num_samples"] == math.fsum(
            values(r, step)["num_samples"] for r in range(2)
        )
    said = [r.getMessage() for r in caplog.records if "rank 2 did not report" in r.getMessage()]
    assert len(said) == 1, said
    assert "step 1" in said[0]
    for worker in alive:
        ray.kill(worker)


@ray.remote(num_cpus=0)
def rollout_task(step: int, folder: str) -> int:
    """A task per step, as RL rollouts often are: a Logger of its own that logs one step."""
    os.chdir(folder)
    logger = rlmetrics.Logger(backends={}, ranks="ray")
    logger.log_metrics({"loss": float(step)}, step=step, prefix="train")
    logger.finish()
    return int(logger._ranks.rank)  # type: ignore[union-attr]


def test_a_task_per_step_is_one_rank_and_no_step_waits_for_a_finished_one(
    cluster: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: each task's Logger took a new rank and a finished one stayed expected, so
    every later step waited late_after_s for tasks long gone, named as missing ranks."""
    with caplog.at_level(logging.WARNING, logger="rlmetrics"), isolated_state():
        reducer = ray_reducer(late_after_s=CALL_S)
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(tmp_path / "driver.jsonl")}}, ranks=reducer
        )
        ranks = [
            ray.get(rollout_task.remote(step, str(tmp_path)), timeout=CALL_S) for step in range(3)
        ]
        # Well within late_after_s: no step waits for a finished task.
        wait_until(lambda: reducer.steps_logged == 3, CALL_S / 2, "the three steps logged")
        logger.finish()
    assert ranks == [0, 0, 0]
    rows = tracker_rows(tmp_path / "driver.jsonl")
    assert [(row["step"], row["metrics"]["loss"]) for row in rows] == [(0, 0.0), (1, 1.0), (2, 2.0)]
    assert not [r for r in caplog.records if "did not report" in r.getMessage()]


def test_workers_that_inherit_one_rank_are_said_on_the_driver(
    cluster: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: workers that all read RANK=0 (the driver's own, which Ray passes on) joined as
    one rank; their rows overwrote each other's, and nothing said why."""
    with caplog.at_level(logging.WARNING, logger="rlmetrics"), isolated_state():
        reducer = ray_reducer(late_after_s=CALL_S)
        logger = rlmetrics.Logger(backends={}, ranks=reducer)
        env = {"env_vars": {"RANK": "0", "WORLD_SIZE": "2"}}
        workers = [Worker.options(runtime_env=env).remote(str(tmp_path), None, True) for _ in "ab"]
        ranks = ray.get([w.step.remote(0, {"loss": 1.0}) for w in workers], timeout=CALL_S)
        wait_until(
            lambda: any("two workers joined as rank 0" in r.getMessage() for r in caplog.records),
            CALL_S / 2,
            "the driver saying rank 0 was joined twice",
        )
        ray.get([w.finish.remote() for w in workers], timeout=CALL_S)
        logger.finish(timeout_s=5)
    assert ranks == [0, 0]
    (said,) = [r.getMessage() for r in caplog.records if "joined as rank 0" in r.getMessage()]
    assert "RANK" in said and "ray_rank(rank=" in said, said
    for worker in workers:
        ray.kill(worker)
