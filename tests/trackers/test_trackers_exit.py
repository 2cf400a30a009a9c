"""A script that logs three steps to TensorBoard and MLflow and exits without
``Logger.finish()`` leaves every step in both, however it exits: the end of the script,
``sys.exit``, an uncaught exception, a SIGTERM that a Python handler turns into ``SystemExit``.
Each case is a real child process; its stores are read back with TensorBoard's
``EventAccumulator`` and MLflow's client."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from mlflow_helpers import history
from tensorboard_helpers import scalars

from rlmetrics.testing import run_to_exit

#: A child process that hangs is killed after this; no assertion reads the time.
CHILD_BOUND_S = 240

_SCRIPT = """
import logging, signal, sys, time
import rlmetrics

logging.basicConfig(level=logging.WARNING, format="%(message)s")
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
how, root, uri = sys.argv[1:4]
logger = rlmetrics.Logger(
    backends={
        "tensorboard": {"root_dir": root},
        "mlflow": {"tracking_uri": uri, "experiment_name": "exit"},
    },
    run_id="exit-run",
    # What is asked is that every row arrives, not how fast: the default 10 s exit bound can
    # pass while MLflow opens its store on a host busy with other suites.
    exit_timeout_s=120,
)
for step in range(3):
    logger.log_metrics({"loss": float(step)}, step=step, prefix="train")
if how == "exit":
    sys.exit(3)
if how == "raise":
    raise RuntimeError("the loop died")
if how == "sigterm":
    print("ready", flush=True)
    # Still training when the signal comes: a loop's main thread runs, so the handler runs
    # however the kernel hands the signal on. A wait for ever (an Event's) would leave it
    # unrun when the kernel hands it to a tracker's thread: the child hung to its kill.
    while True:
        time.sleep(0.01)
"""

EXITS = {"end": 0, "exit": 3, "raise": 1, "sigterm": 143}


@pytest.mark.parametrize("how", sorted(EXITS))
def test_every_step_reaches_tensorboard_and_mlflow_without_finish(
    how: str, migrated_store: Path, tmp_path: Path
) -> None:
    db = tmp_path / "mlflow.db"
    shutil.copyfile(migrated_store, db)
    uri = f"sqlite:///{db}"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    args = (how, str(tmp_path / "runs"), uri)
    status, err = run_to_exit(
        _SCRIPT, args, sigterm_when_ready=how == "sigterm", env=env, timeout_s=CHILD_BOUND_S
    )
    assert status == EXITS[how], err
    expected = [(0, 0.0), (1, 1.0), (2, 2.0)]
    assert scalars(tmp_path / "runs" / "exit-run", "train/loss") == expected, err
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("exit").experiment_id])
    assert history(client, run.info.run_id, "train/loss") == expected, err
    # An uncaught exception, sys.exit(3) and a SIGTERM handler's sys.exit(143) are a failed
    # run (test_trackers_failed_run.py); only the script's end is a finished one.
    assert run.info.status == ("FINISHED" if how == "end" else "FAILED"), err
    assert "not written" not in err, err
