"""A trajectory record as spans, named and attributed by the OpenTelemetry GenAI semantic
conventions, with explicit start and end times taken from the record.

The tree::

    invoke_agent {agent}            gen_ai.operation.name=invoke_agent, rl.* of the rollout
    ├── rl.turn                     rl.turn.index
    │   ├── chat {model}            gen_ai.operation.name=chat, gen_ai.request.model, usage
    │   ├── execute_tool {tool}     gen_ai.operation.name=execute_tool, gen_ai.tool.name
    │   └── rl.reward {component}   rl.reward.component, rl.reward
    └── rl.reward {component}       a reward of the whole trajectory

A record's times: the live form measured them; an after-the-fact record gives latencies, and
its spans are laid end to end inside their parent, back from the trajectory's end
(``end_time``, else the time of the call): a turn lasts its ``latency_s`` or the sum of its
calls', the trajectory its ``latency_s`` or the sum of its turns' and rewards' when that is
longer. Every child lies inside its parent.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..tracing._state import state
from ..tracing.scopes import ITERATION_ATTR, WEIGHT_VERSION_ATTR
from .records import UNIX_NS_LIMIT, Generation, Reward, ToolCall, Trajectory, Turn

if TYPE_CHECKING:
    from ..tracing.binding import Binding

__all__ = [
    "AGENT_NAME_ATTR",
    "ENV_ATTR",
    "ERROR_TYPE_ATTR",
    "FINISH_REASONS_ATTR",
    "GROUP_ID_ATTR",
    "INPUT_TOKENS_ATTR",
    "OPERATION_ATTR",
    "OUTCOME_ATTR",
    "OUTPUT_TOKENS_ATTR",
    "REQUEST_MODEL_ATTR",
    "REWARD_ATTR",
    "REWARD_COMPONENT_ATTR",
    "SAMPLE_ID_ATTR",
    "TOOL_NAME_ATTR",
    "TOOL_OUTCOME_ATTR",
    "TRAJECTORY_FINISH_REASON_ATTR",
    "TURN_INDEX_ATTR",
    "TURN_SPAN",
    "duration_s",
    "emit",
    "now_ns",
    "trajectory_attributes",
]

# The OpenTelemetry GenAI conventions' names (semconv gen_ai_attributes, error_attributes).
OPERATION_ATTR = "gen_ai.operation.name"
AGENT_NAME_ATTR = "gen_ai.agent.name"
TOOL_NAME_ATTR = "gen_ai.tool.name"
REQUEST_MODEL_ATTR = "gen_ai.request.model"
INPUT_TOKENS_ATTR = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS_ATTR = "gen_ai.usage.output_tokens"
FINISH_REASONS_ATTR = "gen_ai.response.finish_reasons"
INPUT_MESSAGES_ATTR = "gen_ai.input.messages"
OUTPUT_MESSAGES_ATTR = "gen_ai.output.messages"
TOOL_ARGUMENTS_ATTR = "gen_ai.tool.call.arguments"
TOOL_RESULT_ATTR = "gen_ai.tool.call.result"
ERROR_TYPE_ATTR = "error.type"
INVOKE_AGENT = "invoke_agent"
CHAT = "chat"
EXECUTE_TOOL = "execute_tool"

# RL attributes: the project's where it has them (rl.iteration, rl.weight_version,
# rl.reward.component), these below where it had none.
SAMPLE_ID_ATTR = "rl.sample.id"
GROUP_ID_ATTR = "rl.group.id"
ENV_ATTR = "rl.env"
OUTCOME_ATTR = "rl.trajectory.outcome"
TRAJECTORY_FINISH_REASON_ATTR = "rl.trajectory.finish_reason"
TURNS_ATTR = "rl.trajectory.turns"
TOOL_CALLS_ATTR = "rl.trajectory.tool_calls"
REWARD_ATTR = "rl.reward"
REWARD_COMPONENT_ATTR = "rl.reward.component"
TOOL_OUTCOME_ATTR = "rl.tool.outcome"
TURN_INDEX_ATTR = "rl.turn.index"
TURN_SPAN = "rl.turn"
REWARD_SPAN = "rl.reward"

_NS = 1_000_000_000


#: The longest duration a span takes (about 31 years): a record's latency past it is cut to
#: it, so a span's times stay the int64 nanoseconds OTLP carries (1e299 s once overflowed).
_MAX_NS = 10**18
_MAX_S = _MAX_NS / _NS


def _ns(seconds: float | None) -> int:
    if not seconds or not seconds > 0:  # None, 0, a negative or NaN: no time of its own
        return 0
    if seconds >= _MAX_NS / _NS:  # infinity included
        return _MAX_NS
    return int(seconds * _NS)


def _messages(role: str, text: str) -> str:
    """A text as the conventions' message list (one message, one text part): the characters
    as given, so a trace UI shows 漢字, not \\u6f22; a text that is no UTF-8 (a lone
    surrogate, which OTLP's strings cannot carry) is escaped whole, as JSON may."""
    messages = [{"role": role, "parts": [{"type": "text", "content": text}]}]
    encoded = json.dumps(messages, ensure_ascii=False)
    try:
        encoded.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(messages)
    return encoded


def _window(latency_s: float, end_ns: int | None, at: int, low: int, high: int) -> tuple[int, int]:
    """Where a call lies inside its parent's ``[low, high]``: a measured one (``end_ns``)
    where it ended, back by its latency; any other from ``at`` (where the previous one ended),
    forward by its latency. Comparisons, not min() and max(): this runs for every call."""
    span_ns = int(latency_s * _NS) if 0.0 < latency_s < _MAX_S else _ns(latency_s)
    if end_ns is None:
        e0 = at if at < high else high
        e1 = e0 + span_ns
        return e0, e1 if e1 < high else high
    e1 = low if end_ns < low else high if end_ns > high else end_ns
    e0 = e1 - span_ns
    return e0 if e0 > low else low, e1


def _generation_attributes(g: Generation) -> dict[str, Any]:
    attributes: dict[str, Any] = {OPERATION_ATTR: CHAT}
    if g.model is not None:
        attributes[REQUEST_MODEL_ATTR] = g.model
    if g.input_tokens is not None:
        attributes[INPUT_TOKENS_ATTR] = g.input_tokens
    if g.output_tokens is not None:
        attributes[OUTPUT_TOKENS_ATTR] = g.output_tokens
    if g.finish_reason is not None:
        attributes[FINISH_REASONS_ATTR] = (g.finish_reason,)
    if g.weight_version is not None:
        attributes[WEIGHT_VERSION_ATTR] = g.weight_version
    if g.prompt is not None:
        attributes[INPUT_MESSAGES_ATTR] = _messages("user", g.prompt)
    if g.completion is not None:
        attributes[OUTPUT_MESSAGES_ATTR] = _messages("assistant", g.completion)
    return attributes


def _tool_attributes(c: ToolCall) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        OPERATION_ATTR: EXECUTE_TOOL,
        TOOL_NAME_ATTR: c.name,
        TOOL_OUTCOME_ATTR: c.outcome,
    }
    if c.outcome != "success":
        attributes[ERROR_TYPE_ATTR] = c.error or c.outcome
    if c.arguments is not None:
        attributes[TOOL_ARGUMENTS_ATTR] = c.arguments
    if c.result is not None:
        attributes[TOOL_RESULT_ATTR] = c.result
    return attributes


