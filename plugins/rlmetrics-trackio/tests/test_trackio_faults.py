"""A full disk under Trackio's local store (a tmpfs the test mounts and fills; skipped where
mounting is not permitted, CI runs as root): said once, in one line, and every later row
counted as failed at once. Trackio writes its store later, on its own thread, and said only
that a batch "could not be persisted" while rlmetrics counted every row written. Trackio reads
``TRACKIO_DIR`` once, at import, so the run is a process of its own, its store on the tmpfs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rlmetrics.testing.disks import run_folder_fault

ROWS = 40

_SCRIPT = """
import json, logging, sys
import rlmetrics
from rlmetrics.testing import wait_until
from rlmetrics.testing.disks import fill
from rlmetrics_trackio.backend import MIN_FREE_BYTES
from trackio.sqlite_storage import SQLiteStorage

messages = []
handler = logging.Handler()
handler.emit = lambda record: messages.append(record.getMessage())
logging.getLogger("rlmetrics").addHandler(handler)
disk = sys.argv[1]
logger = rlmetrics.Logger(run_id="full", backends={"trackio": {"project": "p"}})
worker = logger._workers["trackio"]
for step in range(40):
    logger.log_metrics({"loss": float(step)}, step=step)
    if step == 9:
        wait_until(lambda: worker.written == 10, 30, "the first ten rows handed over")
        fill(__import__("pathlib").Path(disk), MIN_FREE_BYTES // 2)
logger.finish(timeout_s=60)
steps = [row["step"] for row in SQLiteStorage.get_logs("p", "full")]
print(json.dumps({"written": worker.written, "failed": worker.failed, "steps": steps,
                  "messages": messages}))
"""


def test_rows_a_full_trackio_store_cannot_take_are_counted_and_said_once(tmp_path: Path) -> None:
    with run_folder_fault(tmp_path, "full", "64m") as disk:
        env = {**os.environ, "TRACKIO_DIR": str(disk / "trackio"), "DO_NOT_TRACK": "1"}
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT, str(disk)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert (out["written"], out["failed"]) == (10, ROWS - 10)
    assert out["steps"] == list(range(10))  # what Trackio was handed reached its store
    (first,) = [m for m in out["messages"] if "failed to log a step" in m]
    assert "BackendUnavailable" in first and "bytes free" in first and "nothing more" in first
    assert f"{ROWS - 10} of {ROWS} rows failed to write" in "\n".join(out["messages"])
