"""RLMetricsTrainCallback in a real Ray Train V2 run: a ``TorchTrainer`` with two CPU workers on
a one-node Ray cluster on 127.0.0.1 (the module starts it, as the cluster tests do), whose
reports the callback logs from the Train controller: read back from the JSONL file it writes
and from a real OTLP receiver its telemetry exports to, with the driver's run id.

Skipped where Ray Train or torch is missing (the SDK envs, the ray env: ``conftest.py``); the
tox env ``integrations`` runs them with ``RLMETRICS_REQUIRE_TRAINERS=1``, so a missing one
fails there.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from ray_support_cluster import RAY_ENV, RayHead, driver

os.environ.update(RAY_ENV)  # before Ray is imported: it reads them at import

from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from rlmetrics_ray.train import CONTROLLER_GROUP, FAILURE_PREFIX, RLMetricsTrainCallback

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.plugins import register
from rlmetrics.testing import OtlpReceiver, in_memory_telemetry, isolated_state

#: Starting Ray and a Train run's workers takes ~25 s on these machines.
RAY_WAIT_S = 120.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayHead]:
    """A one-node Ray cluster on 127.0.0.1 with this process connected as its driver."""
    with RayHead(num_cpus=2) as head, driver(head):
        yield head


def test_a_torch_trainer_reports_through_the_controller_with_the_drivers_run_id(
    cluster: RayHead, tmp_path: Path
) -> None:
    path = tmp_path / "metrics.jsonl"
    receiver = OtlpReceiver().start()

    # Defined here so cloudpickle ships it by value (the workers cannot import this file).
    def train_loop(config: dict[str, Any]) -> None:
        """Each worker reports three steps; rank 1's values differ from rank 0's."""
        import ray.train

        rank = ray.train.get_context().get_world_rank()
        for step in range(1, config["steps"] + 1):
            ray.train.report(
                {
                    "step": step,
                    "reward": step + 10.0 * rank,
                    "loss": 1.0 / step,
                    "kl_penalty": None if step == 2 else 0.5,  # a bad value: dropped alone
                    "note": f"rank{rank}",
                }
            )

    try:
        with isolated_state(), in_memory_telemetry(service_name="grpo", run_id="run-train"):
            callback = RLMetricsTrainCallback(
                backends={"jsonl": {"path": str(path)}},
                all_workers=True,
                telemetry={
                    "exporters": ["otlp"],
                    "otlp_endpoint": receiver.endpoint,
                    "export_interval_s": 0.5,
                },
            )
            trainer = TorchTrainer(
                train_loop,
                train_loop_config={"steps": 3, "lr": 0.01},
                scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                run_config=RunConfig(
                    name="rlmetrics-train",
                    storage_path=str(tmp_path / "storage"),
                    callbacks=[callback],
                ),
            )
            result = trainer.fit()
            assert result.error is None

        def last_reward(r: OtlpReceiver) -> dict[str, Any] | None:
            for resource, names in r.resources():
                if "rl.reward.mean" in names:
                    values = [p.value for p in r.points() if p.name == "rl.reward.mean"]
                    if values and values[-1] == 3.0:
                        return resource
            return None

        resource = receiver.wait_for(last_reward, RAY_WAIT_S, "the controller's last report")
    finally:
        receiver.close()

    rows = list(read_jsonl(path))
    train = [row for row in rows if row["prefix"] == "train"]
    # Rank 0's dict at the reported step, as the workers reported it.
    assert [(row["step"], row["metrics"]["reward"]) for row in train] == [
        (1, 1.0),
        (2, 2.0),
        (3, 3.0),
    ]
    assert [row["metrics"]["note"] for row in train] == ["rank0"] * 3
    assert train[1]["metrics"]["kl_penalty"] is None
    # Every worker's dict, for the backends.
    workers = {(row["prefix"], row["step"]): row["metrics"]["reward"] for row in rows}
    assert workers[("worker/1", 3)] == 13.0 and workers[("worker/0", 3)] == 3.0
    # The run's configuration, once.
    (config,) = [row for row in read_jsonl(path, every_row=True) if "hyperparams" in row]
    assert config["hyperparams"] == {"steps": 3, "lr": 0.01}
    # The controller's telemetry is part of the driver's run, from a process of its own.
    assert resource["rlmetrics.run.id"] == "run-train"
    assert resource["service.name"] == "grpo"
    assert resource["rl.worker_group"] == CONTROLLER_GROUP
    assert resource["process.pid"] != os.getpid()
    kl = [p.value for p in receiver.points() if p.name == "rl.kl.divergence"]
    assert kl and set(kl) == {0.5}  # step 2's None was dropped, not exported


def test_merged_ranks_are_one_row_per_report_computed_from_the_workers_raw_rows(
    cluster: RayHead, tmp_path: Path
) -> None:
    path, raw_path = tmp_path / "metrics.jsonl", tmp_path / "ranks.jsonl"

    def train_loop(config: dict[str, Any]) -> None:
        """Each worker trains a tiny model on data of its own for three steps and reports its
        loss beside numbers of its own."""
        import ray.train
        import torch

        rank = ray.train.get_context().get_world_rank()
        torch.manual_seed(rank)
        model = torch.nn.Linear(2, 1)
        optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(config["steps"]):
            loss = torch.nn.functional.mse_loss(model(torch.randn(4, 2)), torch.randn(4, 1))
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            ray.train.report(
                {
                    "step": step,
                    "num_samples": 8.0 + 4 * rank + step,
                    "reward": 0.5 + 0.1 * rank + 0.01 * step,
                    "loss_term": loss.item(),
                    "note": f"rank{rank}",
                }
            )

    with isolated_state():
        callback = RLMetricsTrainCallback(
            backends={"jsonl": {"path": str(path)}}, ranks=True, raw_path=str(raw_path)
        )
        result = TorchTrainer(
            train_loop,
            train_loop_config={"steps": 3},
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
            run_config=RunConfig(
                name="rlmetrics-ranks", storage_path=str(tmp_path / "storage"), callbacks=[callback]
            ),
        ).fit()
        assert result.error is None
    rows = list(read_jsonl(path))
    assert [row["step"] for row in rows] == [0, 1, 2]  # one row per report, not two
    raw: dict[tuple[int, int], dict[str, Any]] = {
        (row["rank"], row["step"]): row["metrics"] for row in read_jsonl(raw_path)
    }
    assert sorted(raw) == [(rank, step) for rank in (0, 1) for step in range(3)]
    for row in rows:
        step, merged = row["step"], row["metrics"]
        mine = [raw[(rank, step)] for rank in (0, 1)]
        weights = [m["num_samples"] for m in mine]
        assert merged["num_samples"] == math.fsum(weights)  # declared: sum
        assert merged["reward"] == math.fsum(  # declared: weighted by num_samples
            m["reward"] * w for m, w in zip(mine, weights, strict=True)
        ) / math.fsum(weights)
        assert merged["loss_term"] == math.fsum(m["loss_term"] for m in mine) / 2  # a mean
        assert merged["note"] == "rank0"  # not a number: rank 0's
    assert {row["run_id"] for row in read_jsonl(raw_path)} == {rows[0]["run_id"]}


def test_a_callback_never_fails_a_report(tmp_path: Path) -> None:
    callback = RLMetricsTrainCallback(backends={"jsonl": {"path": str(tmp_path / "m.jsonl")}})
    # What Ray passes, and what it must never raise on: an empty report, a worker's None.
    callback.after_report(None, [], None)
    callback.after_report(None, [None, {"step": 1}], None)  # type: ignore[list-item]
    callback.after_report(object(), [{"step": "x", "reward": object()}], None)
    rows = list(read_jsonl(tmp_path / "m.jsonl"))
    assert [row["step"] for row in rows] == [1, 2]  # no step key: the report count


def test_a_worker_failure_ray_retries_is_a_row_before_the_restarted_steps(
    cluster: RayHead, tmp_path: Path
) -> None:
    """Ray hands a ``UserCallback`` each failure (``after_exception``) before it retries the
    run (``max_failures=1``: the restarted workers report from step 1 again) or ends it.
    Before, the callback had no ``after_exception``: the rows showed step 1 again (or twice)
    with nothing between, and a run that failed for good just stopped. Now each failure is
    one row under ``ray_train/failure`` at the last reported step (0 before any), naming the
    ranks and the error."""
    path, marker = tmp_path / "metrics.jsonl", tmp_path / "failed-once"

    def train_loop(config: dict[str, Any]) -> None:
        """Rank 1 raises at step 2 of the first attempt only (the marker says it did)."""
        import ray.train

        rank = ray.train.get_context().get_world_rank()
        for step in range(1, 4):
            if step == 2 and rank == 1 and not os.path.exists(config["marker"]):
                open(config["marker"], "w").close()  # the marker: empty
                raise RuntimeError("worker 1 failed once")
            ray.train.report({"step": step, "reward": step + 10.0 * rank})

    with isolated_state():
        callback = RLMetricsTrainCallback(backends={"jsonl": {"path": str(path)}})
        result = TorchTrainer(
            train_loop,
            train_loop_config={"marker": str(marker)},
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
            run_config=RunConfig(
                name="rlmetrics-retry",
                storage_path=str(tmp_path / "storage"),
                callbacks=[callback],
                failure_config=FailureConfig(max_failures=1),
            ),
        ).fit()
        assert result.error is None  # the retry finished the run
    rows = [(row["prefix"], row["step"], row["metrics"]) for row in read_jsonl(path)]
    at = [prefix for prefix, _, _ in rows].index(FAILURE_PREFIX)
    # Step 1 of the first attempt is there when Ray took both workers' reports before rank
    # 1 failed (else Ray dropped it with the failed worker group); the failure is at it.
    before, after = rows[:at], rows[at + 1 :]
    assert [(prefix, step) for prefix, step, _ in before] in ([], [("train", 1)])
    assert rows[at][1] == len(before)
    assert [(prefix, step) for prefix, step, _ in after] == [("train", s) for s in (1, 2, 3)]
    failure = rows[at][2]
    assert failure["count"] == 1 and failure["workers"] == 1 and failure["ranks"] == "1"
    assert failure["error"].endswith("worker 1 failed once")


def test_a_failure_before_any_report_is_logged_with_the_configuration(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    callback = RLMetricsTrainCallback(backends={"jsonl": {"path": str(path)}})
    context = type("Context", (), {"train_loop_config": {"lr": 0.1}})()
    callback.after_exception(context, {})  # nothing failed: nothing logged
    callback.after_exception(context, {0: ValueError("bad\nsecond line"), 1: OSError()})
    every = list(read_jsonl(path, every_row=True))
    assert [row.get("hyperparams") for row in every if "hyperparams" in row] == [{"lr": 0.1}]
    (row,) = [row for row in every if row.get("prefix") == FAILURE_PREFIX]
    assert row["step"] == 0 and row["metrics"] == {
        "count": 1,
        "workers": 2,
        "ranks": "0,1",
        "error": "ValueError: bad",
    }


class _Outcome:
    """A tracker that keeps its rows and how its run ended (``finish(failed=)``)."""

    made: ClassVar[list[_Outcome]] = []

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.ended: list[bool] = []
        _Outcome.made.append(self)

    def log_metrics(self, metrics: dict[str, Any], step: int, prefix: str) -> None:
        self.steps.append(step)

    def finish(self, failed: bool = False) -> None:
        self.ended.append(failed)


class _OffersOutcome:
    @rlmetrics.hookimpl
    def register_backends(self, register: Any) -> None:
        register("outcome", _Outcome)


def _finished_run(error: BaseException | None) -> list[_Outcome]:
    """A callback that logged two reports, then the run's end as Ray's controller tells its
    controller callbacks (``after_controller_finish(result)``) through ``run_callbacks()``."""
    _Outcome.made.clear()
    with isolated_state():
        register(_OffersOutcome(), "offers-outcome")
        callback = RLMetricsTrainCallback(backends={"outcome": {}})
        callbacks = callback.run_callbacks()
        assert callbacks[0] is callback
        callback.after_report(None, [{"step": 1}], None)
        callback.after_report(None, [{"step": 2}], None)
        for end in callbacks[1:]:
            end.after_controller_finish(type("Result", (), {"error": error})())
    return list(_Outcome.made)


def test_the_run_s_end_finishes_the_controller_s_logger() -> None:
    """Before, nothing finished the controller's Logger (Ray kills the controller when the
    driver drops its handle): a queued tracker's last rows were lost and its run never
    ended. ``run_callbacks()`` adds a controller callback that finishes it as the run ends."""
    (tracker,) = _finished_run(None)
    assert tracker.steps == [1, 2]
    assert tracker.ended == [False]


def test_the_run_s_end_is_offered_as_a_controller_callback_ray_calls() -> None:
    from ray import cloudpickle  # what ships the controller's arguments
    from ray.train import UserCallback
    from ray.train.v2._internal.execution.callback import ControllerCallback

    callback = RLMetricsTrainCallback()
    callbacks = callback.run_callbacks()
    # Ray runs a UserCallback's report hooks only, and another callback's controller hooks.
    assert [isinstance(c, UserCallback) for c in callbacks] == [True, False]
    assert isinstance(callbacks[1], ControllerCallback)
    # Shipped together (one argument of the controller), the end finishes the same callback.
    shipped = cloudpickle.loads(cloudpickle.dumps(callbacks))
    assert shipped[1].callback is shipped[0]


def test_a_finished_run_s_end_in_a_real_controller(cluster: RayHead, tmp_path: Path) -> None:
    """In a real Ray Train run, the controller calls the end once the run is through."""
    marker = tmp_path / "ended.txt"

    def train_loop(config: dict[str, Any]) -> None:
        import ray.train

        for step in range(2):
            ray.train.report({"step": step, "reward": 1.0})

    class Marked(RLMetricsTrainCallback):  # shipped by value: says where its end ran
        def end_run(self, failed: bool) -> None:
            super().end_run(failed)
            Path(self.marker).write_text(f"{os.getpid()} {failed}")

    with isolated_state():
        callback = Marked(backends={"jsonl": {"path": str(tmp_path / "m.jsonl")}})
        callback.marker = str(marker)
        result = TorchTrainer(
            train_loop,
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
            run_config=RunConfig(
                name="rlmetrics-end",
                storage_path=str(tmp_path / "storage"),
                callbacks=callback.run_callbacks(),
            ),
        ).fit()
        assert result.error is None
    pid, failed = marker.read_text().split()
    assert int(pid) != os.getpid() and failed == "False"  # in the controller, not failed
    assert [row["step"] for row in read_jsonl(tmp_path / "m.jsonl")] == [0, 1]


def test_a_run_that_ended_with_an_error_is_finished_as_failed() -> None:
    """Before, a run Ray ended with an error (its retries spent) was never marked failed in
    the trackers that keep a run's outcome; its end now finishes the Logger ``failed``."""
    (tracker,) = _finished_run(RuntimeError("the workers failed for good"))
    assert tracker.steps == [1, 2]
    assert tracker.ended == [True]


