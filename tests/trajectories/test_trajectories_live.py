"""The live form's turns, read back from the SDK's spans and points: which turn a call outside
``t.turn()`` belongs to, and what a turn past its caps keeps, counts and says."""

from __future__ import annotations

import rlmetrics
from rlmetrics.testing.traces import in_memory_tracing, span_records


def test_a_tool_call_outside_a_turn_joins_the_last_turn() -> None:
    """Before: a tool call made after ``with t.turn():`` closed opened a turn of its own (two
    turns, the tool call alone in the second) instead of joining the last one, as the docs
    say it does."""
    with in_memory_tracing() as (_handle, _reader, exporter):
        with rlmetrics.trajectory("s0", step=1) as t:
            with t.turn():
                t.generation("policy", finish_reason="tool_calls")
            t.tool_call("python", latency_s=0.0)
        spans = span_records(exporter)
    [agent] = [s for s in spans if s.name == "invoke_agent"]
    [turn] = [s for s in spans if s.name == "rl.turn"]
    [chat] = [s for s in spans if s.name == "chat policy"]
    [tool] = [s for s in spans if s.name == "execute_tool python"]
    assert agent.attributes["rl.trajectory.turns"] == 1
    assert agent.attributes["rl.trajectory.tool_calls"] == 1
    assert chat.parent_id == tool.parent_id == turn.span_id
    # The turn holds the call that joined it: it lasts until the call ended.
    assert turn.start_ns <= tool.start_ns <= tool.end_ns <= turn.end_ns <= agent.end_ns


def test_a_tool_call_before_any_turn_opens_one_and_a_generation_after_a_turn_its_own() -> None:
    with in_memory_tracing() as (_handle, _reader, exporter):
        with rlmetrics.trajectory("s0", step=1) as t:
            t.tool_call("search")  # no turn yet: one of its own
            with t.turn():
                t.generation("policy")
            t.generation("policy")  # a generation outside a turn opens one
            t.tool_call("python")  # and the tool call after it joins that one
        spans = span_records(exporter)
    turns = {s.span_id: s.attributes["rl.turn.index"] for s in spans if s.name == "rl.turn"}
    placed = sorted(
        (turns[s.parent_id], s.name)  # type: ignore[index]
        for s in spans
        if s.name.startswith(("chat", "execute_tool"))
    )
    assert placed == [
        (0, "execute_tool search"),
        (1, "chat policy"),
        (2, "chat policy"),
        (2, "execute_tool python"),
    ]
