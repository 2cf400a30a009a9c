"""What an offline W&B run could not write is counted and said, and the backend stops handing
W&B rows: its run folder deleted mid-run, its disk full (a tmpfs the test mounts and fills;
skipped where mounting is not permitted, CI runs as root). W&B's own process writes the run's
transaction log and says a failed write only in its debug-internal.log: 290 of 300 rows were
lost on a full disk without a word. Every row is in the transaction log, read back with
W&B's reader, or counted as failed (``rlmetrics.backend.failed``)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from rlmetrics_wandb.backend import MIN_FREE_BYTES
from wandb_helpers import read_run

import rlmetrics
from rlmetrics.events import STEP_KEY
from rlmetrics.testing import in_memory_telemetry, own_records, points, wait_until
from rlmetrics.testing.disks import fill, run_folder_fault

ROWS = 40


@pytest.mark.parametrize("how", ["deleted", "full"])
def test_rows_wandb_cannot_write_are_counted_and_it_stops_trying(
    how: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with run_folder_fault(tmp_path, how, "16m") as disk, in_memory_telemetry() as (_handle, reader):
        with caplog.at_level(logging.WARNING, logger="rlmetrics"):
            logger = rlmetrics.Logger(backends={"wandb": {"project": "p", "dir": disk / "wb"}})
            backend = logger.backends["wandb"]
            log = backend.transaction_log  # type: ignore[attr-defined]
            worker = logger._workers["wandb"]
            for step in range(ROWS):
                logger.log_metrics({"loss": float(step)}, step=step)
                if step == 9:
                    wait_until(lambda: worker.written == 10, 30, "the first ten rows handed over")
                    if how == "deleted":
                        shutil.rmtree(backend.run_dir)  # type: ignore[attr-defined]
                    else:
                        fill(disk, MIN_FREE_BYTES // 2)
            logger.finish(timeout_s=60)
        failed = [p.value for p in points(reader) if p.name == "rlmetrics.backend.failed"]
        on_disk = None if how == "deleted" else read_run(log).history
    assert (worker.written, worker.failed) == (10, ROWS - 10)
    assert failed == [ROWS - 10]
    if on_disk is not None:  # what W&B was handed reached its transaction log
        assert [(r[STEP_KEY], r["loss"]) for r in on_disk] == [(s, float(s)) for s in range(10)]
    (first,) = [r.getMessage() for r in caplog.records if "failed to log a step" in r.getMessage()]
    assert "BackendUnavailable" in first and "nothing more" in first
    assert ("is gone" if how == "deleted" else "bytes free") in first
    assert all(r.exc_info is None for r in own_records(caplog.records))
    assert f"{ROWS - 10} of {ROWS} rows failed to write" in caplog.text
