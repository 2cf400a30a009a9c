"""RLMetricsTracker in a real ``Accelerator(log_with=[...])`` loop on CPU: a few optimizer
steps of a toy model, logged with ``Accelerator.log``, read back from the JSONL file and the
real SDK's in-memory reader."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from accelerate import Accelerator
from rlmetrics_accelerate import RLMetricsTracker

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.testing import points


def _loop(tracker: RLMetricsTracker, steps: int = 3) -> list[float]:
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("grpo", config={"lr": 0.1, "model": {"layers": 2}})
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    losses = []
    for step in range(1, steps + 1):
        x, y = torch.randn(4, 2), torch.randn(4, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        # NeMo-RL's keys: the training family tees them without a key map.
        accelerator.log({"loss": loss.item(), "reward": float(step), "kl_penalty": loss}, step=step)
    accelerator.end_training()
    return losses


def test_accelerate_logs_each_step_the_configuration_and_finishes(
    tmp_path: Path, telemetry: tuple[Any, Any]
) -> None:
    _handle, reader = telemetry
    path = tmp_path / "metrics.jsonl"
    tracker = RLMetricsTracker(backends={"jsonl": {"path": path}})
    losses = _loop(tracker)
    rows = list(read_jsonl(path))
    assert [(row["step"], row["prefix"]) for row in rows] == [
        (1, "train"),
        (2, "train"),
        (3, "train"),
    ]
    assert [row["metrics"]["loss"] for row in rows] == losses
    assert rows[-1]["metrics"]["kl_penalty"] == pytest.approx(losses[-1])  # a tensor, read
    exported = {p.name: p.value for p in points(reader) if not p.attributes}
    assert exported["rl.policy.loss"] == losses[-1]
    assert exported["rl.reward.mean"] == 3.0
    assert exported["rl.kl.divergence"] == pytest.approx(losses[-1])
    (config,) = [row for row in read_jsonl(path, every_row=True) if "hyperparams" in row]
    assert config["hyperparams"]["lr"] == 0.1
    assert tracker.tracker is None  # end_training finished the Logger it built


def test_a_key_map_makes_the_loops_keys_series(telemetry: tuple[Any, Any]) -> None:
    _handle, reader = telemetry
    tracker = RLMetricsTracker(backends={}, key_map="verl")
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("verl-like")
    accelerator.log({"critic/rewards/mean": 0.75, "actor/kl_loss": torch.tensor(0.5)}, step=2)
    exported = {p.name: p.value for p in points(reader) if not p.attributes}
    accelerator.end_training()
    assert exported["rl.reward.mean"] == 0.75 and exported["rl.kl.divergence"] == 0.5


class BrokenLogger(rlmetrics.Logger):
    def log_metrics(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in rlmetrics")

    log_hyperparams = log_metrics  # type: ignore[assignment]


def test_an_rlmetrics_failure_never_fails_the_loop(caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        losses = _loop(RLMetricsTracker(BrokenLogger(backends={})))
    assert len(losses) == 3
    failed = [r for r in caplog.records if "rlmetrics-accelerate: log failed" in r.getMessage()]
    assert len(failed) == 1


def test_bad_values_drop_only_themselves(tmp_path: Path, telemetry: tuple[Any, Any]) -> None:
    _handle, reader = telemetry
    path = tmp_path / "metrics.jsonl"
    tracker = RLMetricsTracker(backends={"jsonl": {"path": path}})
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("bad")
    accelerator.log(
        {"loss": float("nan"), "reward": None, "kl_penalty": torch.tensor(0.25), "lr": "high"},
        step=5,
    )
    exported = {p.name: p.value for p in points(reader) if not p.attributes}
    accelerator.end_training()
    assert exported["rl.kl.divergence"] == 0.25  # a 0-d tensor, read
    training = {"rl.policy.loss", "rl.reward.mean", "rl.learning_rate"}
    assert training.isdisjoint(exported)  # the NaN, the None and the string dropped alone
    (row,) = list(read_jsonl(path))
    assert (
        row["step"] == 5 and row["metrics"]["kl_penalty"] == 0.25 and row["metrics"]["lr"] == "high"
    )
