"""The ``vllm`` family: tees the engine's per-step keys into the ``rl.vllm.*`` series.

The training loop merges :func:`rlmetrics_vllm.engine.step_metrics` into its train dict, so the
trackers get the ``vllm/*`` keys like any other scalar; this plugin's ``log_metrics`` hook
mirrors the same values into OpenTelemetry. Each spec's registry key is the logger key, the
constant the engine reader emits, so a rename cannot orphan a series.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import rlmetrics
from rlmetrics import (
    Kind,
    MetricSpec,
    hookimpl,
    is_exporting,
    record_declared,
    resets_process_state,
    retract,
)
from rlmetrics.events import TRAIN_PREFIXES

from .engine import (
    GENERATION_LENGTH_MEAN_KEY,
    GENERATION_TOKENS_KEY,
    GENERATIONS_FAILED_KEY,
    GENERATIONS_OK_KEY,
    PROMPT_LENGTH_MEAN_KEY,
    PROMPT_TOKENS_KEY,
)

__all__ = ["GROUP", "SPECS", "log_metrics"]

GROUP = "vllm"

SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "rl.vllm.prompt_tokens",
        Kind.COUNTER,
        unit="{token}",
        key=PROMPT_TOKENS_KEY,
        description="Prefill tokens the vLLM engines processed in the step "
        "(delta of vllm:prompt_tokens, summed over engines and DP leaders).",
    ),
    MetricSpec(
        "rl.vllm.generation_tokens",
        Kind.COUNTER,
        unit="{token}",
        key=GENERATION_TOKENS_KEY,
        description="Tokens the vLLM engines generated in the step "
        "(delta of vllm:generation_tokens, summed over engines and DP leaders).",
    ),
    MetricSpec(
        "rl.vllm.prompt_length.mean",
        Kind.GAUGE,
        unit="{token}",
        key=PROMPT_LENGTH_MEAN_KEY,
        description="Mean prompt length of the requests finished in the step (sum/count delta "
        "of the vllm:request_prompt_tokens histogram); absent when none finished.",
    ),
    MetricSpec(
        "rl.vllm.generation_length.mean",
        Kind.GAUGE,
        unit="{token}",
        key=GENERATION_LENGTH_MEAN_KEY,
        description="Mean generation length of the requests finished in the step (sum/count "
        "delta of vllm:request_generation_tokens); absent when none finished.",
    ),
    MetricSpec(
        "rl.vllm.generations.ok",
        Kind.COUNTER,
        unit="{generation}",
        key=GENERATIONS_OK_KEY,
        description="Requests finished in the step with reason stop or length "
        "(vllm:request_success).",
    ),
    MetricSpec(
        "rl.vllm.generations.failed",
        Kind.COUNTER,
        unit="{generation}",
        key=GENERATIONS_FAILED_KEY,
        description="Requests finished in the step with any other reason (abort, error, "
        "repetition, or one added later): vllm:request_success total minus ok.",
    ),
)

rlmetrics.declare(GROUP, SPECS)


_MEAN_KEYS = frozenset({PROMPT_LENGTH_MEAN_KEY, GENERATION_LENGTH_MEAN_KEY})

# The step each mean gauge is showing. A gauge goes on exporting its last value, so a mean
# must be ended when a later step brings none: step_metrics leaves a restart step with no
# vllm/* key at all, and nothing else tells that step apart from one with no reading.
_mean_steps: dict[str, int] = {}
_mean_steps_lock = threading.Lock()


@resets_process_state
def _forget_mean_steps() -> None:
    with _mean_steps_lock:
        _mean_steps.clear()


@hookimpl(tee=True)
def log_metrics(metrics: Mapping[str, Any], step: int, prefix: str) -> None:
    """Mirror a train dict's ``vllm/*`` keys into ``rl.vllm.*``."""
    if not is_exporting():
        return
    if prefix not in TRAIN_PREFIXES:
        return
    values = record_declared(GROUP, metrics)
    with _mean_steps_lock:
        for key in _MEAN_KEYS:
            if key in values:
                _mean_steps[key] = step
            elif key in _mean_steps and (values or _mean_steps[key] != step):
                # A reading without this mean (no request finished, or its totals went
                # backwards), or a later step without one (a restart omitted every key): the
                # dashboard shows a gap, not the previous step's value. Another train dict of
                # the same step without vllm/* keys leaves it alone.
                del _mean_steps[key]
                retract(GROUP, key)
