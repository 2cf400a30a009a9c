"""Strict mode means strict (issue 32): a failure raises in every strict scope, even when the
process warned about it before; a value not exported raises once per key and cause."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import rlmetrics
from rlmetrics._warn import strict_mode
from rlmetrics.testing import in_memory_telemetry


def _logger(tmp_path: Path, name: str, **kwargs: object) -> rlmetrics.Logger:
    return rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / name}}, **kwargs)  # type: ignore[arg-type]


def test_a_second_strict_logger_raises_for_a_failure_the_process_already_warned(
    tmp_path: Path,
) -> None:
    with in_memory_telemetry():
        first = _logger(tmp_path, "a.jsonl")
        first.log_metrics({"reward": "high"}, step=1, prefix="train")  # warned, not strict
        first.finish()
        second = _logger(tmp_path, "b.jsonl", strict=True)
        with pytest.raises(rlmetrics.StrictModeError, match=r"rl.reward.mean \(key 'reward'\)"):
            second.log_metrics({"reward": "high"}, step=1, prefix="train")
        second.log_metrics({"reward": "low"}, step=2, prefix="train")  # once per scope
        second.finish()
        third = _logger(tmp_path, "c.jsonl", strict=True)
        with pytest.raises(rlmetrics.StrictModeError, match=r"rl.reward.mean"):
            third.log_metrics({"reward": "high"}, step=1, prefix="train")
        third.finish()


@pytest.mark.parametrize("later", [None, math.nan, math.inf])
def test_a_value_not_exported_raises_once_per_key_and_cause(
    tmp_path: Path, later: float | None
) -> None:
    with in_memory_telemetry():
        logger = _logger(tmp_path, "m.jsonl", strict=True)
        with pytest.raises(rlmetrics.StrictModeError, match="str of length 4"):
            logger.log_metrics({"reward": "high"}, step=1, prefix="train")
        logger.log_metrics({"reward": "low"}, step=2, prefix="train")  # the same cause: said
        with pytest.raises(rlmetrics.StrictModeError, match=r"rl.reward.mean \(key 'reward'\)"):
            logger.log_metrics({"reward": later}, step=3, prefix="train")
        logger.log_metrics({"reward": later}, step=4, prefix="train")
        logger.finish()


def test_an_explicit_strict_false_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RLMETRICS_STRICT", "1")
    unwritable = {"jsonl": {"path": tmp_path / "file" / "m.jsonl"}, "console": {}}
    (tmp_path / "file").write_text("a file, not a folder")
    with pytest.raises(rlmetrics.StrictModeError, match="backend 'jsonl'"):
        rlmetrics.Logger(backends=unwritable)
    logger = rlmetrics.Logger(backends=unwritable, strict=False)  # warned, not raised
    assert not strict_mode()
    logger.finish()
    assert strict_mode()  # the variable again, once the Logger that refused it is done


@pytest.mark.parametrize(
    ("setting", "value"), [("redact", 5), ("ranks", "nonsense"), ("unknown_keys", "loud")]
)
def test_a_logger_that_raises_on_its_settings_leaves_strict_mode_as_it_was(
    tmp_path: Path, setting: str, value: object
) -> None:
    # A mistake found before the Logger exists must not hold strict mode for the process.
    with pytest.raises(ValueError, match=setting):
        _logger(tmp_path, "m.jsonl", strict=True, **{setting: value})
    assert not strict_mode()
