"""The Trackio backend through a real Logger, read back from Trackio's own store."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

import pytest
import trackio
from hypothesis import given
from hypothesis import strategies as st
from rlmetrics_trackio.backend import trackio_value
from trackio.sqlite_storage import SQLiteStorage

from rlmetrics import Logger


def logs(project: str, run: str) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in row.items() if k != "timestamp"}
        for row in SQLiteStorage.get_logs(project, run)
    ]


def run_config(project: str, run: str) -> dict[str, Any]:
    (found,) = [r for r in trackio.Api().runs(project) if r.name == run]
    return {k: v for k, v in (found.config or {}).items() if not k.startswith("_")}


def test_scalars_land_at_the_trainer_step_and_bad_values_only_cost_themselves(
    project: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger = Logger(backends={"trackio": {"project": project}})
        run = logger.identity.run_id
        logger.log_metrics(
            {"loss": 0.5, "reward": 1, "ok": True, "note": "warm"}, step=3, prefix="train"
        )
        logger.log_metrics(
            {"loss": float("nan"), "tokens": 2**70, "huge": 10**400, "hist": [1, 2], "skip": None},
            step=4,
            prefix="train",
        )
        logger.log_metrics({"loss": 0.25}, step=5, prefix="train")
        logger.finish()
    rows = logs(project, run)
    assert [r["step"] for r in rows] == [3, 4, 5]
    assert rows[0] == {
        "step": 3,
        "train/loss": 0.5,
        "train/reward": 1,
        "train/ok": 1.0,
        "train/note": "warm",
    }
    assert math.isnan(rows[1]["train/loss"]) and rows[1]["train/tokens"] == float(2**70)
    assert set(rows[1]) == {"step", "train/loss", "train/tokens"}
    assert rows[2] == {"step": 5, "train/loss": 0.25}
    said = [r.getMessage() for r in caplog.records if "rlmetrics-trackio" in r.getMessage()]
    assert len(said) == 2
    assert any("'train/huge' is an int past float's range" in m for m in said)
    assert any("'train/hist' is a list value" in m for m in said)


def test_hyperparams_are_the_runs_config_and_samples_a_table(
    project: str, caplog: pytest.LogCaptureFixture
) -> None:
    logger = Logger(backends={"trackio": {"project": project}})
    run = logger.identity.run_id
    logger.log_hyperparams({"lr": 1e-5, "model": {"name": "tiny", "layers": 2}})
    logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
    logger.log_samples(
        [
            {"prompt": "2+2?", "completion": "4", "reward": 1.0},
            {"prompt": "3+3?", "completion": object(), "reward": None},
        ],
        step=1,
        name="rollouts",
    )
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger.log_hyperparams({"seed": 7})  # after the first record: Trackio keeps no more
        logger.log_metrics({"loss": 0.5}, step=2, prefix="train")
        logger.finish()
    assert run_config(project, run) == {"lr": 1e-5, "model": {"name": "tiny", "layers": 2}}
    said = [r.getMessage() for r in caplog.records if "rlmetrics-trackio" in r.getMessage()]
    assert len(said) == 1 and "after the run's first step" in said[0]
    (table,) = [r["rollouts"] for r in logs(project, run) if "rollouts" in r]
    assert table["_type"] == "trackio.table"
    assert [row["prompt"] for row in table["_value"]] == ["2+2?", "3+3?"]
    assert table["_value"][0]["reward"] == 1.0 and table["_value"][1]["reward"] is None
    assert isinstance(table["_value"][1]["completion"], str)  # the cell as its text, row kept


def test_resume_continues_the_same_trackio_run(project: str) -> None:
    first = Logger(backends={"trackio": {"project": project}})
    run = first.identity.run_id
    first.log_metrics({"loss": 1.0}, step=1, prefix="train")
    first.finish()
    second = Logger(backends={"trackio": {"project": project}}, run_id=run, resume=True)
    second.log_metrics({"loss": 0.5}, step=2, prefix="train")
    second.finish()
    assert [r.name for r in trackio.Api().runs(project)] == [run]
    assert [(r["step"], r["train/loss"]) for r in logs(project, run)] == [(1, 1.0), (2, 0.5)]


def test_a_resumed_run_keeps_the_configuration_its_first_process_logged(project: str) -> None:
    # Trackio stores a run's config with each process's first record: the resumed process's
    # configuration replaced the first one's, and keys only the first logged were gone.
    first = Logger(backends={"trackio": {"project": project}})
    run = first.identity.run_id
    first.log_hyperparams({"lr": 1e-6, "seed": 1, "optimizer": {"beta1": 0.9}})
    first.log_metrics({"loss": 1.0}, step=1, prefix="train")
    first.finish()
    second = Logger(backends={"trackio": {"project": project}}, run_id=run, resume=True)
    second.log_hyperparams({"lr": 5e-7, "optimizer": {"beta2": 0.99}})
    second.log_metrics({"loss": 0.5}, step=2, prefix="train")
    second.finish()
    assert run_config(project, run) == {
        "lr": 5e-7,
        "seed": 1,
        "optimizer": {"beta1": 0.9, "beta2": 0.99},
    }


@given(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(),
        st.lists(st.integers(), max_size=3),
        st.builds(object),
    )
)
def test_every_value_maps_to_a_number_a_string_absence_or_a_reason(value: Any) -> None:
    converted = trackio_value(value)
    if value is None:
        assert converted is None
    elif isinstance(value, bool):
        assert converted == float(value)
    elif isinstance(value, str):
        assert converted == value
    elif isinstance(value, int):
        if abs(value) < 2**63:
            assert converted == value and type(converted) is int
        elif abs(value) < 2**1023:
            assert converted == float(value)
        else:
            assert converted == ("an int past float's range",)
    elif isinstance(value, float):
        assert converted == value or (math.isnan(value) and math.isnan(converted))
    else:
        assert isinstance(converted, tuple) and len(converted) == 1


def test_the_scripts_own_run_is_logged_into_and_left_running(project: str) -> None:
    script_run = trackio.init(project=project, name="mine", embed=False)
    try:
        logger = Logger(backends={"trackio": {}})
        logger.log_metrics({"loss": 2.0}, step=7, prefix="train")
        logger.finish()
        assert trackio.context_vars.current_run.get() is script_run
        trackio.log({"after": 1.0}, step=8)  # still the script's to use
    finally:
        trackio.finish()
    assert [(r["step"], sorted(k for k in r if k != "step")) for r in logs(project, "mine")] == [
        (7, ["train/loss"]),
        (8, ["after"]),
    ]


def test_a_store_it_cannot_write_is_skipped_and_named_and_the_rest_lands(tmp_path: Path) -> None:
    """Trackio's store under a path that cannot be a folder: Trackio itself only warned at
    finish() that the batch 'could not be persisted' while the Logger counted the tracker as
    working. The backend now fails at start, named, and the other backends get every row."""
    import subprocess
    import sys

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    script = (
        "import rlmetrics\n"
        f"lg = rlmetrics.Logger(backends={{'trackio': {{'project': 'p'}}, "
        f"'jsonl': {{'path': {str(tmp_path / 'm.jsonl')!r}}}}})\n"
        "print(sorted(lg.backends))\n"
        "for s in range(1, 4):\n"
        "    lg.log_metrics({'loss': 0.5}, step=s, prefix='train')\n"
        "lg.finish()\n"
    )
    env = {**os.environ, "TRACKIO_DIR": str(blocker / "store"), "DO_NOT_TRACK": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "['jsonl']" in done.stdout.splitlines()
    said = [line for line in done.stderr.splitlines() if "trackio" in line.lower()]
    assert len(said) == 1 and "cannot be written" in said[0] and str(blocker) in said[0], said
    assert (tmp_path / "m.jsonl").read_text().count('"metrics"') == 3


def test_a_second_configuration_before_the_first_step_adds_to_a_nested_section(
    project: str,
) -> None:
    # Trackio's config.update replaced the section: optimizer.lr was lost.
    logger = Logger(backends={"trackio": {"project": project}})
    run = logger.identity.run_id
    logger.log_hyperparams({"optimizer": {"lr": 1e-5, "betas": {"b1": 0.9}}, "seed": 1})
    logger.log_hyperparams({"optimizer": {"warmup": 10, "betas": {"b2": 0.99}}})
    logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
    logger.finish()
    assert run_config(project, run) == {
        "optimizer": {"lr": 1e-5, "betas": {"b1": 0.9, "b2": 0.99}, "warmup": 10},
        "seed": 1,
    }


def test_two_loggers_of_one_run_share_one_trackio_run(project: str) -> None:
    # The second Logger started a second Trackio run under the same name, whose rows Trackio's
    # API and storage (by name) did not show; and the first Logger's finish() must not end the
    # run the other still logs into.
    trainer = Logger(backends={"trackio": {"project": project}})
    run = trainer.identity.run_id
    script = Logger(backends={"trackio": {"project": project}}, run_id=run)
    trainer.log_metrics({"loss": 1.0}, step=1, prefix="train")
    script.log_metrics({"accuracy": 0.5}, step=1, prefix="eval")
    trainer.finish()
    script.log_metrics({"accuracy": 0.75}, step=2, prefix="eval")
    script.finish()
    assert [r.name for r in trackio.Api().runs(project)] == [run]
    assert sorted((r["step"], k) for r in logs(project, run) for k in r if k != "step") == [
        (1, "eval/accuracy"),
        (1, "train/loss"),
        (2, "eval/accuracy"),
    ]
