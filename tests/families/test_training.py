from __future__ import annotations

from typing import Any

import pytest

import rlmetrics
from rlmetrics.families.training import tee_scalar
from rlmetrics.testing import in_memory_telemetry, points, single

ROWS = [
    ("reward", "rl.reward.mean", "1"),
    ("kl_penalty", "rl.kl.divergence", "1"),
    ("loss", "rl.policy.loss", "1"),
    ("critic/loss", "rl.value.loss", "1"),
    ("approx_entropy", "rl.entropy", "1"),
    ("mean_gen_tokens_per_sample", "rl.response.length.mean", "{token}"),
    ("grad_norm", "rl.grad_norm", "1"),
    ("lr", "rl.learning_rate", "1"),
    ("loader_latency_max", "rl.sft_v2.loader.latency.max", "s"),
    ("policy_time", "rl.sft_v2.policy.duration", "s"),
    ("total_step_time", "rl.sft_v2.step.duration", "s"),
    ("valid_tokens_per_second", "rl.sft_v2.valid_tokens_per_second", "{token}/s"),
]


def _nested(flat: dict[str, float]) -> dict[str, Any]:
    """Log ``critic/loss`` the way PPO does, as a nested dict."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        head, _, tail = key.partition("/")
        if tail:
            nested.setdefault(head, {})[tail] = value
        else:
            nested[key] = value
    return nested


@pytest.mark.parametrize("prefix", ["train", ""])
def test_every_row_is_teed_as_an_unlabelled_gauge(exporting: Any, prefix: str) -> None:
    logger, reader = exporting
    values = {key: float(i + 1) / 4 for i, (key, _, _) in enumerate(ROWS)}
    logger.log_metrics(_nested(values), step=1, prefix=prefix)
    found = points(reader)
    for key, name, unit in ROWS:
        point = single(found, name)
        assert (point.kind, point.unit, point.attributes, point.value) == (
            "gauge",
            unit,
            {},
            values[key],
        ), name


def test_last_step_wins_and_other_prefixes_are_not_teed(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_metrics({"reward": 1.0, "loss": 3.0}, step=1, prefix="train")
    logger.log_metrics({"reward": 2.0}, step=2, prefix="train")
    logger.log_metrics({"reward": 99.0, "loss": 99.0}, step=2, prefix="validation")
    found = points(reader)
    assert single(found, "rl.reward.mean").value == 2.0
    assert single(found, "rl.policy.loss").value == 3.0


def test_a_none_or_non_numeric_value_drops_only_itself(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_metrics(
        {"reward": None, "loss": "nan?", "grad_norm": [1.0, 2.0], "lr": 1e-5, "kl_penalty": True},
        step=1,
        prefix="train",
    )
    found = points(reader)
    assert single(found, "rl.learning_rate").value == 1e-5
    assert not [p for p in found if p.name.startswith("rl.") and p.name != "rl.learning_rate"]


def test_nothing_is_recorded_unless_exporting() -> None:
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"reward": 1.0}, step=1, prefix="train")  # no telemetry: no error
    with in_memory_telemetry() as (_handle, reader):
        assert points(reader) == []


def test_a_downstream_algorithm_declares_its_own_row() -> None:
    accuracy = "accuracy"
    spec = tee_scalar(accuracy, "rl.dpo.accuracy", description="Preference accuracy")
    assert spec.key == accuracy
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.Logger(backends={}).log_metrics({accuracy: 0.75}, step=1, prefix="train")
        assert single(points(reader), "rl.dpo.accuracy").value == 0.75


def test_a_conflicting_row_fails_at_declaration() -> None:
    with pytest.raises(rlmetrics.DeclarationError, match=r"rlmetrics\.families\.training"):
        tee_scalar("reward", "rl.reward.mean", unit="s")