def _rewards(
    binding: Binding, rewards: tuple[Reward, ...], parent: Any, at: int, low: int, high: int
) -> int:
    """The reward spans under ``parent``; where the last one ends."""
    start = binding.tracer.start_span
    for r in rewards:
        e0, at = _window(r.latency_s, r.end_ns, at, low, high)
        attributes = {REWARD_COMPONENT_ATTR: r.component, REWARD_ATTR: r.value}
        start(f"{REWARD_SPAN} {r.component}", parent, attributes=attributes, start_time=e0).end(
            end_time=at
        )
    return at


def _calls(binding: Binding, turn: Turn, parent: Any, low: int, high: int) -> None:
    """The turn's calls in ``[low, high]``: measured ones where they ended, the others end to
    end from the turn's start. One loop per kind, the spans started and ended inline: a
    trajectory's spans are most of its cost, and a frame per span showed (14 a record)."""
    start = binding.tracer.start_span
    at = low
    for g in turn.generations:
        e0, at = _window(g.latency_s, g.end_ns, at, low, high)
        name = CHAT if g.model is None else f"{CHAT} {g.model}"
        start(name, parent, attributes=_generation_attributes(g), start_time=e0).end(end_time=at)
    for c in turn.tool_calls:
        e0, at = _window(c.latency_s, c.end_ns, at, low, high)
        span = start(
            f"{EXECUTE_TOOL} {c.name}", parent, attributes=_tool_attributes(c), start_time=e0
        )
        if c.outcome != "success":
            span.set_status(binding.status(binding.error, c.error or c.outcome))
        span.end(end_time=at)
    if turn.rewards:
        _rewards(binding, turn.rewards, parent, at, low, high)


