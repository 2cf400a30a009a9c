"""WandbBackend against a real offline W&B run, read back from its transaction log."""

from __future__ import annotations

import logging
import math
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
import wandb
from rlmetrics_wandb import WandbBackend
from wandb_helpers import read_run

import rlmetrics
from rlmetrics.events import (
    STEP_KEY,
    WALL_TIME_KEY,
    CheckpointOutcome,
    CheckpointSave,
    ThroughputSample,
)


def _backend(tmp_path: Path, **config: object) -> WandbBackend:
    return WandbBackend(project="rlmetrics-test", dir=tmp_path / "wandb", **config)


def test_smaller_and_repeated_trainer_steps_keep_every_row(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    for step, loss in [(5, 0.5), (3, 0.3), (7, 0.7), (7, 0.75)]:
        backend.log_metrics({"loss": loss}, step, "train")
    backend.finish()

    rows = read_run(backend.transaction_log).history
    assert [(row[STEP_KEY], row["train/loss"]) for row in rows] == [
        (5, 0.5),
        (3, 0.3),
        (7, 0.7),
        (7, 0.75),
    ]


def test_trainer_and_rollout_streams_get_their_own_axes(tmp_path: Path) -> None:
    logger = rlmetrics.Logger(backends={"wandb": {"project": "p", "dir": tmp_path / "wandb"}})
    backend = logger.backends["wandb"]
    logger.log_setup_timing({"total_setup_time_s": 12.5})
    logger.log_metrics({"loss": 1.5, "reward": {"mean": 0.25}}, step=1, prefix="train")
    logger.log_metrics({"efficiency/idle/buffer_starvation_s": 2.0, "lr": 0.1}, step=1)
    logger.log_rollout_checkpoint(
        CheckpointSave(values={"total_save_seconds": 3.0}, wall_time_s=1_700_000_000.0)
    )
    logger.log_rollout_checkpoint(
        ThroughputSample(values={"committed_groups_per_second": 4.0}, wall_time_s=1_700_000_030.0)
    )
    logger.log_rollout_checkpoint(
        CheckpointOutcome(outcome="skipped", reason="busy", wall_time_s=1_700_000_060.0)
    )
    logger.finish()
    log = read_run(backend.transaction_log)

    definitions = log.metrics
    for trainer in (
        "train/loss",
        "train/reward/mean",
        "timing/setup/total_setup_time_s",
        "efficiency/idle/buffer_starvation_s",
        "lr",
    ):
        assert definitions[trainer]["step_metric"] == STEP_KEY, trainer
        assert definitions[trainer]["options"]["step_sync"] is True, trainer
    for stream in (
        "timing/rollout_checkpoint/total_save_seconds",
        "rollout/throughput/committed_groups_per_second",
        "rollout/checkpoint_outcome/skipped",
        "rollout/checkpoint_outcome/reason_busy",
    ):
        assert definitions[stream]["step_metric"] == WALL_TIME_KEY, stream
    for axis in (STEP_KEY, WALL_TIME_KEY):
        assert "step_metric" not in definitions[axis]
    assert not [name for name in definitions if "*" in name]  # exact keys, never globs

    assert log.history == [
        {"timing/setup/total_setup_time_s": 12.5, STEP_KEY: 0},
        {"train/loss": 1.5, "train/reward/mean": 0.25, STEP_KEY: 1},
        {"efficiency/idle/buffer_starvation_s": 2.0, "lr": 0.1, STEP_KEY: 1},
        {"timing/rollout_checkpoint/total_save_seconds": 3.0, WALL_TIME_KEY: 1_700_000_000.0},
        {"rollout/throughput/committed_groups_per_second": 4.0, WALL_TIME_KEY: 1_700_000_030.0},
        {
            "rollout/checkpoint_outcome/completed": 0.0,
            "rollout/checkpoint_outcome/skipped": 1.0,
            "rollout/checkpoint_outcome/failed": 0.0,
            "rollout/checkpoint_outcome/reason_busy": 1.0,
            WALL_TIME_KEY: 1_700_000_060.0,
        },
    ]


def test_rollout_dict_without_wall_time_is_stamped_now(tmp_path: Path) -> None:
    logger = rlmetrics.Logger(backends={"wandb": {"project": "p", "dir": tmp_path / "wandb"}})
    backend = logger.backends["wandb"]
    logger.log_metrics({"committed_groups_per_second": 2.0}, step=0, prefix="rollout/throughput")
    logger.finish()

    (row,) = read_run(backend.transaction_log).history
    assert STEP_KEY not in row
    assert row["rollout/throughput/committed_groups_per_second"] == 2.0
    assert row[WALL_TIME_KEY] > 1_700_000_000


def test_values_are_logged_the_way_wandb_log_takes_them(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    backend.log_metrics(
        {
            "text": "hello",
            "flag": True,
            "nan": math.nan,
            "inf": -math.inf,
            "samples": [1, 2.5, None],
            "missing": None,
            "path": Path("/ckpt/7"),
            "fraction": Fraction(1, 4),
            "decimal": Decimal("0.5"),  # was the text "0.5", a column W&B cannot chart
            "big": 2**40,
        },
        2,
        "val",
    )
    backend.finish()

    (row,) = read_run(backend.transaction_log).history
    # leet prints NaN and infinities as their JSON-compatible spellings.
    assert row == {
        "val/text": "hello",
        "val/flag": True,
        "val/nan": "NaN",
        "val/inf": "-Infinity",
        "val/samples": [1, 2.5, None],
        "val/path": "/ckpt/7",
        "val/fraction": 0.25,
        "val/decimal": 0.5,
        "val/big": 2**40,
        STEP_KEY: 2,
    }


def test_ints_past_int64_are_logged_as_their_text_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # W&B keeps an int64 exactly, but its JSON writer made a wider int a double: a hash-like
    # id 2**64+1 arrived as 1.8446744073709552e+19, and 10**400 as Infinity.
    backend = _backend(tmp_path)
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        backend.log_metrics(
            {"tokens": 2**53 + 1, "low": -(2**63), "id": 2**64 + 1, "huge": 10**400}, 1, "t"
        )
        backend.log_metrics({"id": -(2**63) - 1}, 2, "t")
    backend.finish()

    rows = read_run(backend.transaction_log).history
    assert rows == [
        {
            "t/tokens": 2**53 + 1,
            "t/low": -(2**63),
            "t/id": str(2**64 + 1),
            "t/huge": "1" + "0" * 400,
            STEP_KEY: 1,
        },
        {"t/id": str(-(2**63) - 1), STEP_KEY: 2},
    ]
    (said,) = [r.getMessage() for r in caplog.records if "past int64" in r.getMessage()]
    assert "'t/id'" in said


def test_config_reaches_wandb_init(tmp_path: Path) -> None:
    backend = _backend(
        tmp_path,
        name="grpo-7b",
        tags=["rl", "grpo"],
        group="sweep-1",
        notes="baseline",
        config={"lr": 1e-6, "model": {"name": "m"}},
        init_kwargs={"job_type": "train"},
    )
    backend.finish()

    run = read_run(backend.transaction_log).run
    assert run["project"] == "rlmetrics-test"
    assert run["display_name"] == "grpo-7b"
    assert run["tags"] == ["rl", "grpo"]
    assert run["run_group"] == "sweep-1"
    assert run["notes"] == "baseline"
    assert run["job_type"] == "train"
    assert run["config"]["update"]["lr"] == 1e-6
    assert run["config"]["update"]["model"] == {"name": "m"}
    assert backend.run_dir.parent == tmp_path / "wandb" / "wandb"


def test_finish_flushes_once_and_a_run_passed_in_stays_with_its_owner(tmp_path: Path) -> None:
    run = wandb.init(project="rlmetrics-test", dir=tmp_path)
    backend = WandbBackend(run=run)
    backend.log_metrics({"loss": 1.0}, 1, "train")
    backend.finish()
    backend.finish()
    run.log({"owner/extra": 1})  # still open: the backend did not finish it
    run.finish()

    rows = read_run(backend.transaction_log).history
    assert rows == [{"train/loss": 1.0, STEP_KEY: 1}, {"owner/extra": 1}]


def test_odd_steps_never_cost_the_row(tmp_path: Path) -> None:
    backend = _backend(tmp_path)
    backend.log_metrics({"loss": 1.0}, 4, "train")
    backend.log_metrics({"loss": 2.0}, 5.0, "train")  # type: ignore[arg-type]
    backend.log_metrics({"loss": 3.0}, None, "train")  # type: ignore[arg-type]
    backend.finish()

    # A row without a usable step is kept, and W&B's step_sync files it under the last one.
    assert read_run(backend.transaction_log).history == [
        {"train/loss": 1.0, STEP_KEY: 4},
        {"train/loss": 2.0, STEP_KEY: 5},
        {"train/loss": 3.0, STEP_KEY: 5},
    ]


def test_keys_wandb_keeps_for_its_own_row_fields_are_renamed_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # W&B writes its own _step, _runtime and _timestamp into every history row: a logged key
    # of that name was overwritten (_step, _runtime) or overwrote W&B's row time (_timestamp).
    backend = _backend(tmp_path)
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        backend.log_metrics({"_step": 3.0, "_timestamp": 4.0, "_runtime": 9.0, "x": 1.0}, 1, "")
        backend.log_metrics({"_step": 5.0}, 2, "")
    backend.finish()
    records = [r for r in read_run(backend.transaction_log).records if r["type"] == "history"]
    items = [r["history"]["item"] for r in records]
    assert [(i["__step"], i.get("__timestamp"), i.get("__runtime")) for i in items] == [
        (3.0, 4.0, 9.0),
        (5.0, None, None),
    ]
    assert items[0]["_timestamp"] > 1_700_000_000  # W&B's own row time
    assert [i["_step"] for i in items] == [0, 1]
    said = [r.getMessage() for r in caplog.records if "rlmetrics-wandb" in r.getMessage()]
    assert len(said) == 1 and "'_step'" in said[0] and "'__step'" in said[0]
