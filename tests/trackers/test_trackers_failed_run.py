"""A run that ends with an exception is marked failed in each tracker that has the notion (W&B
exit code 1, MLflow FAILED, SwanLab crashed), whether a Logger used as a context manager sees
the exception leave its block or the interpreter exits on an uncaught one; a run that ends
well stays finished. Read back from each real store."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient
from swanlab_helpers import records as swanlab_records
from wandb_helpers import read_run

import rlmetrics
from rlmetrics.testing import run_to_exit


def _states(logger: rlmetrics.Logger, uri: str) -> tuple[int, str, str]:
    """W&B's exit code, MLflow's status, SwanLab's finish state."""
    backends = logger.backends
    records = read_run(backends["wandb"].transaction_log).records
    (exit_record,) = [r["exit"] for r in records if r["type"] == "exit"]
    status = MlflowClient(uri).get_run(backends["mlflow"].run_id).info.status
    (finish,) = [r["finish"] for r in swanlab_records(backends["swanlab"].run_dir) if "finish" in r]
    return exit_record.get("exit_code", 0), status, finish["state"]


@pytest.mark.parametrize("fails", [True, False], ids=["raises", "ends-well"])
def test_a_logger_block_left_by_an_exception_marks_the_run_failed(
    every_backend: dict[str, Any], fails: bool
) -> None:
    # The trackers were told the run finished well: W&B "Finished", MLflow FINISHED, SwanLab
    # finished, for a training loop that died.
    backends = {k: every_backend[k] for k in ("wandb", "mlflow", "swanlab")}
    expected = pytest.raises(RuntimeError) if fails else contextlib.nullcontext()
    with expected, rlmetrics.Logger(backends=backends, run_id="fails") as logger:
        logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
        if fails:
            raise RuntimeError("the loop died")
    uri = every_backend["mlflow"]["tracking_uri"]
    if fails:
        assert _states(logger, uri) == (1, "FAILED", "RUN_STATE_CRASHED")
    else:
        assert _states(logger, uri) == (0, "FINISHED", "RUN_STATE_FINISHED")


_SCRIPT = """
import sys
import rlmetrics

root, uri = sys.argv[1:3]
logger = rlmetrics.Logger(
    backends={"mlflow": {"tracking_uri": uri, "experiment_name": "exit"}},
    run_id="dies",
    exit_timeout_s=120,
)
logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
raise RuntimeError("the loop died")
"""


def test_an_uncaught_exception_at_exit_marks_the_run_failed(
    migrated_store: Path, tmp_path: Path
) -> None:
    db = tmp_path / "mlflow.db"
    shutil.copyfile(migrated_store, db)
    uri = f"sqlite:///{db}"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    status, err = run_to_exit(_SCRIPT, (str(tmp_path), uri), env=env, timeout_s=240)
    assert status == 1, err
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("exit").experiment_id])
    assert run.info.status == "FAILED", err


_EXIT_SCRIPT = """
import sys
import rlmetrics

root, uri = sys.argv[1:3]
logger = rlmetrics.Logger(
    backends={
        "wandb": {"project": "exit", "dir": f"{root}/wandb", "mode": "offline"},
        "mlflow": {"tracking_uri": uri, "experiment_name": "exit"},
        "swanlab": {"project": "exit", "mode": "offline", "log_dir": f"{root}/swanlog"},
    },
    run_id="exits",
    exit_timeout_s=120,
)
logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
if sys.argv[3] == "caught":
    # A wrapper's try: main() except SystemExit: the job goes on and ends well.
    try:
        sys.exit(3)
    except SystemExit:
        pass
    logger.log_metrics({"loss": 0.5}, step=2, prefix="train")
elif sys.argv[3] == "caught-in-asyncio":
    # The same around asyncio.run: its task holds the SystemExit to the end of the process.
    import asyncio

    async def main():
        sys.exit(3)

    try:
        asyncio.run(main())
    except SystemExit:
        pass
else:
    sys.exit(3)  # e.g. no checkpoint written: the job script says so with its status
"""


