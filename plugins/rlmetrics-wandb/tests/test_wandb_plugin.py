"""The entry point, and isolation: a failing W&B backend costs nobody else the step."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import rlmetrics
from rlmetrics.backends import available_backends
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.plugins import get_plugins
from rlmetrics.testing import in_memory_telemetry, points, single


def test_the_entry_point_offers_the_wandb_backend() -> None:
    owner, _factory = available_backends()["wandb"]
    assert owner == "wandb"
    assert get_plugins().info("wandb").distribution  # type: ignore[union-attr] == "rlmetrics-wandb"


def _wandb_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.levelno >= logging.WARNING and "'wandb'" in r.getMessage()
    ]


def test_a_finished_run_is_isolated_and_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(
            backends={
                "jsonl": {"path": tmp_path / "m.jsonl"},
                "wandb": {"project": "p", "dir": tmp_path / "wandb"},
            }
        )
        # Someone else ends the run (a crashed service process does the same): every
        # later run.log raises.
        logger.backends["wandb"].run.finish()
        for step in (1, 2, 3):
            logger.log_metrics({"loss": step / 10}, step=step, prefix="train")
        logger.finish()
        tee = single(points(reader), "rl.policy.loss")  # the core training family

    assert [row["step"] for row in read_jsonl(tmp_path / "m.jsonl")] == [1, 2, 3]
    assert tee.value == pytest.approx(0.3)
    # The first failure, once, with its cause; finish() then says what the backend lost.
    first, lost = _wandb_warnings(caplog)
    assert "failed to log a step" in first.getMessage()
    assert first.exc_info is not None
    assert "is finished" in str(first.exc_info[1])
    assert "backend 'wandb' finished; 3 of 3 rows failed to write" in lost.getMessage()


def test_a_backend_that_cannot_start_is_skipped_and_reported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logger = rlmetrics.Logger(
        backends={
            "jsonl": {"path": tmp_path / "m.jsonl"},
            "wandb": {"dir": tmp_path / "wandb", "init_kwargs": {"mode": "no-such-mode"}},
        }
    )
    logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
    logger.finish()

    assert "wandb" not in logger.backends
    assert [row["metrics"] for row in read_jsonl(tmp_path / "m.jsonl")] == [{"loss": 1.0}]
    (warning,) = _wandb_warnings(caplog)
    assert "failed to start" in warning.getMessage()
    assert warning.exc_info is not None
    assert "wandb.init" in str(warning.exc_info[1])
