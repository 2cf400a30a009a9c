"""A run stopped after step 10 and resumed with the same id continues in every tracker: the
same W&B run id, the same MLflow run, the same TensorBoard folder, the same JSONL (with a
resume marker) and SwanLab id; steps 11-20 follow with nothing repeated, and the report of
the JSONL is one run of 20 steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient
from mlflow_helpers import history
from tensorboard_helpers import scalars
from wandb_helpers import read_run

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.events import STEP_KEY
from rlmetrics.report.runs import read_reports
from rlmetrics.testing import in_memory_telemetry


def _train(backends: dict[str, Any], steps: range, resume: bool) -> rlmetrics.Logger:
    with in_memory_telemetry(run_id="grpo-7b", resume=resume) as (handle, _reader):
        logger = rlmetrics.Logger(backends=backends)
        if not resume:
            logger.log_hyperparams({"lr": 1e-6, "model": {"name": "qwen"}})
        for step in steps:
            logger.log_metrics({"loss": step / 4}, step=step, prefix="train")
        logger.finish()
        assert handle.run_id == logger.identity.run_id == "grpo-7b"
    return logger


def test_a_resumed_run_continues_in_every_tracker(
    tmp_path: Path, every_backend: dict[str, Any]
) -> None:
    first = _train(every_backend, range(1, 11), resume=False)
    second = _train(every_backend, range(11, 21), resume=True)
    both = (first.backends, second.backends)

    wandb_logs = [read_run(b["wandb"].transaction_log) for b in both]
    assert [log.run["run_id"] for log in wandb_logs] == ["grpo-7b", "grpo-7b"]
    assert [row[STEP_KEY] for log in wandb_logs for row in log.history] == list(range(1, 21))

    mlflow_ids = {b["mlflow"].run_id for b in both}
    (run_id,) = mlflow_ids
    client = MlflowClient(every_backend["mlflow"]["tracking_uri"])
    assert history(client, run_id, "train/loss") == [(s, s / 4) for s in range(1, 21)]
    assert client.get_run(run_id).data.params == {"lr": "1e-06", "model/name": "qwen"}

    assert {b["tensorboard"].log_dir for b in both} == {tmp_path / "runs" / "grpo-7b"}
    assert scalars(tmp_path / "runs" / "grpo-7b", "train/loss") == [
        (s, s / 4) for s in range(1, 21)
    ]

    assert [b["swanlab"].run.id for b in both] == ["grpo-7b", "grpo-7b"]

    rows = list(read_jsonl(tmp_path / "metrics.jsonl", every_row=True))
    assert {row["run_id"] for row in rows} == {"grpo-7b"}
    assert [row.get("kind") for row in rows].count("resume") == 1
    (report,) = read_reports(tmp_path / "metrics.jsonl")
    assert report.run_id == "grpo-7b" and report.resumed == 1
    assert [s["step"] for s in report.steps] == list(range(1, 21))
    assert report.repeated_steps == ()


def test_a_run_started_again_without_resume_is_a_new_attempt_no_tracker_interleaves(
    tmp_path: Path, every_backend: dict[str, Any]
) -> None:
    backends = {k: every_backend[k] for k in ("mlflow", "tensorboard")}
    first = _train(backends, range(1, 6), resume=False)
    again = _train(backends, range(1, 4), resume=False)  # rerun from scratch, same id
    resumed = _train(backends, range(4, 6), resume=True)

    # TensorBoard: the folder starts over at the new attempt's first step.
    assert scalars(tmp_path / "runs" / "grpo-7b", "train/loss") == [(s, s / 4) for s in range(1, 6)]
    assert len([r for r in (tmp_path / "runs" / "grpo-7b").glob("events.out.tfevents.*")]) == 3
    # MLflow: a run per attempt, both tagged; resume=True continued the newest.
    client = MlflowClient(every_backend["mlflow"]["tracking_uri"])
    runs = client.search_runs(
        [client.get_experiment_by_name("grpo").experiment_id],
        "tags.`rlmetrics.run.id` = 'grpo-7b'",
    )
    assert len(runs) == 2
    assert first.backends["mlflow"].run_id != again.backends["mlflow"].run_id
    assert resumed.backends["mlflow"].run_id == again.backends["mlflow"].run_id
    assert history(client, first.backends["mlflow"].run_id, "train/loss") == [
        (s, s / 4) for s in range(1, 6)
    ]
    assert history(client, again.backends["mlflow"].run_id, "train/loss") == [
        (s, s / 4) for s in range(1, 6)
    ]
