"""Bad input with every tracker configured: each is said clearly, nothing else is lost, and
the queued trackers write on their own threads (what the loop hands over is plain and
bounded before it leaves the call)."""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from swanlab_helpers import config as swanlab_config
from swanlab_helpers import texts as swanlab_texts
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
        if r.get("kind") == "hyperparams"
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


def test_one_bad_hyperparameter_or_sample_cell_costs_only_itself_in_every_tracker(
    tmp_path: Path, every_backend: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    np = pytest.importorskip("numpy")
    logger = rlmetrics.Logger(backends=every_backend, finish_timeout_s=120)
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger.log_hyperparams(
            {
                "lr": 1e-6,
                "seed": 2**64,  # past int64: TensorBoard's hparams refused the whole session
                "huge": 10**5000,  # no str(): MLflow lost every param of the call
                "note\ud800": "a\udcffb",  # a lone surrogate: no UTF-8 store takes it
                "weights": np.arange(10**5),  # one value, not 10**5 of the cap
                "after": 7,
            }
        )
        logger.log_samples(
            [
                {"prompt": "p\ud800", "completion": 10**5000, "reward": 1.0, "judge": 1},
                {"prompt": "q", "completion": "fine", "reward": 2.0, "judge": "wrong"},
            ],
            step=2,
            name="rollouts",
        )
    logger.finish()
    backends = logger.backends
    escaped = {"note\\ud800": "a\\udcffb", "huge": "<int of 5001 digits>"}

    (params,) = [
        r["hyperparams"]
        for r in read_jsonl(tmp_path / "metrics.jsonl", every_row=True)
        if r.get("kind") == "hyperparams"
    ]
    assert params == {
        "lr": 1e-6,
        "seed": 2**64,
        **escaped,
        "weights": list(range(MAX_HYPERPARAMS)),
        "after": 7,
    }
    rows = [r["sample"] for r in read_jsonl(samples_path(tmp_path / "metrics.jsonl"))]
    assert [r["prompt"] for r in rows] == ["p\\ud800", "q"]
    assert rows[0]["completion"] == "<int of 5001 digits>"

    (config,) = [
        r["config"]["update"]
        for r in read_run(backends["wandb"].transaction_log).records
        if r["type"] == "config"
    ]
    assert config["lr"] == 1e-6 and config["after"] == 7 and config["seed"] == str(2**64)
    assert {k: config[k] for k in escaped} == escaped
    history = read_run(backends["wandb"].transaction_log).history
    (table_row,) = [row for row in history if "rollouts.path" in row]
    table = json.loads(
        (backends["wandb"].run_dir / "files" / table_row["rollouts.path"]).read_text()
    )
    assert [row[0] for row in table["data"]] == ["p\\ud800", "q"]

    client = MlflowClient(every_backend["mlflow"]["tracking_uri"])
    run = client.get_run(backends["mlflow"].run_id)
    assert run.data.params["lr"] == "1e-06" and run.data.params["after"] == "7"
    assert run.data.params["seed"] == str(2**64) and run.data.params["huge"] == escaped["huge"]
    path = client.download_artifacts(run.info.run_id, "rollouts/step_2.json", str(tmp_path))
    assert [row[0] for row in json.loads(Path(path).read_text())["data"]] == ["p\\ud800", "q"]

    tb = backends["tensorboard"].log_dir
    shown = hparams(tb)
    assert shown["lr"] == 1e-6 and shown["after"] == 7 and shown["seed"] == str(2**64)
    ((step, markdown),) = texts(tb, "rollouts")
    assert step == 2 and "| p\\\\ud800 |" in markdown and "| q | fine |" in markdown

    run_dir = backends["swanlab"].run_dir
    swan = swanlab_config(run_dir)
    assert swan["lr"] == 1e-6 and swan["after"] == 7 and swan["huge"] == escaped["huge"]
    assert [text.split("\n")[0] for _, text, _ in swanlab_texts(run_dir, "rollouts")] == [
        "prompt: p\\ud800",
        "prompt: q",
    ]
    replaced = [r for r in caplog.records if "UTF-8 cannot hold" in r.getMessage()]
    assert len(replaced) == 2  # once for the configuration, once for the table
