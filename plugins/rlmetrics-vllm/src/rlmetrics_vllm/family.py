"""The ``vllm`` family: tees the engine's per-step keys into the ``rl.vllm.*`` series.

The training loop merges :func:`rlmetrics_vllm.engine.step_metrics` into its train dict, so the
trackers get the ``vllm/*`` keys like any other scalar; this plugin's ``log_metrics`` hook
mirrors the same values into OpenTelemetry. Each spec's registry key is the logger key, the
constant the engine reader emits, so a rename cannot orphan a series.

A per-step gauge (a mean, a rate, a share) that a later step does not bring is retracted, so a
dashboard shows a gap rather than an old step's value: a step without a reading, or one in
which an engine restarted (the reader then leaves every engine-state key out).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import rlmetrics
from rlmetrics import (
    OPEN,
    Kind,
    MetricSpec,
    hookimpl,
    is_exporting,
    record_declared,
    record_points,
    resets_process_state,
    retract,
)
from rlmetrics.events import TRAIN_PREFIXES
from rlmetrics.keyplans import KeyPlans
from rlmetrics.known_keys import declare_keys
from rlmetrics.spec import MEAN, SUM, weighted_mean
from rlmetrics.values import BoundedValues, key_attribute

from .engine import (
    AWAKE_SHARE_KEY,
    CACHED_PROMPT_TOKENS_KEY,
    GENERATION_LENGTH_MEAN_KEY,
    GENERATION_TOKENS_KEY,
    GENERATIONS_FAILED_KEY,
    GENERATIONS_OK_KEY,
    KV_CACHE_USAGE_KEY,
    MFU_KEY,
    PREEMPTIONS_KEY,
    PREFIX_CACHE_HIT_RATE_KEY,
    PROMPT_LENGTH_MEAN_KEY,
    PROMPT_TOKENS_KEY,
    REQUESTS_WAITING_PREFIX,
)

__all__ = [
    "GROUP",
    "REQUESTS_WAITING",
    "REQUESTS_WAITING_KEYS",
    "SPECS",
    "WAITING_REASON_ATTR",
    "log_metrics",
]

REQUESTS_WAITING = "rl.vllm.requests.waiting"
#: Its registry key: the pattern of the keys it is read from, one waiting reason each (the
#: reason is the key's tail), so the docs' tables show what to log and no plain key of its own
#: records a point without a reason.
REQUESTS_WAITING_KEYS = REQUESTS_WAITING_PREFIX + "*"
WAITING_REASON_ATTR = "rl.vllm.waiting.reason"
#: Waiting reasons told apart (vLLM 0.32.0 has two: capacity, deferred); later ones are other.
_MAX_REASONS = 8

GROUP = "vllm"

SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "rl.vllm.prompt_tokens",
        Kind.COUNTER,
        unit="{token}",
        key=PROMPT_TOKENS_KEY,
        description="Prefill tokens the vLLM engines processed in the step "
        "(delta of vllm:prompt_tokens, summed over engines and DP leaders).",
        reduce=SUM,
    ),
    MetricSpec(
        "rl.vllm.generation_tokens",
        Kind.COUNTER,
        unit="{token}",
        key=GENERATION_TOKENS_KEY,
        description="Tokens the vLLM engines generated in the step "
        "(delta of vllm:generation_tokens, summed over engines and DP leaders).",
        reduce=SUM,
    ),
    MetricSpec(
        "rl.vllm.prompt_length.mean",
        Kind.GAUGE,
        unit="{token}",
        key=PROMPT_LENGTH_MEAN_KEY,
        description="Mean prompt length of the requests finished in the step (sum/count delta "
        "of the vllm:request_prompt_tokens histogram); absent when none finished.",
        reduce=weighted_mean("rl.vllm.generations.ok"),
    ),
    MetricSpec(
        "rl.vllm.generation_length.mean",
        Kind.GAUGE,
        unit="{token}",
        key=GENERATION_LENGTH_MEAN_KEY,
        description="Mean generation length of the requests finished in the step (sum/count "
        "delta of vllm:request_generation_tokens); absent when none finished.",
        reduce=weighted_mean("rl.vllm.generations.ok"),
    ),
    MetricSpec(
        "rl.vllm.generations.ok",
        Kind.COUNTER,
        unit="{generation}",
        key=GENERATIONS_OK_KEY,
        description="Requests finished in the step with reason stop or length "
        "(vllm:request_success).",
        reduce=SUM,
    ),
    MetricSpec(
        "rl.vllm.generations.failed",
        Kind.COUNTER,
        unit="{generation}",
        key=GENERATIONS_FAILED_KEY,
        description="Requests finished in the step with any other reason (abort, error, "
        "repetition, or one added later): vllm:request_success total minus ok.",
        reduce=SUM,
    ),
    MetricSpec(
        "rl.vllm.prefix_cache.hit_rate",
        Kind.GAUGE,
        unit="1",
        key=PREFIX_CACHE_HIT_RATE_KEY,
        description="Prefix-cache hits over queries in the step (token deltas of "
        "vllm:prefix_cache_hits / vllm:prefix_cache_queries); absent when nothing was queried.",
        reduce=weighted_mean("rl.vllm.prompt_tokens"),
    ),
    MetricSpec(
        "rl.vllm.kv_cache.usage",
        Kind.GAUGE,
        unit="1",
        key=KV_CACHE_USAGE_KEY,
        description="The engines' mean KV-cache usage (vllm:kv_cache_usage_perc, 1 is full) "
        "at the step's second reading.",
        reduce=MEAN,
    ),
    MetricSpec(
        "rl.vllm.preemptions",
        Kind.COUNTER,
        unit="{preemption}",
        key=PREEMPTIONS_KEY,
        description="Requests the engines preempted in the step (delta of vllm:num_preemptions).",
        reduce=SUM,
    ),
    MetricSpec(
        "rl.vllm.cached_prompt_tokens",
        Kind.COUNTER,
        unit="{token}",
        key=CACHED_PROMPT_TOKENS_KEY,
        description="Prompt tokens served from a cache in the step, local or external (delta "
        "of vllm:prompt_tokens_cached).",
        reduce=SUM,
    ),
    MetricSpec(
        "rl.vllm.engine.awake",
        Kind.GAUGE,
        unit="1",
        key=AWAKE_SHARE_KEY,
        description="Share of the step the engines were awake (vllm:engine_sleep_state, "
        "time-weighted over the step's readings); in colocated RL, 1 minus the generation "
        "fleet's sleep while the policy trains.",
        reduce=MEAN,
    ),
    MetricSpec(
        "rl.vllm.mfu",
        Kind.GAUGE,
        unit="1",
        key=MFU_KEY,
        description="Inference model FLOPs utilisation over the step: the engines' mean "
        "vllm:estimated_flops_per_gpu delta per second over the peak FLOPs the user gave.",
        reduce=MEAN,
    ),
    MetricSpec(
        REQUESTS_WAITING,
        Kind.GAUGE,
        unit="{request}",
        key=REQUESTS_WAITING_KEYS,
        description="Requests waiting at the step's second reading, by vLLM's reason "
        "(vllm:num_requests_waiting_by_reason, summed over engines).",
        attributes={WAITING_REASON_ATTR: OPEN},
        max_series=_MAX_REASONS + 1,
        reduce=SUM,
    ),
)

rlmetrics.declare(GROUP, SPECS)
# Read beside the series' keys: one gauge by waiting reason (the reason is the key's tail).
declare_keys([REQUESTS_WAITING_KEYS], note="requests waiting, by reason")


_MEAN_KEYS = frozenset(
    {
        PROMPT_LENGTH_MEAN_KEY,
        GENERATION_LENGTH_MEAN_KEY,
        PREFIX_CACHE_HIT_RATE_KEY,
        KV_CACHE_USAGE_KEY,
        AWAKE_SHARE_KEY,
        MFU_KEY,
    }
)
_reasons = BoundedValues(_MAX_REASONS)
# The waiting reasons exported, each as its prepared attribute set.
_waiting: dict[str, frozenset[tuple[str, str]]] = {}

# The step each per-step gauge is showing: the means by their key, the requests waiting by
# their series' name. A gauge goes on exporting its last value, so it must be ended when a
# later step brings none: step_metrics and engine_signals leave a restart step with no vllm/*
# key at all, and nothing else tells that step apart from one with no reading.
_mean_steps: dict[str, int] = {}
_mean_steps_lock = threading.Lock()


@resets_process_state
def _forget_mean_steps() -> None:
    with _mean_steps_lock:
        _mean_steps.clear()


#: The keys this hook reads: its series' keys (the waiting reasons' by their prefix).
_READ_KEYS = frozenset(spec.key for spec in SPECS if spec.key != REQUESTS_WAITING_KEYS)


def _find_read_keys(keys: tuple[Any, ...]) -> bool:
    return any(
        type(key) is str and (key in _READ_KEYS or key.startswith(REQUESTS_WAITING_PREFIX))
        for key in keys
    )


#: Whether a key sequence has a key this hook reads, worked out once per sequence.
_has_read_keys = KeyPlans(_find_read_keys)


# Not keys=[...]: a train dict without vllm/* keys still ends the means a previous step
# exported (see below), so the hook reads every train dict while a mean is shown.
@hookimpl(tee=True, prefixes=TRAIN_PREFIXES)
def log_metrics(metrics: Mapping[str, Any], step: int, prefix: str) -> None:
    """Mirror a train dict's ``vllm/*`` keys into ``rl.vllm.*``."""
    if not is_exporting():
        return
    if not _mean_steps and not _has_read_keys(tuple(metrics)):
        return  # most train dicts of a loop without vLLM: nothing to record or to end
    values = record_declared(GROUP, metrics)
    waiting = _tee_waiting(metrics)
    with _mean_steps_lock:
        for key in _MEAN_KEYS:
            if _ended(key, key in values, bool(values), step):
                retract(GROUP, key)
        if _ended(REQUESTS_WAITING, waiting, bool(values), step):
            for attributes in _waiting.values():
                retract(GROUP, REQUESTS_WAITING_KEYS, attributes)