def _turn_ns(turn: Turn) -> int:
    if turn.latency_s is not None:
        return _ns(turn.latency_s)
    # Loops, not three sum() of generators, and _ns inline for the common float of seconds
    # (what it returns for one): this runs for every call of every turn of every trajectory
    # (its duration is a metric also when the budget drops its spans).
    total = 0
    for g in turn.generations:
        s = g.latency_s
        total += int(s * _NS) if type(s) is float and 0.0 < s < _MAX_S else _ns(s)
    for c in turn.tool_calls:
        s = c.latency_s
        total += int(s * _NS) if type(s) is float and 0.0 < s < _MAX_S else _ns(s)
    for r in turn.rewards:
        s = r.latency_s
        total += int(s * _NS) if type(s) is float and 0.0 < s < _MAX_S else _ns(s)
    return total


def _times(t: Trajectory, now_ns: int) -> tuple[int, int, list[int]]:
    """Where ``t`` starts and ends, and how long each of its turns lasts."""
    if t.end_ns is not None:
        t1 = t.end_ns
    elif t.end_time_s is not None and 0.0 < t.end_time_s * _NS < UNIX_NS_LIMIT:
        # A point in time, not a duration: _ns' cap (10**18 ns, 2001-09-09) is not for it.
        # The parser said a value outside int64 ns; a Trajectory built by hand gets now.
        t1 = int(t.end_time_s * _NS)
    else:
        t1 = now_ns
    turn_ns = [_turn_ns(turn) for turn in t.turns]
    t0 = t.start_ns if t.start_ns is not None else t1 - _laid_back_ns(t, sum(turn_ns))
    # A latency of decades before an early end would start before 1970: negative
    # nanoseconds, which OTLP's unsigned times cannot carry (the batch would fail to encode).
    return max(t0, 0), t1, turn_ns


def _laid_back_ns(t: Trajectory, turns_ns: int) -> int:
    """How long a record's trajectory lasted, given its turns' time: its ``latency_s``, or
    its turns' and own rewards' time when that is longer (its span holds them all)."""
    spent = turns_ns
    for r in t.rewards:
        s = r.latency_s
        spent += int(s * _NS) if type(s) is float and 0.0 < s < _MAX_S else _ns(s)
    own = _ns(t.latency_s) if t.latency_s is not None else 0
    return own if own > spent else spent


