"""rlmetrics' trajectories and alerts as Trackio keeps them: a trajectory is one
``trackio.Trace`` (OpenAI-style messages from the text a text policy kept, the rollout's
ids and outcome as metadata, and one Trackio span per turn, generation, tool call and reward,
named as rlmetrics' OpenTelemetry spans are); an alert is a ``trackio.alert`` (firing at
``WARN``, resolved at ``INFO``).

Trackio's spans carry durations, not the OpenTelemetry times: the trace's ``trace_id``
metadata finds the same rollout's spans in an OpenTelemetry backend.
"""

from __future__ import annotations

import math
from typing import Any

import trackio
from trackio.alerts import AlertLevel

from rlmetrics.events import ALERT_FIRING, Alert
from rlmetrics.trajectories import Generation, Reward, ToolCall, Trajectory
from rlmetrics.trajectories.spans import duration_s

__all__ = ["TRACE_KEY", "alert_level", "alert_title", "trace_of"]

#: The key a step's trajectories are logged under as traces (the rows are the samples table
#: ``trajectories``; Trackio keeps traces in a table of their own).
TRACE_KEY = "trajectory_traces"


def _ms(seconds: float | None) -> float | None:
    if seconds is None or not math.isfinite(seconds):
        return None
    return round(seconds * 1000.0, 3)


def _status(outcome: str) -> str:
    """Trackio's span status: ``success``, or ``error`` for any other outcome (a failed or
    truncated rollout, a tool call that timed out), which its dashboard marks."""
    return "success" if outcome == "success" else "error"


def _number(value: float | None) -> float | None:
    """A number Trackio's JSON keeps (NaN and ±inf are absent)."""
    return value if value is not None and math.isfinite(value) else None


class _Spans:
    """Trackio spans with ids in the order they are added."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []

    def add(self, name: str, kind: str, parent: str | None, **fields: Any) -> str:
        span_id = f"s{len(self.spans)}"
        span = {"id": span_id, "name": name, "kind": kind, "parent_id": parent, **fields}
        self.spans.append({k: v for k, v in span.items() if v is not None})
        return span_id


def _generation(spans: _Spans, g: Generation, parent: str) -> None:
    usage = {"input_tokens": g.input_tokens, "output_tokens": g.output_tokens}
    spans.add(
        f"chat {g.model}" if g.model else "chat",
        "generation",
        parent,
        model=g.model,
        duration_ms=_ms(g.latency_s),
        usage={k: v for k, v in usage.items() if v is not None} or None,
        input=g.prompt,
        output=g.completion,
        metadata={"finish_reason": g.finish_reason} if g.finish_reason else None,
    )


def _tool(spans: _Spans, call: ToolCall, parent: str) -> None:
    spans.add(
        f"execute_tool {call.name}",
        "tool",
        parent,
        duration_ms=_ms(call.latency_s),
        status=_status(call.outcome),
        error=call.error,
        input=call.arguments,
        output=call.result,
        metadata={"outcome": call.outcome},
    )


def _reward(spans: _Spans, reward: Reward, parent: str) -> None:
    spans.add(
        f"rl.reward {reward.component}",
        "span",
        parent,
        duration_ms=_ms(reward.latency_s),
        metadata={"component": reward.component, "reward": _number(reward.value)},
    )


def _messages(t: Trajectory) -> list[dict[str, Any]]:
    """The conversation, from the text the record kept (none without a text policy)."""
    messages: list[dict[str, Any]] = []
    if t.prompt is not None:
        messages.append({"role": "user", "content": t.prompt})
    for number, turn in enumerate(t.turns):
        for g in turn.generations:
            if g.prompt is not None and g.prompt != t.prompt:
                messages.append({"role": "user", "content": g.prompt})
            if g.completion is not None:
                messages.append({"role": "assistant", "content": g.completion})
        for index, call in enumerate(turn.tool_calls):
            call_id = f"t{number}-{index}"
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments or ""},
                        }
                    ],
                }
            )
            if call.result is not None:
                messages.append({"role": "tool", "tool_call_id": call_id, "content": call.result})
    if t.completion is not None and not any(m["role"] == "assistant" for m in messages):
        messages.append({"role": "assistant", "content": t.completion})
    return messages


def trace_of(t: Trajectory, trace_id: str | None) -> trackio.Trace:
    """One trajectory as a Trackio trace (see the module's docstring)."""
    spans = _Spans()
    seconds = duration_s(t)
    root = spans.add(
        f"invoke_agent {t.agent}" if t.agent else "invoke_agent",
        "span",
        None,
        duration_ms=_ms(seconds),
        status=_status(t.outcome),
        error=t.error,
        metadata={"outcome": t.outcome, "reward": _number(t.reward)},
    )
    for turn in t.turns:
        parent = spans.add("rl.turn", "span", root, duration_ms=_ms(turn.latency_s))
        for g in turn.generations:
            _generation(spans, g, parent)
        for call in turn.tool_calls:
            _tool(spans, call, parent)
        for reward in turn.rewards:
            _reward(spans, reward, parent)
    for reward in t.rewards:
        _reward(spans, reward, root)
    metadata = {
        "sample_id": t.sample_id,
        "group_id": t.group_id,
        "env": t.env,
        "agent": t.agent,
        "outcome": t.outcome,
        "status": _status(t.outcome),
        "finish_reason": t.finish_reason,
        "reward": _number(t.reward),
        "weight_version": t.weight_version,
        "duration_ms": _ms(seconds),
        "turns": t.turn_count,
        "tool_calls": t.tool_call_count,
        "error": t.error,
        "trace_id": trace_id,
    }
    return trackio.Trace(
        messages=_messages(t),
        metadata={k: v for k, v in metadata.items() if v is not None},
        spans=spans.spans,
    )


def alert_level(alert: Alert) -> AlertLevel:
    """A firing alert warns; a resolved one informs."""
    return AlertLevel.WARN if alert.state == ALERT_FIRING else AlertLevel.INFO


def alert_title(alert: Alert) -> str:
    """``RLStepStalled firing`` / ``RLStepStalled resolved``: Trackio lists alerts by title."""
    return f"{alert.name} {alert.state}"