def _ended(shown: str, brought: bool, reading: bool, step: int) -> bool:
    """Note the step a per-step gauge shows; whether this train dict ends it (hold the lock).

    A reading without the gauge (no request finished, or its totals went backwards), or a
    later step without one (a restart omitted every key), ends it: the dashboard shows a gap,
    not the previous step's value. Another train dict of the same step without vllm/* keys
    leaves it alone.
    """
    if brought:
        _mean_steps[shown] = step
        return False
    if shown in _mean_steps and (reading or _mean_steps[shown] != step):
        del _mean_steps[shown]
        return True
    return False


#: The ``vllm/requests_waiting/*`` keys (with their reason) of each key sequence a loop logs:
#: found once per sequence, not with a string test per key every step.
_waiting_plans: dict[tuple[Any, ...], tuple[tuple[str, str], ...]] = {}
_MAX_PLANS = 64


def _waiting_keys(keys: tuple[Any, ...]) -> tuple[tuple[str, str], ...]:
    plan = _waiting_plans.get(keys)
    if plan is None:
        plan = tuple(
            (key, key[len(REQUESTS_WAITING_PREFIX) :])
            for key in keys
            if type(key) is str and key.startswith(REQUESTS_WAITING_PREFIX)
        )
        if len(_waiting_plans) >= _MAX_PLANS:
            _waiting_plans.clear()  # a loop whose key sequences churn: start over
        _waiting_plans[keys] = plan
    return plan


def _tee_waiting(metrics: Mapping[str, Any]) -> bool:
    """``vllm/requests_waiting/<reason>`` keys as one gauge by reason; whether any was."""
    points = []
    for key, reason in _waiting_keys(tuple(metrics)):
        if key_attribute(reason, "vLLM waiting reason") is None:
            continue
        label = _reasons(reason)
        attributes = _waiting.get(label)
        if attributes is None:
            attributes = _waiting[label] = frozenset({(WAITING_REASON_ATTR, label)})
        points.append((metrics[key], attributes))
    if points:
        record_points(GROUP, REQUESTS_WAITING_KEYS, points)
    return bool(points)


@hookimpl
def telemetry_started() -> None:
    # Each session tells apart its own first waiting reasons (and retracts only its own).
    _reasons.clear()
    _waiting.clear()
