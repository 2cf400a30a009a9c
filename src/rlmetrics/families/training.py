"""Training scalars: the per-step keys every RL loop logs, mirrored as unlabelled gauges.

Each row is declared from the logger key its algorithm logs, so a rename cannot leave a gauge
silently reporting nothing. A downstream algorithm adds its own row with :func:`tee_scalar`
from the constant it logs with — no rlmetrics release, no edit here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import hookimpl
from ..events import TRAIN_PREFIXES
from ..registry import _caller_module, default_registry, record_declared
from ..spec import Kind, MetricSpec

__all__ = ["GROUP", "tee_scalar"]

GROUP = "rl.train"


def tee_scalar(logger_key: str, name: str, *, unit: str = "1", description: str = "") -> MetricSpec:
    """Declare that ``logger_key`` in a ``train`` (or ``""``) dict is teed as gauge ``name``.

    Call it at import time of the module that logs the key, with the same constant::

        ACCURACY = "accuracy"
        tee_scalar(ACCURACY, "rl.dpo.accuracy", description="Preference accuracy")
        ...
        logger.log_metrics({ACCURACY: acc}, step, prefix="train")
    """
    spec = MetricSpec(name, Kind.GAUGE, unit=unit, description=description, key=logger_key)
    default_registry().declare(GROUP, [spec], owner=_caller_module(1))
    return spec


# NeMo-RL's rows (see the spec's "Training scalars" tables). kl_penalty holds the divergence
# itself (the coefficient is divided back out), hence rl.kl.divergence.
tee_scalar("reward", "rl.reward.mean", description="Mean reward of the step's samples")
tee_scalar("kl_penalty", "rl.kl.divergence", description="KL divergence to the reference policy")
tee_scalar("loss", "rl.policy.loss", description="Policy loss")
tee_scalar("critic/loss", "rl.value.loss", description="Value (critic) loss (PPO)")
tee_scalar("approx_entropy", "rl.entropy", description="Approximate policy entropy")
tee_scalar(
    "mean_gen_tokens_per_sample",
    "rl.response.length.mean",
    unit="{token}",
    description="Mean generated tokens per sample",
)
tee_scalar("grad_norm", "rl.grad_norm", description="Gradient norm")
tee_scalar("lr", "rl.learning_rate", description="Learning rate")
tee_scalar(
    "loader_latency_max",
    "rl.sft_v2.loader.latency.max",
    unit="s",
    description="SFT v2: slowest data-loader fetch of the step",
)
tee_scalar("policy_time", "rl.sft_v2.policy.duration", unit="s", description="SFT v2: policy time")
tee_scalar(
    "total_step_time", "rl.sft_v2.step.duration", unit="s", description="SFT v2: step wall time"
)
tee_scalar(
    "valid_tokens_per_second",
    "rl.sft_v2.valid_tokens_per_second",
    unit="{token}/s",
    description="SFT v2: valid (non-padding) tokens processed per second",
)


@hookimpl(tee=True)
def log_metrics(metrics: Mapping[str, Any], prefix: str) -> None:
    if prefix in TRAIN_PREFIXES:
        record_declared(GROUP, metrics)
