"""A trajectory as a row of the samples path (``Logger.log_samples``): the same record the
spans and the metrics come from, so the table, the trace and the dashboard agree."""

from __future__ import annotations

from typing import Any

from .records import Trajectory
from .settings import settings
from .spans import duration_s

__all__ = ["row_of"]


def row_of(t: Trajectory, trace_id: str | None = None) -> dict[str, Any]:
    """``t`` as one sample row: ids, outcome, reward (its total; each named component's
    as ``reward/<component>``), counts, tokens, latency; the text the policy kept (the
    record's own prompt and completion, else its generations'); the trace id of its spans
    when it has them."""
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
    prompt, completion = t.prompt, t.completion
    if (prompt is None or completion is None) and settings().text.keeps:
        prompt, completion = _generations_text(t, prompt, completion)
    if prompt is not None:
        row["prompt"] = prompt
    if completion is not None:
        row["completion"] = completion
    if trace_id is not None:
        row["trace_id"] = trace_id
    return row


def _generations_text(
    t: Trajectory, prompt: str | None, completion: str | None
) -> tuple[str | None, str | None]:
    """The row's text when the record gives none of its own (the live form takes text only
    on its generations): its first generation's prompt and its last one's completion, the
    question and the answer a table shows. Not looked for under ``off``: none is kept."""
    generations = [g for turn in t.turns for g in turn.generations]
    if prompt is None:
        prompt = next((g.prompt for g in generations if g.prompt is not None), None)
    if completion is None:
        completion = next(
            (g.completion for g in reversed(generations) if g.completion is not None), None
        )
    return prompt, completion
