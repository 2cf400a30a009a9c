"""Trajectories as bounded metrics: what ``on_trajectories`` delivers (a ``log_trajectories``
batch or one live trajectory), counted from the same records its spans and rows come from.

- ``rl.trajectory.completed`` (counter): trajectories by ``rl.trajectory.outcome``,
  ``rl.trajectory.finish_reason`` and ``rl.env``;
- ``rl.trajectory.turns``, ``rl.trajectory.tool_calls`` (histograms): per trajectory, by env;
- ``rl.tool.calls`` (counter): tool calls by ``gen_ai.tool.name`` and ``rl.tool.outcome``,
  every call a trajectory had (those past its caps too), as ``rl.trajectory.tool_calls``;
- ``rl.trajectory.tokens`` (counter): input and output tokens (``gen_ai.token.type``) by env;
- ``rl.trajectory.duration`` (histogram, s): each rollout's wall time by outcome and env,
  recorded inside the trajectory's span, so its exemplars point at trajectory spans;
- ``rl.trajectory.reward.summed`` (up-down counter) and ``rl.trajectory.reward.count``
  (counter): by env, the rewards of a named component under its ``rl.reward.component``, and
  under ``total`` each trajectory's total, the one its span's ``rl.reward`` and its row's
  ``reward`` show (a reward without a component is a part of it, not counted on its own).
  Their ratio is the mean reward. A sum and a count rather than a histogram because rewards
  are often negative (a format penalty) and an OpenTelemetry histogram takes no negative
  value: the SDK drops it, so a histogram's mean would be that of the other rewards;
- ``rl.trajectory.spans.dropped`` (counter): trajectories the span budget left without spans.

Off-policy signals, from the records' weight versions, ``logprob_mismatch`` and
``importance_ratio`` (async RL trains on rollouts an older policy generated):

- ``rl.offpolicy.staleness`` (histogram, ``{version}``): how many weight versions behind the
  policy being trained each rollout's policy was;
- ``rl.offpolicy.logprob_mismatch`` (histogram): the rollout engine's logprobs against the
  trainer's, by that lag (``rl.offpolicy.lag``: ``0`` … ``3``, ``4+``);
- ``rl.offpolicy.importance_ratio`` (histogram): the trainer's probability over the engine's;
  its quantiles (``histogram_quantile``) show how far off-policy the batch is.

The family's dashboard rows and its alert (``RLRolloutsStale``: the 90th percentile of
staleness above ``offpolicy.staleness`` versions for 10 minutes) come with it.

Names (envs, tools, finish reasons, reward components) come from the records, so they are
bounded: a name outside ``[A-Za-z0-9_./-]{1,64}`` or past the first few distinct ones of a
telemetry session is ``other``, and each series has its cap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .. import hookimpl
from ..registry import declare, record, record_values
from ..spec import OPEN, SUM, Kind, MetricSpec
from ..trajectories import OUTCOMES, TOOL_OUTCOMES, TrajectoryBatch, inside
from ..trajectories.spans import (
    ENV_ATTR,
    OUTCOME_ATTR,
    REWARD_COMPONENT_ATTR,
    TOOL_NAME_ATTR,
    TOOL_OUTCOME_ATTR,
    TRAJECTORY_FINISH_REASON_ATTR,
    duration_s,
)
from ..values import OTHER, BoundedValues, key_attribute

if TYPE_CHECKING:
    from ..telemetry import Telemetry

__all__ = [
    "COMPLETED",
    "DROPPED",
    "DURATION",
    "GROUP",
    "IMPORTANCE_RATIO",
    "LOGPROB_MISMATCH",
    "STALENESS",
    "REWARD_COUNT",
    "REWARD_SUMMED",
    "TOKENS",
    "TOOL_CALLS",
    "TOOL_CALL_COUNT",
    "TURNS",
    "record_batch",
]

GROUP = "rl.trajectory"
COMPLETED: Final = "rl.trajectory.completed"
TURNS: Final = "rl.trajectory.turns"
TOOL_CALLS: Final = "rl.trajectory.tool_calls"
TOOL_CALL_COUNT: Final = "rl.tool.calls"
TOKENS: Final = "rl.trajectory.tokens"
DURATION: Final = "rl.trajectory.duration"
REWARD_SUMMED: Final = "rl.trajectory.reward.summed"
REWARD_COUNT: Final = "rl.trajectory.reward.count"
DROPPED: Final = "rl.trajectory.spans.dropped"
TOKEN_TYPE_ATTR = "gen_ai.token.type"
STALENESS: Final = "rl.offpolicy.staleness"
LOGPROB_MISMATCH: Final = "rl.offpolicy.logprob_mismatch"
IMPORTANCE_RATIO: Final = "rl.offpolicy.importance_ratio"
LAG_ATTR = "rl.offpolicy.lag"
LAGS = ("0", "1", "2", "3", "4+")

MAX_ENVS = 16
MAX_TOOLS = 64
MAX_FINISH_REASONS = 8
MAX_COMPONENTS = 16

_COUNT_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256, 1024)
# The GenAI conventions' duration buckets (0.01 s doubling to 81.92 s), then minutes.
_SECONDS_BUCKETS = (
    *(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92),
    *(163.84, 327.68, 655.36, 1310.72),
)
_STALENESS_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 32)
_MISMATCH_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5)
_RATIO_BUCKETS = (0.5, 0.8, 0.9, 0.95, 0.98, 1, 1.02, 1.05, 1.1, 1.25, 2, 5, 10)

#: The reward series' attributes and bound, the sum's and the count's alike.
_BY_COMPONENT: dict[str, Any] = {
    "attributes": {REWARD_COMPONENT_ATTR: OPEN, ENV_ATTR: OPEN},
    "max_series": (MAX_COMPONENTS + 2) * (MAX_ENVS + 2),
}

declare(
    GROUP,
    [
        MetricSpec(
            COMPLETED,
            Kind.COUNTER,
            reduce=SUM,
            unit="{trajectory}",
            description="Finished trajectories (rollouts) by outcome, finish reason and env",
            attributes={
                OUTCOME_ATTR: set(OUTCOMES),
                TRAJECTORY_FINISH_REASON_ATTR: OPEN,
                ENV_ATTR: OPEN,
            },
            max_series=len(OUTCOMES) * (MAX_FINISH_REASONS + 2) * (MAX_ENVS + 2),
        ),
        MetricSpec(
            TURNS,
            Kind.HISTOGRAM,
            reduce=SUM,
            unit="{turn}",
            description="Turns per trajectory, by env",
            attributes={ENV_ATTR: OPEN},
            max_series=MAX_ENVS + 2,
            buckets=_COUNT_BUCKETS,
        ),
        MetricSpec(
            TOOL_CALLS,
            Kind.HISTOGRAM,
            reduce=SUM,
            unit="{call}",
            description="Tool calls per trajectory, by env",
            attributes={ENV_ATTR: OPEN},
            max_series=MAX_ENVS + 2,
            buckets=_COUNT_BUCKETS,
        ),
        MetricSpec(
            TOOL_CALL_COUNT,
            Kind.COUNTER,
            reduce=SUM,
            unit="{call}",
            description="Tool calls made in trajectories, by tool and outcome",
            attributes={TOOL_NAME_ATTR: OPEN, TOOL_OUTCOME_ATTR: set(TOOL_OUTCOMES)},
            max_series=(MAX_TOOLS + 1) * len(TOOL_OUTCOMES),
        ),
        MetricSpec(
            TOKENS,
            Kind.COUNTER,
            reduce=SUM,
            unit="{token}",
            description="Tokens generated and read in trajectories, by token type and env",
            attributes={TOKEN_TYPE_ATTR: {"input", "output"}, ENV_ATTR: OPEN},
            max_series=2 * (MAX_ENVS + 2),
        ),
        MetricSpec(
            DURATION,
            Kind.HISTOGRAM,
            reduce=SUM,
            unit="s",
            description="Wall time of one trajectory (rollout), by outcome and env; exemplars "
            "point at the trajectory's span",
            attributes={OUTCOME_ATTR: set(OUTCOMES), ENV_ATTR: OPEN},
            max_series=len(OUTCOMES) * (MAX_ENVS + 2),
            buckets=_SECONDS_BUCKETS,
        ),
        MetricSpec(
            REWARD_SUMMED,
            Kind.UP_DOWN_COUNTER,
            reduce=SUM,
            unit="1",
            description="Sum of the rewards of trajectories, by reward component and env (over "
            "rl.trajectory.reward.count: the mean reward; negative rewards count)",
            **_BY_COMPONENT,
        ),
        MetricSpec(
            REWARD_COUNT,
            Kind.COUNTER,
            reduce=SUM,
            unit="{reward}",
            description="Rewards of trajectories, by reward component and env",
            **_BY_COMPONENT,
        ),
        MetricSpec(
            STALENESS,
            Kind.HISTOGRAM,
            reduce=SUM,
            unit="{version}",
            description="Weight versions between the policy that generated a rollout and the "
            "one trained on it",
            buckets=_STALENESS_BUCKETS,
        ),
        MetricSpec(
            LOGPROB_MISMATCH,
            Kind.HISTOGRAM,
            reduce=SUM,
            unit="1",
            description="Mismatch between the rollout engine's and the trainer's logprobs of a "
            "rollout, by weight-version lag",
            attributes={LAG_ATTR: set(LAGS)},
            buckets=_MISMATCH_BUCKETS,
        ),
        MetricSpec(
            IMPORTANCE_RATIO,
            Kind.HISTOGRAM,
            reduce=SUM,
            unit="1",
            description="Importance ratio (trainer over rollout engine probability) of a rollout",
            buckets=_RATIO_BUCKETS,
        ),
        MetricSpec(
            DROPPED,
            Kind.COUNTER,
            reduce=SUM,
            unit="{trajectory}",
            description="Trajectories the span budget left without spans (their metrics and "
            "rows are kept)",
        ),
    ],
)


class _Names:
    """An open attribute's values from records, bounded (see the module's docstring)."""

    __slots__ = ("_values",)

    def __init__(self, limit: int) -> None:
        self._values = BoundedValues(limit)

    def __call__(self, value: str | None) -> str | None:
        if value is None:
            return None
        safe = key_attribute(value)
        return self._values(safe) if safe is not None else OTHER

    def clear(self) -> None:
        self._values.clear()


_envs = _Names(MAX_ENVS)
_tools = _Names(MAX_TOOLS)
_reasons = _Names(MAX_FINISH_REASONS)
_components = _Names(MAX_COMPONENTS)


# Attribute sets prepared once each (``record`` takes them as they are), found by the pairs
# as given (a None value included): their values are bounded above, so this holds at most a
# few thousand.
_attribute_sets: dict[tuple[tuple[str, str | None], ...], frozenset[tuple[str, str]]] = {}


def _attributes(*pairs: tuple[str, str | None]) -> frozenset[tuple[str, str]]:
    """The attribute set of ``pairs``, without the ones whose value is None."""
    found = _attribute_sets.get(pairs)
    if found is None:
        found = _attribute_sets[pairs] = frozenset((k, v) for k, v in pairs if v is not None)
    return found


# What depends only on a name, kept from batch to batch (a run's rollouts hold the same few
# envs, tools and components; a batch of one trajectory found each anew): a raw name's
# bounded value, found by the raw name, and the attribute sets of bounded values. A session's
# start empties them all, as it does the names; the ones found by raw names are emptied too
# past _MEMO_MAX entries (a record may make names up, each one "other").
_MEMO_MAX = 4096
_env_of: dict[str | None, str | None] = {}
_reason_of: dict[str | None, str | None] = {}
_tool_of: dict[tuple[str, str], tuple[str, str]] = {}
_component_of: dict[str, str | None] = {}
_BY_RAW_NAME: tuple[dict[Any, Any], ...] = (_env_of, _reason_of, _tool_of, _component_of)
_env_sets: dict[str | None, frozenset[tuple[str, str]]] = {}
_reward_sets: dict[tuple[str | None, str | None], frozenset[tuple[str, str]]] = {}
_timed_sets: dict[tuple[str, str | None], frozenset[tuple[str, str]]] = {}
_memos: tuple[dict[Any, Any], ...] = (*_BY_RAW_NAME, _env_sets, _reward_sets, _timed_sets)


def record_batch(batch: TrajectoryBatch) -> None:
    """Record the metrics of ``batch`` (what the hook does). Counters are added up over the
    batch first (one point per attribute set); histograms take one value per trajectory, the
    values outside every span gathered per attribute set and handed over in one call each
    (``record_values``: the same values, without a call per value).

    What depends only on a name (its bounded value, the attribute sets it is in) is found once
    per session (``_memos``), not once per trajectory or batch: a run's rollouts hold a few
    envs, tools and components, and the per-trajectory Python left is the points themselves."""
    if batch.dropped:
        record(GROUP, {DROPPED: batch.dropped})
    completed: dict[tuple[str, str | None, str | None], int] = {}
    tokens: dict[tuple[str, str | None], int] = {}
    calls: dict[tuple[str, str], int] = {}
    # (component, env): [sum, count], recorded once per batch like the counters.
    reward_sums: dict[tuple[str | None, str | None], list[float]] = {}
    # Histogram values by attribute set: turns and tool calls by env, durations outside a span.
    counts: dict[frozenset[tuple[str, str]], tuple[list[int], list[int]]] = {}
    durations: dict[frozenset[tuple[str, str]], list[float]] = {}
    contexts = batch.contexts
    trained = batch.trainer_weight_version
    envs, reasons, tools, components = _env_of, _reason_of, _tool_of, _component_of
    by_env, rewarded, timed = _env_sets, _reward_sets, _timed_sets
    for index, t in enumerate(batch.trajectories):
        raw_env = t.env
        try:
            env = envs[raw_env]
        except KeyError:
            env = envs[raw_env] = _envs(raw_env)
        raw_reason = t.finish_reason
        try:
            reason = reasons[raw_reason]
        except KeyError:
            reason = reasons[raw_reason] = _reasons(raw_reason)
        outcome_name = t.outcome
        key = (outcome_name, reason, env)
        completed[key] = completed.get(key, 0) + 1
        env_set = by_env.get(env)
        if env_set is None:
            env_set = by_env[env] = _attributes((ENV_ATTR, env))
        per_env = counts.get(env_set)
        if per_env is None:
            per_env = counts[env_set] = ([], [])
        per_env[0].append(t.turn_count)
        per_env[1].append(t.tool_call_count)
        given = taken = 0
        for turn in t.turns:
            for generation in turn.generations:
                given += generation.input_tokens or 0
                taken += generation.output_tokens or 0
            for call in turn.tool_calls:
                raw_tool = (call.name, call.outcome)
                tool = tools.get(raw_tool)
                if tool is None:
                    tool = tools[raw_tool] = (_tools(call.name) or OTHER, call.outcome)
                calls[tool] = calls.get(tool, 0) + 1
        past = t.tool_calls_past_caps  # counted, not kept (past a record's caps)
        if past:
            for name, call_outcome, n in past:
                raw_tool = (name, call_outcome)
                tool = tools.get(raw_tool)
                if tool is None:
                    tool = tools[raw_tool] = (_tools(name) or OTHER, call_outcome)
                calls[tool] = calls.get(tool, 0) + n
        if given:
            tokens[("input", env)] = tokens.get(("input", env), 0) + given
        if taken:
            tokens[("output", env)] = tokens.get(("output", env), 0) + taken
        rewards = t.all_rewards()
        for reward in rewards:
            raw_component = reward.component
            if raw_component == "total":  # a part of the total, recorded as that below
                continue
            try:
                component = components[raw_component]
            except KeyError:
                component = components[raw_component] = _components(raw_component)
            summed = reward_sums.setdefault((component, env), [0.0, 0])
            summed[0] += reward.value
            summed[1] += 1
        # The total its span and row show, once: the given one, else the sum of its rewards.
        total = t.total_reward(rewards)
        if total is not None:
            summed = reward_sums.setdefault(("total", env), [0.0, 0])
            summed[0] += total
            summed[1] += 1
        lag = t.staleness(trained)
        if lag is not None:
            record(GROUP, {STALENESS: lag})
        if t.logprob_mismatch is not None:
            by_lag = {} if lag is None else {LAG_ATTR: LAGS[min(lag, 4)]}
            record(GROUP, {LOGPROB_MISMATCH: t.logprob_mismatch}, by_lag)
        if t.importance_ratio is not None:
            record(GROUP, {IMPORTANCE_RATIO: t.importance_ratio})
        # Inside the trajectory's span: the exemplar names it.
        seconds = duration_s(t)
        if seconds is None:  # a record that says no time: no duration to count
            continue
        outcome = timed.get((outcome_name, env))
        if outcome is None:
            outcome = timed[(outcome_name, env)] = _attributes(
                (OUTCOME_ATTR, outcome_name), (ENV_ATTR, env)
            )
        context = contexts[index] if index < len(contexts) else None
        if context is None:
            timed_values = durations.get(outcome)
            if timed_values is None:
                timed_values = durations[outcome] = []
            timed_values.append(seconds)
        else:
            with inside(context):
                record(GROUP, {DURATION: seconds}, outcome)
    for env_set, (turn_counts, tool_call_counts) in counts.items():
        record_values(GROUP, TURNS, turn_counts, env_set)
        record_values(GROUP, TOOL_CALLS, tool_call_counts, env_set)
    if durations:
        # Durations of trajectories without a span (the budget dropped it): in a context with
        # no span, so they make no exemplar. In the current one (the step's span, inside an
        # rlmetrics.step) each bucket they reach would take the step span as its exemplar,
        # over the traced trajectories' spans recorded above.
        with inside(_no_span()):
            for outcome, seconds_list in durations.items():
                record_values(GROUP, DURATION, seconds_list, outcome)
    for (outcome_name, reason, env), n in completed.items():
        attributes = _attributes(
            (OUTCOME_ATTR, outcome_name), (TRAJECTORY_FINISH_REASON_ATTR, reason), (ENV_ATTR, env)
        )
        record(GROUP, {COMPLETED: n}, attributes)
    for component_env, (value_sum, count) in reward_sums.items():
        reward_set = rewarded.get(component_env)
        if reward_set is None:
            reward_set = rewarded[component_env] = _attributes(
                (REWARD_COMPONENT_ATTR, component_env[0]), (ENV_ATTR, component_env[1])
            )
        record(GROUP, {REWARD_SUMMED: value_sum, REWARD_COUNT: int(count)}, reward_set)
    for (kind, env), n in tokens.items():
        record(GROUP, {TOKENS: n}, _attributes((TOKEN_TYPE_ATTR, kind), (ENV_ATTR, env)))
    for (tool_name, tool_outcome), n in calls.items():
        record(
            GROUP,
            {TOOL_CALL_COUNT: n},
            _attributes((TOOL_NAME_ATTR, tool_name), (TOOL_OUTCOME_ATTR, tool_outcome)),
        )
    for memo in _BY_RAW_NAME:
        if len(memo) > _MEMO_MAX:
            memo.clear()


def _no_span() -> Any:
    """An OpenTelemetry context holding no span (a new one each time: cheap, and a context
    is a mapping a caller could fill)."""
    from opentelemetry.context import Context

    return Context()


@hookimpl(tee=True)
def on_trajectories(batch: TrajectoryBatch) -> None:
    record_batch(batch)


@hookimpl
def telemetry_started(telemetry: Telemetry) -> None:
    """A new session tells its names apart afresh."""
    for names in (_envs, _tools, _reasons, _components):
        names.clear()
    _attribute_sets.clear()
    for memo in _memos:
        memo.clear()
