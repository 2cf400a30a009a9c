"""MlflowBackend against a real sqlite tracking store, read back with MlflowClient."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from mlflow.entities import Metric, RunStatus
from mlflow.tracking import MlflowClient
from mlflow_helpers import history
from rlmetrics_mlflow import MlflowBackend, mlflow_key

from rlmetrics.events import WALL_TIME_KEY


def test_metrics_land_with_the_trainer_step_even_when_it_goes_back(tracking_uri: str) -> None:
    backend = MlflowBackend(tracking_uri=tracking_uri, experiment_name="grpo")
    for step, loss in [(5, 0.5), (3, 0.3), (7, 0.7)]:
        backend.log_metrics({"loss": loss, "reward": float(step)}, step, "train")
    backend.finish()

    client = MlflowClient(tracking_uri)
    assert history(client, backend.run_id, "train/loss") == [(3, 0.3), (5, 0.5), (7, 0.7)]
    assert history(client, backend.run_id, "train/reward") == [(3, 3.0), (5, 5.0), (7, 7.0)]
    run = client.get_run(backend.run_id)
    assert run.info.status == RunStatus.to_string(RunStatus.FINISHED)
    assert client.get_experiment(run.info.experiment_id).name == "grpo"


def test_one_batch_per_logged_dict(tracking_uri: str) -> None:
    backend = MlflowBackend(tracking_uri=tracking_uri)
    calls: list[int] = []
    log_batch = backend.client.log_batch

    # A spy around the real call: counts requests, still writes to the store.
    def counting_log_batch(run_id: str, metrics: Sequence[Metric] = (), **kwargs: Any) -> None:
        calls.append(len(metrics))
        log_batch(run_id, metrics=metrics, **kwargs)

    backend.client.log_batch = counting_log_batch  # type: ignore[method-assign]
    backend.log_metrics({f"k{i}": float(i) for i in range(20)}, 1, "train")
    backend.log_metrics({f"k{i}": float(i) for i in range(1500)}, 2, "big")
    backend.finish()

    # MLflow takes at most 1000 metrics per request: 1500 keys need two.
    assert calls == [20, 1000, 500]
    client = MlflowClient(tracking_uri)
    metrics = client.get_run(backend.run_id).data.metrics
    assert len(metrics) == 1520 and metrics["big/k1499"] == 1499.0
    # Every metric of one dict shares the dict's timestamp.
    assert (
        len(
            {m.timestamp for m in client.get_metric_history(backend.run_id, "train/k0")}
            | {m.timestamp for m in client.get_metric_history(backend.run_id, "train/k19")}
        )
        == 1
    )


def test_values_mlflow_cannot_store_are_mapped_or_skipped(
    tracking_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    backend = MlflowBackend(tracking_uri=tracking_uri)
    for step in (1, 2):
        backend.log_metrics(
            {
                "nan": math.nan,
                "inf": math.inf,
                "flag": True,
                "note": "hello",
                "none": None,
                "rewards": [0.0, 1.0, 1.0, 0.0, 1.0],
                "rewards/mean": 99.0,
            },
            step,
            "train",
        )
    backend.finish()

    client = MlflowClient(tracking_uri)
    names = client.get_run(backend.run_id).data.metrics
    got = {name: history(client, backend.run_id, name) for name in names}
    assert math.isnan(got.pop("train/nan")[0][1])
    assert got == {
        "train/inf": [(1, 1.7976931348623157e308), (2, 1.7976931348623157e308)],
        "train/flag": [(1, 1.0), (2, 1.0)],
        "train/rewards/mean": [(1, 99.0), (2, 99.0)],  # the logged key wins over the summary
        "train/rewards/p50": [(1, 1.0), (2, 1.0)],
        "train/rewards/p90": [(1, 1.0), (2, 1.0)],
        "train/rewards/max": [(1, 1.0), (2, 1.0)],
    }
    skipped = [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING and "'train/note'" in r.getMessage()
    ]
    assert len(skipped) == 1 and "a string" in skipped[0].getMessage()


def test_keys_mlflow_refuses_are_renamed_without_collisions(tracking_uri: str) -> None:
    backend = MlflowBackend(tracking_uri=tracking_uri)
    backend.log_metrics({"acc@1": 0.5, "acc#1": 0.6, "acc_1": 0.7, "a b:c": 1.0}, 1, "eval")
    backend.log_metrics({"x": 3.0, WALL_TIME_KEY: 1_700_000_000.0}, 0, "rollout/throughput")
    backend.finish()

    client = MlflowClient(tracking_uri)
    assert history(client, backend.run_id, mlflow_key("eval/acc@1")) == [(1, 0.5)]
    assert history(client, backend.run_id, mlflow_key("eval/acc#1")) == [(1, 0.6)]
    assert history(client, backend.run_id, "eval/acc_1") == [(1, 0.7)]
    assert history(client, backend.run_id, "eval/a b:c") == [(1, 1.0)]
    # Axis keys stay unprefixed; a rollout stream's step is its own sample index.
    assert history(client, backend.run_id, "rollout/throughput/x") == [(0, 3.0)]
    assert history(client, backend.run_id, WALL_TIME_KEY) == [(0, 1_700_000_000.0)]


def test_params_and_tags_are_logged_once_at_start(tracking_uri: str) -> None:
    backend = MlflowBackend(
        tracking_uri=tracking_uri,
        experiment_name="e",
        run_name="run-3",
        tags={"team": "rl", "bad key?": 1},
        params={"lr": 1e-6, "model": {"name": "qwen", "layers": 28}, "opt@": None},
    )
    backend.log_metrics({"loss": 1.0}, 1, "train")
    backend.finish()

    run = MlflowClient(tracking_uri).get_run(backend.run_id)
    assert run.info.run_name == "run-3"
    assert run.data.params == {
        "lr": "1e-06",
        "model/name": "qwen",
        "model/layers": "28",
        mlflow_key("opt@"): "None",
    }
    assert run.data.tags["team"] == "rl"
    assert run.data.tags[mlflow_key("bad key?")] == "1"


def test_tracking_uri_experiment_and_run_come_from_the_environment(
    tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "from-env")
    first = MlflowBackend()
    first.log_metrics({"loss": 1.0}, 1, "train")
    first.finish()
    # Resume the same run (a restarted job), as MLFLOW_RUN_ID says.
    monkeypatch.setenv("MLFLOW_RUN_ID", first.run_id)
    resumed = MlflowBackend(tags={"resumed": "yes"})
    resumed.log_metrics({"loss": 0.5}, 2, "train")
    resumed.finish()

    client = MlflowClient(tracking_uri)
    assert resumed.run_id == first.run_id and resumed.tracking_uri == tracking_uri
    assert history(client, first.run_id, "train/loss") == [(1, 1.0), (2, 0.5)]
    run = client.get_run(first.run_id)
    assert client.get_experiment(run.info.experiment_id).name == "from-env"
    assert run.data.tags["resumed"] == "yes"


def test_finish_is_idempotent(tracking_uri: str) -> None:
    backend = MlflowBackend(tracking_uri=tracking_uri)
    backend.finish()
    backend.finish()
    run = MlflowClient(tracking_uri).get_run(backend.run_id)
    assert run.info.status == RunStatus.to_string(RunStatus.FINISHED)


def test_a_store_that_is_not_a_database_fails_at_construction(tmp_path: Path) -> None:
    # (A sqlite path MLflow cannot open at all, such as a directory, fails too, but only
    # after MLflow's own ten connection retries: about 100 s.)
    db = tmp_path / "mlflow.db"
    db.write_text("not a database " * 20)
    with pytest.raises(Exception, match="file is not a database"):
        MlflowBackend(tracking_uri=f"sqlite:///{db}")


def test_odd_steps_fall_back_to_the_previous_step(tracking_uri: str) -> None:
    backend = MlflowBackend(tracking_uri=tracking_uri)
    backend.log_metrics({"loss": 1.0}, 4, "train")
    backend.log_metrics({"loss": 2.0}, 6.0, "train")  # type: ignore[arg-type]
    backend.log_metrics({"loss": 3.0}, None, "train")  # type: ignore[arg-type]
    backend.finish()

    client = MlflowClient(tracking_uri)
    assert history(client, backend.run_id, "train/loss") == [(4, 1.0), (6, 2.0), (6, 3.0)]


def test_a_backlog_goes_in_few_requests_and_a_failed_one_costs_no_row(
    tracking_uri: str,
) -> None:
    # One log_batch per logged dict, each a sqlite transaction of tens of milliseconds on a
    # loaded machine: a loop logging 10^4 quick steps left 9638 of them unwritten when
    # finish()'s 30 s were up.
    import threading

    import rlmetrics

    logger = rlmetrics.Logger(
        backends={"mlflow": {"tracking_uri": tracking_uri, "experiment_name": "fast"}},
        run_id="fast",
    )
    backend = logger.backends["mlflow"]
    gate = threading.Event()
    calls: list[int] = []
    log_batch = backend.client.log_batch

    # A spy around the real call: the first request waits until every row is queued, and the
    # third fails once (the store locked for a moment).
    def spying_log_batch(run_id: str, metrics: Sequence[Metric] = (), **kwargs: Any) -> None:
        calls.append(len(metrics))
        gate.wait(60)
        if len(calls) == 3:
            raise RuntimeError("database is locked")
        log_batch(run_id, metrics=metrics, **kwargs)

    backend.client.log_batch = spying_log_batch  # type: ignore[method-assign]
    for step in range(40):
        logger.log_metrics({f"k{i}": float(step) for i in range(300)}, step, "wide")
    for step in range(400):
        logger.log_metrics({"loss": float(step), "kl": 0.1}, step, "train")
    gate.set()
    logger.finish(timeout_s=300)

    client = MlflowClient(tracking_uri)
    for key in ("wide/k0", "wide/k299"):
        assert history(client, backend.run_id, key) == [(s, float(s)) for s in range(40)]
    assert history(client, backend.run_id, "train/loss") == [(s, float(s)) for s in range(400)]
    # Whole dicts per request, at most MLflow's 1000 metrics: three dicts of 300.
    assert max(calls) <= 1000 and 900 in calls, calls
    assert len(calls) < 60, calls