def test_a_run_that_fails_for_good_ends_failed_in_a_real_controller(
    cluster: RayHead, tmp_path: Path
) -> None:
    """Ray calls the end of a run whose worker raised with no retry left too, with the error:
    the controller's Logger is finished as a failed run before ``fit()`` raises."""
    marker = tmp_path / "ended.txt"

    def train_loop(config: dict[str, Any]) -> None:
        import ray.train

        ray.train.report({"step": 0, "reward": 1.0})
        raise RuntimeError("the run fails for good")

    class Marked(RLMetricsTrainCallback):  # shipped by value: says how its end ran
        def end_run(self, failed: bool) -> None:
            super().end_run(failed)
            Path(self.marker).write_text(str(failed))

    with isolated_state():
        callback = Marked(backends={"jsonl": {"path": str(tmp_path / "m.jsonl")}})
        callback.marker = str(marker)
        trainer = TorchTrainer(
            train_loop,
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
            run_config=RunConfig(
                name="rlmetrics-failed",
                storage_path=str(tmp_path / "storage"),
                callbacks=callback.run_callbacks(),
                failure_config=FailureConfig(max_failures=0),
            ),
        )
        with pytest.raises(Exception, match="the run fails for good"):
            trainer.fit()
    assert marker.read_text() == "True"