@pytest.mark.parametrize("how", ["exits", "caught", "caught-in-asyncio"])
def test_a_failing_sys_exit_at_exit_marks_the_run_failed_in_every_tracker(
    migrated_store: Path, tmp_path: Path, how: str
) -> None:
    # W&B showed the run Finished (exit code 0), MLflow FINISHED, SwanLab finished, for a
    # process that exited with status 3. And a sys.exit(3) the script caught and went on
    # from marked a run that ended well (status 0) as failed; caught around asyncio.run, it
    # still did (the task held it to the exit).
    db = tmp_path / "mlflow.db"
    shutil.copyfile(migrated_store, db)
    uri = f"sqlite:///{db}"
    status, err = run_to_exit(
        _EXIT_SCRIPT, (str(tmp_path), uri, how), env=os.environ, timeout_s=240
    )
    failed = how == "exits"
    assert status == (3 if failed else 0), err
    (transaction_log,) = (tmp_path / "wandb").glob("wandb/offline-run-*/run-exits.wandb")
    records = read_run(transaction_log).records
    (exit_record,) = [r["exit"] for r in records if r["type"] == "exit"]
    assert exit_record.get("exit_code", 0) == (1 if failed else 0), err
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("exit").experiment_id])
    assert run.info.status == ("FAILED" if failed else "FINISHED"), err
    (run_dir,) = (tmp_path / "swanlog").glob("run-*")
    (finish,) = [r["finish"] for r in swanlab_records(run_dir) if "finish" in r]
    assert finish["state"] == ("RUN_STATE_CRASHED" if failed else "RUN_STATE_FINISHED"), err


@pytest.mark.parametrize("failed", [True, False], ids=["failed", "default"])
def test_finish_failed_marks_the_run_failed_in_every_tracker(
    every_backend: dict[str, Any], failed: bool
) -> None:
    # A SIGTERM handler's Logger.finish() (the troubleshooting page's advice) could only
    # finish the runs as successful: a preempted run showed Finished everywhere.
    backends = {k: every_backend[k] for k in ("wandb", "mlflow", "swanlab")}
    logger = rlmetrics.Logger(backends=backends, run_id="preempted")
    logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
    logger.finish(failed=failed)
    uri = every_backend["mlflow"]["tracking_uri"]
    if failed:
        assert _states(logger, uri) == (1, "FAILED", "RUN_STATE_CRASHED")
    else:
        assert _states(logger, uri) == (0, "FINISHED", "RUN_STATE_FINISHED")


_SIGTERM_SCRIPT = """
import signal, sys, time
import rlmetrics

root, uri = sys.argv[1:3]
logger = rlmetrics.Logger(
    backends={
        "wandb": {"project": "exit", "dir": f"{root}/wandb", "mode": "offline"},
        "mlflow": {"tracking_uri": uri, "experiment_name": "exit"},
    },
    run_id="preempted",
    finish_timeout_s=120,
)


def on_sigterm(signum, frame):
    logger.finish(failed=True)  # as docs/troubleshooting.md writes it
    sys.exit(143)


signal.signal(signal.SIGTERM, on_sigterm)
step = 0
logger.log_metrics({"loss": 1.0}, step=step, prefix="train")
print("ready", flush=True)
while True:
    step += 1
    logger.log_metrics({"loss": 1.0}, step=step, prefix="train")
    time.sleep(0.01)
"""


def test_a_sigterm_handler_that_finishes_the_logger_as_failed_marks_the_run_failed(
    migrated_store: Path, tmp_path: Path
) -> None:
    db = tmp_path / "mlflow.db"
    shutil.copyfile(migrated_store, db)
    uri = f"sqlite:///{db}"
    status, err = run_to_exit(
        _SIGTERM_SCRIPT,
        (str(tmp_path), uri),
        sigterm_when_ready=True,
        env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"},
        timeout_s=240,
    )
    assert status == 143, err
    (transaction_log,) = (tmp_path / "wandb").glob("wandb/offline-run-*/run-preempted.wandb")
    (exit_record,) = [r["exit"] for r in read_run(transaction_log).records if r["type"] == "exit"]
    assert exit_record.get("exit_code", 0) == 1, err
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("exit").experiment_id])
    assert run.info.status == "FAILED", err
