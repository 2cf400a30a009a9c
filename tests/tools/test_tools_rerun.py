"""A run started again under its id without ``resume=True`` (a rerun after a fix, a requeued
job that does not resume) is a new attempt, which the JSONL backend marks with a ``rerun`` row:
``rlmetrics report``, ``query`` (and the MCP server's ``run_state``) read the last attempt, as
each tracker keeps the attempts apart (docs/trackers.md, "Run identity and resume"). They read
it as one resumed run: steps 0, 10, 20 then 0..4 were shown as 0..4, 10, 20, the earlier
attempt's configuration mixed into the rerun's."""

from __future__ import annotations

import json
from pathlib import Path

from tools_support import run_cli

import rlmetrics
from rlmetrics.testing import reset_process_state


def _log(path: Path, steps: list[int], lr: float, resume: bool = False) -> None:
    """A script's run of ``grpo-1``: a process of its own (its process state forgotten)."""
    reset_process_state()
    logger = rlmetrics.Logger(backends={"jsonl": {"path": path}}, run_id="grpo-1", resume=resume)
    if not resume:
        logger.log_hyperparams({"lr": lr} if lr else {"fix": True})
    for step in steps:
        logger.log_metrics({"reward": lr + step}, step=step, prefix="train")
    logger.finish()


def _rerun_file(tmp_path: Path) -> Path:
    path = tmp_path / "m.jsonl"
    _log(path, [0, 10, 20], lr=0.5)
    _log(path, [0, 1, 2, 3], lr=0.25)  # started again, no resume: a new attempt
    _log(path, [4], lr=0.25, resume=True)  # continues the new attempt
    return path


def test_report_shows_the_last_attempt_of_a_run_started_again(tmp_path: Path) -> None:
    path = _rerun_file(tmp_path)
    done = run_cli("report", path, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [s["step"] for s in report["steps"]] == [0, 1, 2, 3, 4]
    assert (report["reruns"], report["resumed"], report["repeated_steps"]) == (1, 1, [])
    assert report["hyperparams"] == {"lr": 0.25}
    assert report["trends"]["reward"]["last"] == 4.25
    text = run_cli("report", path)
    assert "its last attempt: started again 1 time(s) without resume" in text.stdout
    assert "logged again" not in text.stderr, text.stderr


def test_query_answers_for_the_last_attempt_of_a_run_started_again(tmp_path: Path) -> None:
    path = _rerun_file(tmp_path)
    done = run_cli("query", path)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["run"]["reruns"] == 1 and answer["run"]["resumed"] is True
    assert answer["run"]["hyperparams"] == {"lr": 0.25}
    assert (answer["steps"]["count"], answer["steps"]["last"]) == (5, 4)
    assert answer["last_values"]["train/reward"] == {"step": 4, "value": 4.25}
