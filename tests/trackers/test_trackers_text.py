"""A logged key or text value holding a lone surrogate (text decoded from bytes that are not
UTF-8 with ``surrogateescape``: a file name, a subprocess's output) costs only itself in every
tracker, as it does in hyperparameters and sample tables; read back from each real store."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from swanlab_helpers import scalars as swanlab_scalars
from swanlab_helpers import texts as swanlab_texts
from tensorboard_helpers import scalars, texts
from wandb_helpers import read_run

import rlmetrics
from rlmetrics.testing import own_records


def test_a_lone_surrogate_in_a_key_or_a_value_costs_no_row(
    every_backend: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # TensorBoard lost both rows (protobuf refused the text: UnicodeEncodeError, counted as
    # failed with a traceback), W&B the one with the key (its define_metric refused it) and
    # SwanLab the key (an ERROR line of its own).
    logger = rlmetrics.Logger(backends=every_backend, run_id="surrogates")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger.log_metrics({"note": "bad \udcff byte", "loss": 1.0}, step=1, prefix="train")
        logger.log_metrics({"k\udcffey": 2.0, "loss": 2.0}, step=2, prefix="train")
        logger.finish()
    backends = logger.backends

    expected = [(1, 1.0), (2, 2.0)]
    assert scalars(backends["tensorboard"].log_dir, "train/loss") == expected
    assert texts(backends["tensorboard"].log_dir, "train/note") == [(1, "bad \\udcff byte")]
    assert scalars(backends["tensorboard"].log_dir, "train/k\\udcffey") == [(2, 2.0)]
    history = read_run(backends["wandb"].transaction_log).history
    assert [row["train/loss"] for row in history] == [1.0, 2.0]
    assert history[1]["train/k\\udcffey"] == 2.0
    assert swanlab_scalars(backends["swanlab"].run_dir, "train/k\\udcffey") == [(2, 2.0)]
    assert [t for _, t, _ in swanlab_texts(backends["swanlab"].run_dir, "train/note")] == [
        "bad \\udcff byte"
    ]
    client = MlflowClient(every_backend["mlflow"]["tracking_uri"])
    points = client.get_metric_history(backends["mlflow"].run_id, "train/loss")
    assert [m.value for m in points] == [1.0, 2.0]
    assert "failed" not in caplog.text
    said = [r.getMessage() for r in own_records(caplog.records) if "surrogate" in r.getMessage()]
    assert len(said) == 1, said