def duration_s(t: Trajectory) -> float | None:
    """How long ``t`` lasted: its span's duration (the metric's value, so the two agree).
    None for a record that says no time anywhere (TRL's completions: TRL keeps no timings):
    its span has no length to lay back, and 0 s would be a rollout that took no time."""
    if t.start_ns is not None:  # measured (the live form): as _times places it
        t0, t1, _ = _times(t, 0)
        return (t1 - t0) / _NS
    # A record's: laid back from its end, so the end itself cancels out (without the list
    # of turns' times _times keeps for the spans).
    spent = 0
    turn_ns = _turn_ns
    for turn in t.turns:
        spent += turn_ns(turn)
    laid_back = _laid_back_ns(t, spent)
    if laid_back == 0 and t.latency_s is None:
        return None
    return laid_back / _NS


def trajectory_attributes(t: Trajectory, step: int | None) -> dict[str, Any]:
    """The attributes of a trajectory's span."""
    attributes: dict[str, Any] = {
        OPERATION_ATTR: INVOKE_AGENT,
        OUTCOME_ATTR: t.outcome,
        TURNS_ATTR: t.turn_count,
        TOOL_CALLS_ATTR: t.tool_call_count,
    }
    if t.agent is not None:
        attributes[AGENT_NAME_ATTR] = t.agent
    if step is not None:
        attributes[ITERATION_ATTR] = step
    if t.sample_id is not None:
        attributes[SAMPLE_ID_ATTR] = t.sample_id
    if t.group_id is not None:
        attributes[GROUP_ID_ATTR] = t.group_id
    if t.env is not None:
        attributes[ENV_ATTR] = t.env
    if t.weight_version is not None:
        attributes[WEIGHT_VERSION_ATTR] = t.weight_version
    if t.finish_reason is not None:
        attributes[TRAJECTORY_FINISH_REASON_ATTR] = t.finish_reason
    reward = t.total_reward()
    if reward is not None:
        attributes[REWARD_ATTR] = reward
    if t.outcome == "error":
        attributes[ERROR_TYPE_ATTR] = t.error or "error"
    elif t.error is not None:  # given beside another outcome: named, as its row names it
        attributes[ERROR_TYPE_ATTR] = t.error
    if t.prompt is not None:
        attributes[INPUT_MESSAGES_ATTR] = _messages("user", t.prompt)
    if t.completion is not None:
        attributes[OUTPUT_MESSAGES_ATTR] = _messages("assistant", t.completion)
    return attributes


def emit(binding: Binding, t: Trajectory, step: int | None, parent: Any, now_ns: int) -> Any:
    """Start and end the spans of ``t`` under ``parent`` (an OpenTelemetry context); returns
    the context holding the trajectory's span (for exemplars)."""
    start, into = binding.tracer.start_span, binding.set_span_in_context
    t0, t1, turn_ns = _times(t, now_ns)
    name = INVOKE_AGENT if t.agent is None else f"{INVOKE_AGENT} {t.agent}"
    span = start(name, parent, attributes=trajectory_attributes(t, step), start_time=t0)
    inside = into(span, parent)
    at = t0
    for index, turn in enumerate(t.turns):
        if turn.start_ns is not None and turn.end_ns is not None:
            u0, u1 = max(t0, turn.start_ns), min(t1, turn.end_ns)
        else:
            u0 = min(at, t1)
            u1 = min(u0 + turn_ns[index], t1)
        ends = max(u0, u1)
        turn_span = start(TURN_SPAN, inside, attributes={TURN_INDEX_ATTR: index}, start_time=u0)
        _calls(binding, turn, into(turn_span, inside), u0, ends)
        turn_span.end(end_time=ends)
        at = u1
    if t.rewards:
        _rewards(binding, t.rewards, inside, at, t0, t1)
    if t.outcome == "error":
        span.set_status(binding.status(binding.error, t.error or "error"))
    span.end(end_time=t1)
    return inside


def now_ns() -> int:
    """Now in Unix ns on the clock the step and phase spans read (a run's simulated clock
    under ``rlmetrics.run(clock=...)``): when a batch's records end unless they say, and
    what the live form measures with."""
    clock = state.clock
    return clock.now() + clock.offset
