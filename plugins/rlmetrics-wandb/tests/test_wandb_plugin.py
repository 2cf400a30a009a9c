"""The entry point, and isolation: a failing W&B backend costs nobody else the step."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from wandb_helpers import read_run

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


def test_a_reused_buffer_reaches_wandb_as_it_was_at_each_call(tmp_path: Path) -> None:
    """The loop refills one NumPy buffer after every call; W&B writes on its own thread,
    later. Each history row holds its own step's values, and W&B's rules for arrays still
    apply: 40 elements become a histogram, 3 a list."""
    np = pytest.importorskip("numpy")
    logger = rlmetrics.Logger(
        backends={"wandb": {"project": "p", "dir": tmp_path / "wandb"}}, queue_size=100
    )
    wide, narrow = np.zeros(40), np.zeros(3)
    for step in range(1, 6):
        wide[:] = step
        narrow[:] = step
        logger.log_metrics({"wide": wide, "narrow": narrow}, step=step, prefix="train")
    logger.finish(timeout_s=60)
    rows = read_run(logger.backends["wandb"].transaction_log).history  # type: ignore[attr-defined]
    assert [row["train/narrow"] for row in rows] == [[float(s)] * 3 for s in range(1, 6)]
    for step, row in enumerate(rows, start=1):
        # (leet prints a histogram's fields as dotted keys.)
        assert row["train/wide._type"] == "histogram"
        assert sum(row["train/wide.values"]) == 40
        assert row["train/wide.bins"][0] < step < row["train/wide.bins"][-1]
