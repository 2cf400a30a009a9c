"""What SwanLab could not write is counted and said, and the backend stops handing it rows at
once: its run folder deleted mid-run, its disk full (a tmpfs the test mounts and fills;
skipped where mounting is not permitted, CI runs as root). Every row is either in the run's
record log, read back with SwanLab's own reader, or counted as failed
(``rlmetrics.backend.failed``)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from rlmetrics_swanlab.backend import MIN_FREE_BYTES
from swanlab_helpers import scalars

import rlmetrics
from rlmetrics.testing import in_memory_telemetry, own_records, points, wait_until
from rlmetrics.testing.disks import fill, run_folder_fault

ROWS = 40


@pytest.mark.parametrize("how", ["deleted", "full"])
def test_rows_swanlab_cannot_write_are_counted_and_it_stops_trying(
    how: str, tmp_path: Path, swanlab_config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with run_folder_fault(tmp_path, how, "8m") as disk, in_memory_telemetry() as (_handle, reader):
        config = {**swanlab_config, "log_dir": disk / "swanlog"}
        with caplog.at_level(logging.WARNING, logger="rlmetrics"):
            logger = rlmetrics.Logger(backends={"swanlab": config})
            run_dir = logger.backends["swanlab"].run_dir  # type: ignore[attr-defined]
            worker = logger._workers["swanlab"]
            for step in range(ROWS):
                logger.log_metrics({"loss": float(step)}, step=step)
                if step == 9:
                    wait_until(lambda: worker.written == 10, 30, "the first ten rows handed over")
                    if how == "deleted":
                        shutil.rmtree(run_dir)
                    else:
                        fill(disk, MIN_FREE_BYTES // 2)
            logger.finish(timeout_s=60)
        failed = [p.value for p in points(reader) if p.name == "rlmetrics.backend.failed"]
        on_disk = None if how == "deleted" else scalars(run_dir, "loss")
    assert (worker.written, worker.failed) == (10, ROWS - 10)
    assert failed == [ROWS - 10]
    if on_disk is not None:  # what SwanLab was handed reached its record log
        assert on_disk == [(step, float(step)) for step in range(10)]
    (first,) = [r.getMessage() for r in caplog.records if "failed to log a step" in r.getMessage()]
    assert "BackendUnavailable" in first and "nothing more" in first
    assert ("is gone" if how == "deleted" else "bytes free") in first
    assert all(r.exc_info is None for r in own_records(caplog.records))
    assert f"{ROWS - 10} of {ROWS} rows failed to write" in caplog.text
    assert "did not finish within" not in caplog.text
