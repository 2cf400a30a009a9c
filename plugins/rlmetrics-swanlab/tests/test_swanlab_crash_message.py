"""SwanLab's crashed state carries an error text: it says how the run failed (the exception
nothing caught, the failing exit status, or a run finished as failed), read back from the
offline run's record log."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from swanlab_helpers import records, scalars

import rlmetrics
from rlmetrics.testing import run_to_exit


def _finish(run_dir: Path) -> dict[str, Any]:
    (finish,) = [r["finish"] for r in records(run_dir) if "finish" in r]
    return finish


def test_a_run_finished_as_failed_says_so(swanlab_config: dict[str, Any]) -> None:
    # A SIGTERM handler's Logger.finish(failed=True) (docs/troubleshooting.md) was told
    # "the training loop ended with an exception": nothing raised.
    logger = rlmetrics.Logger(backends={"swanlab": swanlab_config}, run_id="told")
    logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
    logger.finish(failed=True)
    finish = _finish(logger.backends["swanlab"].run_dir)
    assert finish["state"] == "RUN_STATE_CRASHED"
    assert "ended with an exception" not in finish["error"], finish
    assert finish["error"].startswith("the run was finished as failed"), finish


@pytest.mark.parametrize(
    ("error", "state", "said"),
    [
        (RuntimeError("the loop died"), "RUN_STATE_CRASHED", "RuntimeError: the loop died"),
        (KeyboardInterrupt(), "RUN_STATE_ABORTED", "KeyboardInterrupt"),
    ],
    ids=["raise", "interrupt"],
)
def test_a_logger_block_left_by_an_exception_says_which(
    swanlab_config: dict[str, Any], error: BaseException, state: str, said: str
) -> None:
    # The with block's own exception never reached SwanLab: its error read "the run was
    # finished as failed (Logger.finish(failed=True), or an exception that left the Logger's
    # with block)", and a Ctrl-C leaving the block was "crashed", not SwanLab's "aborted".
    logger = rlmetrics.Logger(backends={"swanlab": swanlab_config}, run_id="left")
    with pytest.raises(type(error)), logger:
        logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
        raise error
    finish = _finish(logger.backends["swanlab"].run_dir)
    assert finish["state"] == state, finish
    assert said in finish["error"] and "Traceback" in finish["error"], finish


_SCRIPT = """
import sys
import rlmetrics
import swanlab

how, root = sys.argv[1:3]
settings = swanlab.Settings(
    terminal={"proxy_type": "none"},
    probe={"monitor": False, "hardware": False, "git": False, "requirements": False},
)
logger = rlmetrics.Logger(
    backends={"swanlab": {"project": "exit", "mode": "offline", "log_dir": f"{root}/swanlog",
                          "init_kwargs": {"settings": settings}}},
    run_id="exits",
    exit_timeout_s=120,
)
logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
logger.log_metrics({"loss": 0.5}, step=2, prefix="train")
if how == "exit":
    sys.exit(3)
if how == "interrupt":
    raise KeyboardInterrupt
raise RuntimeError("the loop died")
"""


@pytest.mark.parametrize(
    ("how", "status", "error"),
    [
        ("exit", 3, "the process exited with status 3"),
        ("raise", 1, "RuntimeError: the loop died"),
    ],
)
def test_a_run_ended_at_exit_says_how(how: str, status: int, error: str, tmp_path: Path) -> None:
    # sys.exit(3) was told "the training loop ended with an exception". On an exception
    # nothing caught, SwanLab's own excepthook finished the run before the exit wrote the
    # rows still queued: the last steps were lost ("1 of 1 rows failed to write").
    env = {**os.environ, "SWANLAB_MODE": "offline", "DO_NOT_TRACK": "1"}
    code, err = run_to_exit(_SCRIPT, (how, str(tmp_path)), env=env, timeout_s=240)
    assert code == status, err
    (run_dir,) = (tmp_path / "swanlog").glob("run-*")
    finish = _finish(run_dir)
    assert finish["state"] == "RUN_STATE_CRASHED", err
    assert error in finish["error"], (finish, err)
    assert scalars(run_dir, "train/loss") == [(1, 1.0), (2, 0.5)], err
    assert "rows failed to write" not in err and "rows not written" not in err, err


def test_an_interrupt_at_exit_is_an_aborted_run_with_its_rows(tmp_path: Path) -> None:
    # Ctrl-C (a KeyboardInterrupt nothing caught) stays SwanLab's "aborted", rows written.
    env = {**os.environ, "SWANLAB_MODE": "offline", "DO_NOT_TRACK": "1"}
    code, err = run_to_exit(_SCRIPT, ("interrupt", str(tmp_path)), env=env, timeout_s=240)
    assert code != 0, err
    (run_dir,) = (tmp_path / "swanlog").glob("run-*")
    assert _finish(run_dir)["state"] == "RUN_STATE_ABORTED", err
    assert scalars(run_dir, "train/loss") == [(1, 1.0), (2, 0.5)], err
