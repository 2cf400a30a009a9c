"""The entry point, and isolation: a failing MLflow backend costs nobody else the step."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from mlflow_helpers import history, wait_for_history

import rlmetrics
from rlmetrics.backends import available_backends
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.plugins import get_plugins
from rlmetrics.testing import in_memory_telemetry, points, single


def test_the_entry_point_offers_the_mlflow_backend() -> None:
    owner, _factory = available_backends()["mlflow"]
    assert owner == "mlflow"
    assert get_plugins().info("mlflow").distribution  # type: ignore[union-attr] == "rlmetrics-mlflow"


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING and "'mlflow'" in r.getMessage() and text in r.getMessage()
    ]


def test_a_run_deleted_mid_training_is_isolated_and_reported_once(
    tracking_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(
            backends={
                "jsonl": {"path": tmp_path / "m.jsonl"},
                "mlflow": {"tracking_uri": tracking_uri, "experiment_name": "e"},
            }
        )
        run_id = logger.backends["mlflow"].run_id
        logger.log_metrics({"loss": 0.1}, step=1, prefix="train")
        # The backend writes on its own thread: step 1 must be in the store before the run goes.
        written = wait_for_history(MlflowClient(tracking_uri), run_id, "train/loss", [(1, 0.1)])
        assert written == [(1, 0.1)]
        # Someone deletes the run in the MLflow UI: every later write is refused.
        MlflowClient(tracking_uri).delete_run(run_id)
        for step in (2, 3, 4):
            logger.log_metrics({"loss": step / 10}, step=step, prefix="train")
        logger.finish()
        tee = single(points(reader), "rl.policy.loss")  # the core training family

    assert [row["step"] for row in read_jsonl(tmp_path / "m.jsonl")] == [1, 2, 3, 4]
    assert tee.value == pytest.approx(0.4)
    assert history(MlflowClient(tracking_uri), run_id, "train/loss") == [(1, 0.1)]
    (warning,) = _warnings(caplog, "failed to log a step")
    assert warning.exc_info is not None
    assert "active" in str(warning.exc_info[1])


@pytest.mark.parametrize("store", ["not a database", "sqlite:// (two slashes)"])
def test_a_store_that_cannot_be_opened_is_skipped_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, store: str
) -> None:
    """Before: each was printed with SQLAlchemy's traceback at WARNING, as a plugin's bug
    (``sqlite://mlflow.db``, SQLAlchemy's URL for a file written with two slashes, is the
    classic one); they are the store's conditions, said in one line with what to change."""
    monkeypatch.chdir(tmp_path)
    broken = tmp_path / "mlflow.db"
    broken.write_text("not a database " * 20)
    uri = f"sqlite:///{broken}" if store == "not a database" else "sqlite://mlflow.db"
    logger = rlmetrics.Logger(
        backends={"jsonl": {"path": tmp_path / "m.jsonl"}, "mlflow": {"tracking_uri": uri}}
    )
    logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
    logger.finish()

    assert "mlflow" not in logger.backends
    assert [row["metrics"] for row in read_jsonl(tmp_path / "m.jsonl")] == [{"loss": 1.0}]
    (warning,) = _warnings(caplog, "failed to start")
    assert warning.exc_info is None, warning.exc_info  # no traceback: a condition, not a bug
    said = warning.getMessage()
    assert f"the MLflow store at {uri} could not be opened" in said, said
    if store == "not a database":
        assert "file is not a database" in said, said
    else:
        assert "sqlite:///relative/path.db or sqlite:////absolute/path.db" in said, said
