"""Hyperparameters, sample tables and resume, against real offline W&B runs read back from
their transaction logs (and, for a table, the table file W&B wrote)."""

from __future__ import annotations

import json
from pathlib import Path

from wandb_helpers import read_run

import rlmetrics
from rlmetrics.events import STEP_KEY
from rlmetrics.identity import RunIdentity
from rlmetrics.testing import reset_process_state


def _logger(tmp_path: Path, **options: object) -> rlmetrics.Logger:
    return rlmetrics.Logger(
        backends={"wandb": {"project": "rlmetrics-test", "dir": tmp_path / "wandb"}}, **options
    )


def test_hyperparams_become_the_run_config(tmp_path: Path) -> None:
    logger = _logger(tmp_path)
    backend = logger.backends["wandb"]
    logger.log_hyperparams({"lr": 1e-6, "model": {"name": "qwen", "layers": [28]}})
    logger.log_hyperparams({"lr": 2e-6})  # a later value replaces the earlier one
    logger.finish()

    updates = [
        r["config"]["update"]
        for r in read_run(backend.transaction_log).records
        if r["type"] == "config"
    ]
    assert updates == [{"lr": 1e-6, "model": {"name": "qwen", "layers": [28]}}, {"lr": 2e-6}]


def test_samples_become_a_table_at_the_trainer_step(tmp_path: Path) -> None:
    logger = _logger(tmp_path)
    backend = logger.backends["wandb"]
    logger.log_samples(
        [
            {"reward": 1.0, "prompt": "2+2?", "completion": "4"},
            {"prompt": "1+1?", "completion": "3", "reward": 0.0, "judge": "wrong"},
        ],
        step=7,
    )
    logger.finish()

    log = read_run(backend.transaction_log)
    (row,) = log.history
    assert row[STEP_KEY] == 7 and row["samples._type"] == "table-file"
    assert log.metrics["samples"]["step_metric"] == STEP_KEY
    table = json.loads((backend.run_dir / "files" / row["samples.path"]).read_text())
    assert table == {
        "columns": ["prompt", "completion", "reward", "judge"],
        "data": [["2+2?", "4", 1.0, None], ["1+1?", "3", 0.0, "wrong"]],
    }


def test_the_run_id_is_the_wandb_run_id_and_a_resumed_run_continues_it(tmp_path: Path) -> None:
    first = _logger(tmp_path, run_id="grpo:7")
    for step in range(1, 11):
        first.log_metrics({"loss": float(step)}, step=step, prefix="train")
    first.finish()
    resumed = _logger(tmp_path, run_id="grpo:7", resume=True)
    for step in range(11, 21):
        resumed.log_metrics({"loss": float(step)}, step=step, prefix="train")
    resumed.finish()

    logs = [read_run(lg.backends["wandb"].transaction_log) for lg in (first, resumed)]
    expected_id = RunIdentity("grpo:7").tracker_id("/\\#?%:")
    assert [log.run["run_id"] for log in logs] == [expected_id, expected_id]
    steps = [[row[STEP_KEY] for row in log.history] for log in logs]
    assert steps == [list(range(1, 11)), list(range(11, 21))]
    assert resumed.backends["wandb"].run.settings.resume == "allow"


def test_a_run_an_earlier_test_left_running_is_finished_by_the_state_reset(
    tmp_path: Path,
) -> None:
    """A Logger never finished (or whose finish ran out of time) leaves W&B's active run set,
    and W&B's default reinit policy hands that run to the next ``wandb.init``: the next test's
    backend then logs into the earlier test's run (its sample table beside the other's rows).
    The process-state reset between tests finishes the runs the backend started."""
    earlier = _logger(tmp_path / "earlier")
    earlier.log_metrics({"loss": 1.0}, step=1, prefix="train")
    reset_process_state()  # what isolated_state() runs between two tests
    logger = _logger(tmp_path / "next")
    backend = logger.backends["wandb"]
    assert backend.run is not earlier.backends["wandb"].run
    logger.log_metrics({"loss": 2.0}, step=5, prefix="train")
    logger.finish()
    earlier.finish()  # its run is finished already: nothing more to do
    assert [row[STEP_KEY] for row in read_run(backend.transaction_log).history] == [5]