def test_the_run_s_end_exports_the_controller_s_last_report(
    cluster: RayHead, tmp_path: Path
) -> None:
    """Before, telemetry started in the controller was left to the process's exit, which Ray's
    kill of the controller skips: the reports since the last periodic export (a minute here)
    never reached the collector. The run's end now shuts it down, exporting them."""
    receiver = OtlpReceiver().start()

    def train_loop(config: dict[str, Any]) -> None:
        import ray.train

        for step in range(3):
            ray.train.report({"step": step, "reward": 10.0 + step})

    try:
        with isolated_state(), in_memory_telemetry(service_name="grpo", run_id="run-end"):
            callback = RLMetricsTrainCallback(
                backends={"jsonl": {"path": str(tmp_path / "m.jsonl")}},
                telemetry={
                    "exporters": ["otlp"],
                    "otlp_endpoint": receiver.endpoint,
                    "export_interval_s": 60.0,
                },
            )
            result = TorchTrainer(
                train_loop,
                scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                run_config=RunConfig(
                    name="rlmetrics-export",
                    storage_path=str(tmp_path / "storage"),
                    callbacks=callback.run_callbacks(),
                ),
            ).fit()
            assert result.error is None
        # Exported before fit() returned: nothing later is awaited.
        rewards = [p.value for p in receiver.points() if p.name == "rl.reward.mean"]
    finally:
        receiver.close()
    assert rewards and rewards[-1] == 12.0
