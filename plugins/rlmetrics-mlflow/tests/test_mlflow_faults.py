"""A full disk under MLflow's sqlite store (a tmpfs the test mounts and fills; skipped where
mounting is not permitted, CI runs as root): said once, in one line, and every later row
counted as failed at once. Every request failed with "database or disk is full", and MLflow
logged each one as an ERROR with its traceback: 300 rows printed about 600 tracebacks."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from mlflow_helpers import history
from rlmetrics_mlflow.backend import MIN_FREE_BYTES

import rlmetrics
from rlmetrics.testing import in_memory_telemetry, own_records, points, wait_until
from rlmetrics.testing.disks import fill, run_folder_fault

ROWS = 40


def test_rows_a_full_sqlite_store_cannot_take_are_counted_and_said_once(
    migrated_store: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    with run_folder_fault(tmp_path, "full") as disk, in_memory_telemetry() as (_handle, reader):
        shutil.copyfile(migrated_store, disk / "mlflow.db")
        uri = f"sqlite:///{disk / 'mlflow.db'}"
        config = {"tracking_uri": uri, "artifact_location": (disk / "artifacts").as_uri()}
        with caplog.at_level(logging.WARNING, logger="rlmetrics"):
            logger = rlmetrics.Logger(backends={"mlflow": config})
            run_id = logger.backends["mlflow"].run_id  # type: ignore[attr-defined]
            worker = logger._workers["mlflow"]
            for step in range(ROWS):
                logger.log_metrics({"loss": float(step)}, step=step)
                if step == 9:
                    wait_until(lambda: worker.written == 10, 30, "the first ten rows written")
                    fill(disk, MIN_FREE_BYTES // 2)
            logger.finish(timeout_s=60)
            err = capfd.readouterr().err
        failed = [p.value for p in points(reader) if p.name == "rlmetrics.backend.failed"]
        landed = history(MlflowClient(uri), run_id, "loss")
    assert (worker.written, worker.failed) == (10, ROWS - 10)
    assert failed == [ROWS - 10]
    assert landed == [(step, float(step)) for step in range(10)]
    (first,) = [r.getMessage() for r in caplog.records if "failed to log a step" in r.getMessage()]
    assert "BackendUnavailable" in first and "bytes free" in first and "nothing more" in first
    assert all(r.exc_info is None for r in own_records(caplog.records))
    assert "Traceback" not in err
    assert f"{ROWS - 10} of {ROWS} rows failed to write" in caplog.text
