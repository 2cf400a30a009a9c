"""Two Loggers of one run in one process (a trainer callback's and the script's own) share
the W&B and SwanLab run the first one started: the run is finished by the last of them to
finish, so the other's later rows land; read back from each real store."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from swanlab_helpers import records as swanlab_records
from swanlab_helpers import scalars as swanlab_scalars
from wandb_helpers import read_run

import rlmetrics


def test_the_run_two_loggers_share_is_finished_by_the_last_to_finish(
    every_backend: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # The first Logger's finish() finished the shared run: the second's later rows failed
    # ("Run is finished", "requires an active Run"), each with a traceback.
    backends = {name: every_backend[name] for name in ("wandb", "swanlab")}
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        trainer = rlmetrics.Logger(backends=backends, run_id="shared")
        script = rlmetrics.Logger(backends=backends, run_id="shared")
        trainer.log_metrics({"loss": 1.0}, step=1, prefix="train")
        trainer.finish()
        script.log_metrics({"accuracy": 0.5}, step=1, prefix="eval")
        script.finish()
    assert "failed" not in caplog.text

    wandb_run = script.backends["wandb"].run
    assert wandb_run is trainer.backends["wandb"].run
    log = read_run(script.backends["wandb"].transaction_log)
    assert [sorted(k for k in row if k != "rlmetrics/step") for row in log.history] == [
        ["train/loss"],
        ["eval/accuracy"],
    ]
    assert [r for r in log.records if r["type"] == "exit"]  # finished, once

    run_dir = script.backends["swanlab"].run_dir
    assert run_dir == trainer.backends["swanlab"].run_dir
    assert swanlab_scalars(run_dir, "train/loss") == [(1, 1.0)]
    assert swanlab_scalars(run_dir, "eval/accuracy") == [(1, 0.5)]
    assert [r for r in swanlab_records(run_dir) if "finish" in r]
