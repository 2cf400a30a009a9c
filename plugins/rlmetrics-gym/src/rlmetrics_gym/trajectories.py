"""Gym rollouts as rlmetrics trajectories: a rollout's result row as one trajectory record,
for ``Logger.log_trajectories`` (spans, a row of the ``trajectories`` samples table and the
trajectory metrics, all from the same record).

A Gym result row (what an agent server's ``/run`` returns, as the driver writes it) is read
as:

- ids: ``_ng_task_index`` is the group (the task), ``<task>-<_ng_rollout_index>`` the
  sample id;
- env: the ``env`` given, else the row's ``agent_ref.name``, else its ``dispatch_name``;
- turns: ``response.output`` cut at each tool result: a turn is the model's items up to and
  including its ``function_call`` items (each a tool call by its ``name``) and the
  ``function_call_output`` items that answer them; ``ng_perf.num_turns`` counts the turns of
  a row without an output list (up to the 256 a record holds);
- the generation of a turn: ``response.model``, finish reason ``tool_calls`` when the turn
  called tools, else ``stop``; the response's ``usage`` tokens go on the last turn's
  generation (Gym totals them for the whole rollout);
- outcome: the rollouts family's ``outcome`` (``scored`` → success, ``failed`` → error with
  its ``failure_type``, ``omitted`` → failure), a response ``status`` of ``incomplete`` →
  truncated (``incomplete_details.reason`` the finish reason, of the rollout and of its last
  generation); ``reward`` the total and
  ``duration_ms`` the latency.

Every field is checked where every trajectory record is, by the core's parser
(:mod:`rlmetrics.trajectories.records`): a row missing its ids, a NaN reward or a tool name
that is not a string costs that field, said once, and the rest of the rollout lands. Text
(the input, the final message, tool arguments and results) is read only when the trajectory
text policy keeps text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from rlmetrics import warn_once
from rlmetrics.trajectories import MAX_TURNS, as_text, settings
from rlmetrics.values import finite_float

from .driver import NG_PERF_KEY, NG_PERF_TURNS_KEY, _field

__all__ = [
    "GROUP_KEY",
    "ROLLOUT_INDEX_KEY",
    "log_rollout_trajectories",
    "run_env",
    "run_ids",
    "trajectory_record",
]

#: The task a rollout belongs to (its GRPO group) and its index among the task's rollouts.
GROUP_KEY: Final = "_ng_task_index"
ROLLOUT_INDEX_KEY: Final = "_ng_rollout_index"

_FUNCTION_CALL = "function_call"
_FUNCTION_OUTPUT = "function_call_output"
_OUTCOMES: Final = {"scored": "success", "failed": "error", "omitted": "failure"}


def _message_text(items: Sequence[Any]) -> str | None:
    """The text of the ``message`` items among ``items``."""
    parts: list[str] = [
        part["text"]
        for item in items
        if isinstance(item, Mapping) and item.get("type") == "message"
        for part in (item.get("content") or ())
        if isinstance(part, Mapping) and type(part.get("text")) is str
    ]
    return "".join(parts) if parts else None


def _turns(output: Sequence[Any], model: Any, keeps_text: bool) -> list[dict[str, Any]]:
    """``response.output`` as turns (see the module's docstring)."""
    turns: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    by_call_id: dict[Any, dict[str, Any]] = {}
    answered = False
    for item in output:
        kind = item.get("type") if isinstance(item, Mapping) else None
        if answered and kind != _FUNCTION_OUTPUT:  # the tools answered: the model's next turn
            turns.append({"tool_calls": calls})
            calls, by_call_id, answered = [], {}, False
        if kind == _FUNCTION_CALL:
            call = {"name": item.get("name")}
            if keeps_text:
                call["arguments"] = as_text(item.get("arguments"))
            calls.append(call)
            call_id = item.get("call_id")
            if type(call_id) is str or type(call_id) is int:  # else nothing can answer it
                by_call_id[call_id] = call
        elif kind == _FUNCTION_OUTPUT:
            answered = True
            call_id = item.get("call_id")
            answers = by_call_id.get(call_id) if type(call_id) in (str, int) else None
            if answers is not None and keeps_text:
                answers["result"] = as_text(item.get("output"))
    turns.append({"tool_calls": calls})  # the last turn: its calls, or the final answer
    for turn in turns:
        turn["generations"] = [
            {"model": model, "finish_reason": "tool_calls" if turn["tool_calls"] else "stop"}
        ]
    return turns


def run_ids(row: Mapping[str, Any]) -> tuple[Any, Any]:
    """``(sample_id, group_id)`` of a rollout from its row (a ``/run`` request body or a
    result row): ``<task>-<rollout>`` and the task; None where the row has no task index."""
    task, index = row.get(GROUP_KEY), row.get(ROLLOUT_INDEX_KEY)
    if task is None:
        return None, None
    return (task if index is None else f"{task}-{index}"), task


def run_env(row: Mapping[str, Any]) -> Any:
    """The env of a rollout's row: its ``agent_ref.name``, else its ``dispatch_name``."""
    return _field(row, "agent_ref", "name") or row.get("dispatch_name")


def trajectory_record(
    result: Mapping[str, Any], *, env: str | None = None, agent: str | None = None
) -> dict[str, Any]:
    """One Gym result row as a trajectory record (see the module's docstring). Pure: the
    record's fields are checked when it is logged."""
    output = _field(result, "response", "output")
    keeps_text = settings().text.keeps
    sample_id, group_id = run_ids(result)
    record: dict[str, Any] = {
        "sample_id": sample_id,
        "group_id": group_id,
        "env": env or run_env(result),
        "agent": agent,
        "reward": result.get("reward"),
    }
    duration_ms = result.get("duration_ms")
    if duration_ms is not None:
        ms = None if type(duration_ms) is bool else finite_float(duration_ms)
        # What is no number of milliseconds goes as it is: the parser says what is wrong.
        record["latency_s"] = duration_ms if ms is None else ms / 1000.0
    if isinstance(output, list):
        turns = _turns(output, _field(result, "response", "model"), keeps_text)
        # Field by field: the Logger flattens a row to its leaves (response/usage/input_tokens).
        tokens = {
            key: _field(result, "response", "usage", key)
            for key in ("input_tokens", "output_tokens")
        }
        if any(count is not None for count in tokens.values()):
            turns[-1]["generations"][0].update(tokens)
        record["turns"] = turns
        if keeps_text:
            record["completion"] = _message_text(output)
    else:
        count = _field(result, NG_PERF_KEY, NG_PERF_TURNS_KEY)
        if type(count) is int and count >= 0:
            record["turns"] = [{}] * min(count, MAX_TURNS)
    said = result.get("outcome")
    outcome = _OUTCOMES.get(said) if type(said) is str else None
    if outcome is not None:
        record["outcome"] = outcome
        if outcome == "error":
            record["error"] = result.get("failure_type")
    if _field(result, "response", "status") == "incomplete":
        reason = _field(result, "response", "incomplete_details", "reason")
        record["outcome"] = "truncated"
        record["finish_reason"] = reason
        read_turns = record.get("turns")
        if read_turns and "generations" in read_turns[-1] and reason is not None:
            # The response was cut during its last model call: that call did not `stop`.
            read_turns[-1]["generations"][0]["finish_reason"] = reason
    if keeps_text:
        record["prompt"] = as_text(_field(result, "responses_create_params", "input"))
    return record


def log_rollout_trajectories(
    logger: Any,
    results: Sequence[Mapping[str, Any]],
    step: int,
    *,
    env: str | None = None,
    agent: str | None = None,
) -> None:
    """Log Gym result rows as trajectories through ``logger`` (an :class:`rlmetrics.Logger`)
    at ``step``: one per row; a row that is not a mapping is skipped, said once. Never
    raises."""
    try:
        records: list[Any] = []
        for result in results:
            if not isinstance(result, Mapping):
                records.append(result)  # the core's parser skips it, said once
                continue
            try:
                records.append(trajectory_record(result, env=env, agent=agent))
            except Exception:  # a row no one foresaw costs only itself
                warn_once(
                    "gym:trajectories:row",
                    "rlmetrics-gym: a Gym result row could not be read as a trajectory; skipped",
                )
        logger.log_trajectories(records, step=step)
    except Exception:
        warn_once(
            "gym:trajectories",
            "rlmetrics-gym: Gym rollouts could not be logged as trajectories",
        )
