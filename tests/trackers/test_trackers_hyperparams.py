"""A second ``log_hyperparams`` adds its keys to the run's configuration in every tracker, a
nested section key by key (docs/trackers.md: "Call it again to add keys"), read back from
each real store."""

from __future__ import annotations

from typing import Any

from mlflow.tracking import MlflowClient
from swanlab_helpers import config as swanlab_config
from tensorboard_helpers import hparams
from wandb_helpers import read_run

import rlmetrics

FIRST = {"optimizer": {"lr": 1e-5, "betas": {"b1": 0.9}}, "seed": 1}
SECOND = {"optimizer": {"warmup": 10, "betas": {"b2": 0.99}}, "model": "tiny"}
MERGED = {
    "optimizer": {"lr": 1e-5, "betas": {"b1": 0.9, "b2": 0.99}, "warmup": 10},
    "seed": 1,
    "model": "tiny",
}
FLAT = {
    "optimizer/lr": 1e-5,
    "optimizer/betas/b1": 0.9,
    "optimizer/betas/b2": 0.99,
    "optimizer/warmup": 10,
    "seed": 1,
    "model": "tiny",
}


def _wandb_config(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's config as W&B builds it from its updates: each top-level key replaced whole."""
    out: dict[str, Any] = {}
    for record in records:
        if record["type"] == "config":
            out.update(record["config"]["update"])
    return out


def test_a_second_call_adds_to_a_nested_section_in_every_tracker(
    every_backend: dict[str, Any],
) -> None:
    logger = rlmetrics.Logger(backends=every_backend, run_id="hp-merge")
    logger.log_hyperparams(FIRST)
    logger.log_hyperparams(SECOND)
    logger.finish()
    backends = logger.backends

    assert _wandb_config(read_run(backends["wandb"].transaction_log).records) == MERGED
    assert swanlab_config(backends["swanlab"].run_dir) == MERGED
    params = MlflowClient(every_backend["mlflow"]["tracking_uri"]).get_run(
        backends["mlflow"].run_id
    )
    assert params.data.params == {k: str(v) for k, v in FLAT.items()}
    shown = hparams(backends["tensorboard"].log_dir)
    assert shown == {k: float(v) if isinstance(v, int) else v for k, v in FLAT.items()}
