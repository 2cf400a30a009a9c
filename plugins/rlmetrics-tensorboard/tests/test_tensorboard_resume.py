"""A resumed run's restart marker goes at its first trainer step, whatever it logs first:
TensorBoard's reader hides every point an earlier file of the folder has at or after the
marker's step, in every tag."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from tensorboard_helpers import hparams, scalars

import rlmetrics
from rlmetrics.events import CheckpointRestore


def _setup_timing(logger: rlmetrics.Logger) -> None:
    logger.log_setup_timing({"total_setup_time_s": 12.5})


def _recovery(logger: rlmetrics.Logger) -> None:
    logger.log_rollout_checkpoint(
        CheckpointRestore(values={"total_restore_seconds": 3.0}, wall_time_s=1_700_000_000.0)
    )


@pytest.mark.parametrize("first", [_setup_timing, _recovery], ids=["setup-timing", "recovery"])
def test_what_a_resumed_job_logs_before_its_first_step_hides_none_of_the_earlier_run(
    tmp_path: Path, first: Callable[[rlmetrics.Logger], None]
) -> None:
    # A restarted job logs its setup timing (step 0) or its rollout recovery (the stream's
    # own sample index, 0 in a new process) before its first trainer step: the marker went at
    # step 0 and TensorBoard hid the whole earlier run.
    backends = {"tensorboard": {"root_dir": tmp_path}}
    before = rlmetrics.Logger(backends=backends, run_id="r")
    first(before)
    for step in range(1, 13):  # dies after step 12; its last checkpoint was step 10
        before.log_metrics({"loss": float(step)}, step=step, prefix="train")
    before.finish()
    resumed = rlmetrics.Logger(backends=backends, run_id="r", resume=True)
    first(resumed)
    for step in range(11, 15):
        resumed.log_metrics({"loss": step + 0.5}, step=step, prefix="train")
    resumed.finish()

    assert scalars(tmp_path / "r", "train/loss") == [
        *((s, float(s)) for s in range(1, 11)),
        *((s, s + 0.5) for s in range(11, 15)),
    ]


def test_a_run_started_again_without_resume_starts_its_folder_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A script run again with the same run id and no resume=True (a requeued job, a rerun
    # after a fix): TensorBoard read both processes' files of the folder as one run, the
    # rerun's points interleaved with the earlier run's (0..4, then 0..2 again).
    backends = {"tensorboard": {"root_dir": tmp_path}}
    with rlmetrics.Logger(backends=backends, run_id="r") as first:
        for step in range(5):
            first.log_metrics({"loss": float(step)}, step=step, prefix="train")
    assert "started again" not in caplog.text
    with rlmetrics.Logger(backends=backends, run_id="r") as again:
        for step in range(3):
            again.log_metrics({"loss": 10.0 * step}, step=step, prefix="train")

    assert scalars(tmp_path / "r", "train/loss") == [(0, 0.0), (1, 10.0), (2, 20.0)]
    said = [r.getMessage() for r in caplog.records if "started again" in r.getMessage()]
    assert len(said) == 1 and "resume=True" in said[0], caplog.text


@pytest.mark.parametrize("resume", [True, False], ids=["resumed", "started-again"])
def test_the_hparams_dashboard_shows_the_latest_process_configuration(
    tmp_path: Path, resume: bool
) -> None:
    # Each process wrote a session of its own into <run>/hparams, and TensorBoard shows the
    # first session of a folder: a job resumed with a lowered learning rate (or a rerun with a
    # new configuration) still showed the first process's.
    backends = {"tensorboard": {"root_dir": tmp_path}}
    with rlmetrics.Logger(backends=backends, run_id="r") as first:
        first.log_hyperparams({"lr": 1e-6, "steps": 100, "seed": 1})
        first.log_metrics({"loss": 1.0}, step=1, prefix="train")
    with rlmetrics.Logger(backends=backends, run_id="r", resume=resume) as later:
        later.log_hyperparams({"lr": 5e-7, "steps": 200})
        later.log_metrics({"loss": 1.0}, step=2, prefix="train")

    # Resumed, the run keeps the keys only its first process logged; started again, the
    # configuration is the new attempt's.
    expected = {"lr": 5e-7, "steps": 200.0, **({"seed": 1.0} if resume else {})}
    assert hparams(tmp_path / "r") == expected
    assert len(list((tmp_path / "r" / "hparams").iterdir())) == 1


def test_a_second_logger_of_the_run_in_the_process_hides_none_of_the_first_s_points(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A trainer callback's Logger and the script's own evaluation Logger, made once the first
    # had written: the second took the first's events for an earlier process's, wrote a
    # restart marker at its first step, and TensorBoard hid train/loss from step 2 on.
    from rlmetrics_tensorboard import TensorBoardBackend

    from rlmetrics.identity import RunIdentity

    folder = tmp_path / "tb"
    trainer = TensorBoardBackend(log_dir=folder, identity=RunIdentity("grpo-1"))
    for step in range(5):
        trainer.log_metrics({"loss": float(step)}, step, "train")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        evaluation = TensorBoardBackend(log_dir=folder, identity=RunIdentity("grpo-1"))
    evaluation.log_metrics({"accuracy": 0.5}, 2, "eval")
    trainer.log_metrics({"loss": 5.0}, 5, "train")
    evaluation.finish()
    trainer.finish()

    assert scalars(folder, "train/loss") == [(s, float(s)) for s in range(6)]
    assert scalars(folder, "eval/accuracy") == [(2, 0.5)]
    assert "earlier process" not in caplog.text


def test_two_loggers_of_the_run_in_the_process_share_its_one_hparams_session(
    tmp_path: Path,
) -> None:
    # Each backend rewrote a session of its own keys and removed the other's (or left two,
    # of which TensorBoard shows the first): one Logger's configuration was lost.
    from rlmetrics_tensorboard import TensorBoardBackend

    from rlmetrics.identity import RunIdentity

    folder = tmp_path / "tb"
    trainer = TensorBoardBackend(log_dir=folder, identity=RunIdentity("grpo-1"))
    script = TensorBoardBackend(log_dir=folder, identity=RunIdentity("grpo-1"))
    trainer.log_hyperparams({"lr": 1e-6})
    script.log_hyperparams({"seed": 3})
    trainer.log_hyperparams({"lr": 2e-6})
    trainer.finish()
    script.finish()

    assert hparams(folder) == {"lr": 2e-6, "seed": 3.0}
    assert len(list((folder / "hparams").iterdir())) == 1
