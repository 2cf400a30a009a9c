"""Bad input with every tracker configured: each is said clearly, nothing else is lost, and
the queued trackers write on their own threads (what the loop hands over is plain and
bounded before it leaves the call)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from swanlab_helpers import config as swanlab_config
from tensorboard_helpers import hparams, texts
from wandb_helpers import read_run

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl, samples_path
from rlmetrics.hyperparams import MAX_HYPERPARAMS
from rlmetrics.samples import MAX_CELL_BYTES


class Unserialisable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __str__(self) -> str:
        return "<unserialisable>"


def test_bad_configs_and_samples_cost_only_themselves(
    tmp_path: Path, every_backend: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # MLflow's sqlite store takes tens of seconds for 10**4 params on a loaded machine (on the
    # backend's own thread): finish waits for it, so the metric after them is in the store too.
    logger = rlmetrics.Logger(backends=every_backend, finish_timeout_s=600)
    loop = threading.current_thread()
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger.log_hyperparams(
            {
                "lr": 1e-6,
                "odd": Unserialisable(),
                "lock": threading.Lock(),
                "bad key?": 1,
                **{f"many/{i}": i for i in range(10**5)},
            }
        )
        logger.log_samples("not rows", step=1)  # type: ignore[arg-type]
        logger.log_samples([{"prompt": "p", "completion": "x" * 10_000_000, "reward": 1.0}], step=2)
        logger.log_metrics({"loss": 0.5}, step=2, prefix="train")
    assert loop is threading.current_thread()
    logger.finish()

    said = caplog.text
    assert "hyperparameter 'odd' is an Unserialisable" in said
    assert f"more than {MAX_HYPERPARAMS} values" in said
    assert "log_samples takes a list of dicts" in said
    assert f"held more than {MAX_CELL_BYTES} bytes" in said
    assert "is logged to MLflow as" in said

    # JSONL: the configuration (capped), the metrics, the cut sample.
    (params,) = [
        r["hyperparams"]
        for r in read_jsonl(tmp_path / "metrics.jsonl", every_row=True)
        if r.get("kind")
    ]
    assert params["lr"] == 1e-6 and params["odd"] == "<unserialisable>"
    assert [r["metrics"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [{"loss": 0.5}]
    (sample,) = read_jsonl(samples_path(tmp_path / "metrics.jsonl"))
    assert len(sample["sample"]["completion"]) == MAX_CELL_BYTES and sample["step"] == 2

    backends = logger.backends
    config = [
        r["config"]["update"]
        for r in read_run(backends["wandb"].transaction_log).records
        if r["type"] == "config"
    ]
    assert config[0]["lr"] == 1e-6 and len(config[0]) == MAX_HYPERPARAMS
    assert [
        row["train/loss"]
        for row in read_run(backends["wandb"].transaction_log).history
        if "train/loss" in row
    ] == [0.5]

    run = MlflowClient(every_backend["mlflow"]["tracking_uri"]).get_run(backends["mlflow"].run_id)
    assert len(run.data.params) == MAX_HYPERPARAMS and run.data.metrics == {"train/loss": 0.5}

    tb = backends["tensorboard"].log_dir
    assert hparams(tb)["odd"] == "<unserialisable>"
    ((step, table),) = texts(tb, "samples")
    assert step == 2 and len(table) < MAX_CELL_BYTES + 200

    swan = swanlab_config(backends["swanlab"].run_dir)
    assert swan["lr"] == 1e-6 and swan["odd"] == "<unserialisable>" and len(swan) == MAX_HYPERPARAMS
