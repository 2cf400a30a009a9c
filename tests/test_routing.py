"""A prefix written into the keys of a dict logged without one (the W&B way:
``{"train/reward": r}``, or nested ``{"train": {"reward": r}}``) is read as that prefix by the
series, as ``prefix="train"`` is; the trackers keep the keys as logged
(:func:`rlmetrics.routing.by_prefix`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.events import SetupTimings
from rlmetrics.known_keys import Vocabulary, unknown_in_rows
from rlmetrics.plugins import register as register_plugin
from rlmetrics.routing import by_prefix
from rlmetrics.testing import in_memory_telemetry, points, single


def _logger(tmp_path: Path, **kwargs: Any) -> rlmetrics.Logger:
    return rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}, **kwargs)


def _values(reader: Any) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    for point in points(reader):
        found.setdefault(point.name, []).append(point.value)
    return found


def test_a_prefix_in_the_keys_reaches_the_series_and_the_trackers_keep_the_keys(
    tmp_path: Path,
) -> None:
    with in_memory_telemetry() as (_handle, reader), _logger(tmp_path) as logger:
        logger.log_metrics({"train/reward": 0.9, "train/loss": 0.3}, step=1)
        logger.log_metrics({"train": {"kl_penalty": 0.2}}, step=2)
        found = _values(reader)
    assert found["rl.reward.mean"] == [0.9]
    assert found["rl.policy.loss"] == [0.3]
    assert found["rl.kl.divergence"] == [0.2]
    rows = [(r["prefix"], r["metrics"]) for r in read_jsonl(tmp_path / "m.jsonl") if "metrics" in r]
    assert ("", {"train/reward": 0.9, "train/loss": 0.3}) in rows
    assert ("", {"train/kl_penalty": 0.2}) in rows


def test_a_prefix_given_is_not_read_again_from_the_keys(tmp_path: Path) -> None:
    with in_memory_telemetry() as (_handle, reader), _logger(tmp_path) as logger:
        logger.log_metrics({"train/reward": 0.5, "loss": 0.4}, step=1, prefix="train")
        found = _values(reader)
    # train/train/reward at the trackers; no series reads it, and loss is read once.
    assert "rl.reward.mean" not in found
    assert found["rl.policy.loss"] == [0.4]


def test_an_evaluation_value_beside_training_keys_is_not_the_training_series(
    tmp_path: Path,
) -> None:
    with in_memory_telemetry() as (_handle, reader), _logger(tmp_path) as logger:
        logger.log_metrics({"reward": 0.1, "eval/reward": 0.9, "test/loss": 7.0}, step=1)
        found = _values(reader)
    assert found["rl.reward.mean"] == [0.1]
    assert "rl.policy.loss" not in found


def test_per_dataset_validation_keys_read_alike_either_way(tmp_path: Path) -> None:
    with in_memory_telemetry() as (_handle, reader), _logger(tmp_path) as logger:
        logger.log_metrics({"validation/gsm8k/accuracy": 0.5}, step=1)
        found = [(p.value, dict(p.attributes)) for p in points(reader)]
    assert (0.5, {"rl.dataset": "gsm8k"}) in found


class _SetupRecorder:
    def __init__(self) -> None:
        self.timings: list[SetupTimings] = []

    @rlmetrics.hookimpl
    def on_setup_timing(self, timings: SetupTimings) -> None:
        self.timings.append(timings)


def test_setup_timings_in_the_keys_reach_the_setup_hook(tmp_path: Path) -> None:
    recorder = _SetupRecorder()
    assert register_plugin(recorder, "setup-recorder")
    with _logger(tmp_path) as logger:
        logger.log_metrics({"timing/setup/model_load_time_s": 3.0}, step=0)
    [timings] = recorder.timings
    assert timings.seconds == {"model_load": 3.0}


def test_a_dict_splits_by_the_prefixes_its_keys_carry() -> None:
    assert by_prefix(("reward", "lr")) is None  # the common case: nothing to split
    assert by_prefix(("train/reward", "lr", "eval/reward", "timing/setup/a_s", "train")) == (
        ("", (("lr", "lr"), ("train", "train"))),
        ("train", (("train/reward", "reward"),)),
        ("eval", (("eval/reward", "reward"),)),
        ("timing/setup", (("timing/setup/a_s", "a_s"),)),
    )
    # An empty rest, a segment that is no prefix, a stream whose axis is not the step.
    assert by_prefix(("train/", "trainer/x", "rollout/throughput/x", "timing/x")) is None


def test_unknown_keys_and_check_agree_on_a_prefix_in_the_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        _logger(tmp_path, unknown_keys="warn") as logger,
    ):
        logger.log_metrics({"train/reward": 0.9, "train/kl_penalti": 0.2}, step=1)
    said = [r.getMessage() for r in caplog.records if "unknown_keys" in r.getMessage()]
    assert len(said) == 1, said
    assert "'train/kl_penalti'" in said[0] and "did you mean 'train/kl_penalty'?" in said[0]
    rows = list(read_jsonl(tmp_path / "m.jsonl"))
    assert [u.key for u in unknown_in_rows(rows)] == ["train/kl_penalti"]
    assert Vocabulary().known("", "train/reward")
    assert not Vocabulary().known("train", "train/reward")


def test_asking_for_one_key_leaves_the_loops_table_alone() -> None:
    from rlmetrics import routing

    loop = ("train/reward", "lr")
    routing.by_prefix(loop)
    before = len(routing._splits)
    found = [routing.carried(f"train/k{i}") for i in range(100)]
    assert found[99] == ("train", "k99")
    assert len(routing._splits) == before


def test_a_dropped_value_is_said_by_the_key_as_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: {"train/reward": nan} was said as "(key 'reward') dropped a value", a key the
    user never wrote, and as the same said-once message as reward under prefix="train"."""
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        in_memory_telemetry() as (_handle, reader),
        _logger(tmp_path) as logger,
    ):
        logger.log_metrics({"train/reward": float("nan"), "train/loss": 0.3}, step=1)
        logger.log_metrics({"reward": float("nan")}, step=2, prefix="train")
        found = points(reader)
    said = [r.getMessage() for r in caplog.records if "dropped a value" in r.getMessage()]
    assert len(said) == 2, said
    assert "rl.reward.mean (key 'train/reward') dropped a value" in said[0]
    assert "rl.reward.mean (key 'reward') dropped a value" in said[1]
    dropped = single(found, "rlmetrics.values.dropped", **{"rlmetrics.series": "rl.reward.mean"})
    assert dropped.value == 2
    assert dropped.attributes["rlmetrics.drop.reason"] == "nan"
    assert single(found, "rl.policy.loss").value == 0.3
