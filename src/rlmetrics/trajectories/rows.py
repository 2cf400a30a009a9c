"""A trajectory as a row of the samples path (``Logger.log_samples``): the same record the
spans and the metrics come from, so the table, the trace and the dashboard agree."""

from __future__ import annotations

from typing import Any

from .records import Trajectory
from .spans import duration_s

__all__ = ["row_of"]


def row_of(t: Trajectory, trace_id: str | None = None) -> dict[str, Any]:
    """``t`` as one sample row: ids, outcome, reward (its total; each named component's
    as ``reward/<component>``), counts, tokens, latency; the text the policy kept; the trace
    id of its spans when it has them."""
    given, taken = t.tokens()
    rewards = t.all_rewards()
    row: dict[str, Any] = {
        "sample_id": t.sample_id,
        "group_id": t.group_id,
        "env": t.env,
        "outcome": t.outcome,
        "finish_reason": t.finish_reason,
        "reward": t.total_reward(rewards),
        "turns": t.turn_count,
        "tool_calls": t.tool_call_count,
        "input_tokens": given,
        "output_tokens": taken,
        "latency_s": duration_s(t),
        "weight_version": t.weight_version,
    }
    if t.agent is not None:
        row["agent"] = t.agent
    if t.error is not None:
        row["error"] = t.error
    for reward in rewards:
        if reward.component != "total":  # a part of the total, which "reward" is
            key = f"reward/{reward.component}"
            row[key] = row.get(key, 0.0) + reward.value
    if t.prompt is not None:
        row["prompt"] = t.prompt
    if t.completion is not None:
        row["completion"] = t.completion
    if trace_id is not None:
        row["trace_id"] = trace_id
    return row
