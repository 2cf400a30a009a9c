"""``rlmetrics report`` on a transformers/TRL run (issue 32, "the first hour"): the trainer's
end-of-training summary row is no repeated step, the run is read through the key map that
wrote it (TRL's ``kl`` is the report's KL, with its column and panel), and a resumed run's
report never mixes two attempts within one step.

``runs/trl-grpo.jsonl`` is a real TRL GRPOTrainer run logged by ``RLMetricsCallback``
(``runs/make_trl_grpo.py`` writes it again)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tools_support import run_cli

import rlmetrics
from rlmetrics.keymaps import KeyMap, KeyRule
from rlmetrics.report.keymap import RunKeys, found_key_map
from rlmetrics.report.runs import read_reports

TRL_RUN = Path(__file__).parent / "runs" / "trl-grpo.jsonl"


def _logged(path: Path) -> dict[int, dict[str, Any]]:
    """The train dicts of the run's steps, as the trainer logged them (merged per step)."""
    steps: dict[int, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("prefix") == "train":
            steps.setdefault(row["step"], {}).update(row["metrics"])
    return steps


def test_a_trl_run_has_no_repeated_step_and_reads_kl_through_the_trl_map() -> None:
    logged = _logged(TRL_RUN)
    assert sorted(logged) == [1, 2, 3] and "train_runtime" in logged[3]  # the summary row
    (report,) = read_reports(TRL_RUN)
    assert report.repeated_steps == ()
    assert report.key_map is not None and report.key_map["name"] == "trl"
    assert "TrainingArguments" in report.key_map["how"]
    for step in report.steps:
        assert step["kl"] == pytest.approx(logged[step["step"]]["kl"])
        assert step["reward"] == pytest.approx(logged[step["step"]]["reward"])
        assert step["loss"] == pytest.approx(logged[step["step"]]["loss"])
    assert report.trends["kl"]["last"] == pytest.approx(logged[3]["kl"])
    assert set(report.signals["reward_components"]) == {"length_reward"}  # type: ignore[index]

    done = run_cli("report", TRL_RUN)
    assert done.returncode == 0, done.stderr
    assert "more than once" not in done.stderr + done.stdout
    assert "again after" not in done.stderr + done.stdout
    assert "Read through key map 'trl'" in done.stdout
    table = done.stdout.split("Per step")[1].splitlines()[1:5]
    assert table[0].split()[-3:] == ["reward", "kl", "loss"]
    for line in table[1:]:  # the KL as logged, to four significant digits
        step, kl = int(line.split()[0]), line.split()[-2]
        assert float(kl) == pytest.approx(logged[step]["kl"], rel=1e-3)


def test_a_trl_runs_picture_has_its_kl_panel() -> None:
    from rlmetrics.report.plot import panels

    (report,) = read_reports(TRL_RUN)
    assert [name for name, _ in panels(report)] == ["reward", "kl", "loss"]


def test_a_named_key_map_wins_and_an_unknown_one_is_a_usage_error(tmp_path: Path) -> None:
    done = run_cli("report", TRL_RUN, "--key-map", "verl", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["key_map"] == {"name": "verl", "how": "named with --key-map"}
    assert {s["kl"] for s in result["steps"]} == {None}  # verl's map has no `kl`
    unknown = run_cli("report", TRL_RUN, "--key-map", "nope")
    assert unknown.returncode == 2 and "unknown key map 'nope'" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_rows_that_do_not_say_which_trainer_wrote_them_are_read_as_logged() -> None:
    assert found_key_map({"lr": 1e-6, "output_dir": "x"}) is None
    assert found_key_map(None) is None


def test_a_key_the_map_lists_is_not_read_under_another_meaning() -> None:
    # OpenRLHF's `reward` is the micro-batches' mean, not the rollout's: the report's reward
    # is rollout/reward_mean, and a step without it has no reward.
    keys = RunKeys("openrlhf")
    assert keys.read({"reward": 1.0, "rollout/reward_mean": 0.5}, "train")["reward"] == 0.5
    assert "reward" not in keys.read({"reward": 1.0}, "train")
    mine = RunKeys(KeyMap("mine", [KeyRule("t/step", category="step_wall_time")]))
    assert mine.read({"t/step": 3.0}, "")["efficiency/step_wall_time_s"] == 3.0
    assert mine.read({"t/step": 3.0}, "validation") == {"t/step": 3.0}


def _log(path: Path, steps: dict[int, dict[str, float]], resume: bool) -> None:
    logger = rlmetrics.Logger(backends={"jsonl": {"path": path}}, run_id="r", resume=resume)
    for step, metrics in steps.items():
        logger.log_metrics(metrics, step=step, prefix="train")
    logger.finish()


def test_a_resumed_run_shows_each_step_as_its_last_attempt_logged_it(tmp_path: Path) -> None:
    jsonl = tmp_path / "m.jsonl"
    # Died after step 5; its checkpoint was step 3. Step 4's first attempt logged a KL.
    first = {
        s: {"reward": float(s), **({"kl_penalty": 0.5} if s == 4 else {})} for s in range(1, 6)
    }
    _log(jsonl, first, False)
    _log(jsonl, {s: {"reward": 10.0 * s} for s in range(4, 8)}, True)
    (report,) = read_reports(jsonl)
    assert report.repeated_steps == (4, 5)
    by_step = {s["step"]: s for s in report.steps}
    assert sorted(by_step) == list(range(1, 8))
    assert by_step[4]["reward"] == 40.0 and by_step[4]["kl"] is None  # no mix of attempts
    assert by_step[3]["reward"] == 3.0


def test_a_step_logged_in_parts_is_one_step_not_a_repeat(tmp_path: Path) -> None:
    jsonl = tmp_path / "m.jsonl"
    logger = rlmetrics.Logger(backends={"jsonl": {"path": jsonl}}, run_id="r")
    for step in (1, 2):
        logger.log_metrics({"reward": step, "epoch": 0.5}, step=step, prefix="train")
        logger.log_metrics({"loss": 0.1, "epoch": 0.5}, step=step, prefix="train")
    logger.finish()
    (report,) = read_reports(jsonl)
    assert report.repeated_steps == ()
    assert [(s["reward"], s["loss"]) for s in report.steps] == [(1, 0.1), (2, 0.1)]
