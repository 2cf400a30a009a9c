"""What TensorBoard cannot write is counted and said, and the backend stops trying at once: a
log folder deleted mid-run, a full disk (a 64 KB tmpfs the test mounts; skipped where mounting
is not permitted, CI runs as root). Every row is either in the event file, read back with
TensorBoard's own reader, or counted as failed (``rlmetrics.backend.failed``)."""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from tensorboard_helpers import scalars

import rlmetrics
from rlmetrics.testing import in_memory_telemetry, points, wait_until
from rlmetrics.testing.disks import MountRefused, small_tmpfs

ROWS = 200
#: Text per row: 200 rows of it are about 200 KB, three times the 64 KB disk.
TEXT = "x" * 1000


@contextlib.contextmanager
def _disk(tmp_path: Path, how: str) -> Iterator[Path]:
    if how == "deleted":
        yield tmp_path
        return
    try:
        with small_tmpfs(tmp_path / "disk") as disk:
            yield disk
    except MountRefused as refused:
        pytest.skip(str(refused))


@pytest.mark.parametrize("how", ["deleted", "full"])
def test_rows_tensorboard_cannot_write_are_counted_and_it_stops_trying(
    how: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with _disk(tmp_path, how) as disk, in_memory_telemetry() as (_handle, reader):
        log_dir = disk / "run"
        with caplog.at_level(logging.WARNING, logger="rlmetrics"):
            logger = rlmetrics.Logger(backends={"tensorboard": {"log_dir": log_dir}})
            worker = logger._workers["tensorboard"]
            for step in range(ROWS):
                logger.log_metrics({"loss": float(step), "note": TEXT}, step=step)
                if how == "deleted" and step == 9:
                    wait_until(lambda: worker.written == 10, 30, "the first ten rows written")
                    shutil.rmtree(log_dir)
            logger.finish(timeout_s=60)
        failed = [p.value for p in points(reader) if p.name == "rlmetrics.backend.failed"]
        on_disk = [] if how == "deleted" else scalars(log_dir, "loss")
    assert worker.failed >= 1 and worker.written + worker.failed == ROWS
    assert failed == [worker.failed]
    # What reached the file is exactly the rows not counted as failed, in order.
    if how == "full":
        assert on_disk == [(step, float(step)) for step in range(worker.written)]
    else:
        assert worker.written == 10  # every row after the folder went is counted
    warnings = [r.getMessage() for r in caplog.records]
    assert all(r.exc_info is None for r in caplog.records), caplog.text
    (first,) = [w for w in warnings if "failed to log a step" in w]
    assert "BackendUnavailable" in first and "writes nothing more" in first
    assert ("deleted" if how == "deleted" else "No space left on device") in first
    assert f"{worker.failed} of {ROWS} rows failed to write" in caplog.text
    assert "did not finish within" not in caplog.text
