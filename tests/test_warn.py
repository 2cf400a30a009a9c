from __future__ import annotations

import logging
from typing import Any

from rlmetrics import warn_once


def test_first_warning_has_a_traceback_then_debug(caplog: Any) -> None:
    with caplog.at_level(logging.DEBUG, logger="rlmetrics"):
        for _ in range(3):
            try:
                raise ValueError("sink down")
            except ValueError:
                warn_once("sink", "sink failed")
        warn_once("other", "other failed")
    records = [(r.levelno, r.getMessage(), bool(r.exc_info)) for r in caplog.records]
    assert records == [
        (logging.WARNING, "sink failed", True),
        (logging.DEBUG, "sink failed", True),
        (logging.DEBUG, "sink failed", True),
        (logging.WARNING, "other failed", False),
    ]
    assert "ValueError: sink down" in caplog.text
    # Outside an except block the report is its one line: no stack.
    assert not caplog.records[-1].stack_info and not caplog.records[-1].exc_info


def test_no_report_prints_a_logged_string_value(caplog: Any, tmp_path: Any) -> None:
    """A logged string may be a secret: every report gives its type and length instead."""
    import rlmetrics
    from rlmetrics.events import CheckpointOutcome
    from rlmetrics.testing import in_memory_telemetry

    secret = "sk-live-SECRET-0123456789"
    with caplog.at_level(logging.DEBUG, logger="rlmetrics"), in_memory_telemetry():
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
        logger.log_metrics({"reward": secret, "loss": [secret]}, step=secret, prefix="train")  # type: ignore[arg-type]
        logger.log_metrics({"efficiency/idle/validation_s": secret}, step=1)
        logger.log_setup_timing({"policy_init_time_s": secret})
        logger.log_metrics({"snapshot_rows": secret}, step=1, prefix="timing/rollout_checkpoint")
        logger.log_rollout_checkpoint(CheckpointOutcome(outcome="failed", reason=secret))
        rlmetrics.record("rl.train", {"reward": secret})
        rlmetrics.record("rl.train", {"reward": 1.0}, {"rl.x": secret})
        logger.finish()
    assert caplog.records, "the bad values were reported"
    assert secret not in caplog.text


def test_an_expected_condition_is_one_line_and_its_traceback_is_at_debug(caplog: Any) -> None:
    with caplog.at_level(logging.DEBUG, logger="rlmetrics"):
        for _ in range(2):
            try:
                raise OSError(28, "No space left on device")
            except OSError:
                warn_once("disk", "disk full: free some space", expected=True)
    records = [(r.levelno, r.getMessage(), bool(r.exc_info)) for r in caplog.records]
    assert records == [
        (logging.WARNING, "disk full: free some space", False),
        (logging.DEBUG, "disk full: free some space", True),
        (logging.DEBUG, "disk full: free some space", True),
    ]
