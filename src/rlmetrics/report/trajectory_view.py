"""A run's trajectories as the HTML report shows them: every ``trajectories`` row of its samples
file (the rows ``log_trajectories`` and ``rlmetrics.trajectory`` wrote), each with its turns,
tool calls, rewards and kept text read from the run's spans when a traces file is given.

A row and its spans are the same record (docs/trajectories.md): they are matched by sample id
and step (the trajectory span's ``rl.sample.id`` and ``rl.iteration``). A row without spans
(the span budget dropped them, or no traces file was read) keeps its counts and says so."""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Mapping
from typing import Any

from ..backends.jsonl import read_jsonl
from ..tracing import ITERATION_ATTR
from .runs import samples_beside
from .traces import Span, TraceSet

__all__ = ["MAX_ROWS", "TABLE", "TEXT_BUDGET", "read_trajectories"]

#: The samples table trajectories are logged to.
TABLE = "trajectories"
#: Rows the page holds at most (the newest are kept): a browser table past this is unusable.
MAX_ROWS = 20_000
_TRAJECTORY_OP = "invoke_agent"
_OPERATION = "gen_ai.operation.name"
#: Characters of kept text (prompts, completions, tool arguments and results, of rows and of
#: their spans) the page holds at most: past it every text is cut to the one length that fits.
#: Under text policy ``full`` a trajectory keeps up to 32 KB a text, in its row and in each
#: generation: 300 made a page of 36 MB, and 20 000 would be more than a browser opens.
TEXT_BUDGET = 16_000_000
#: The shortest a text is cut to, however many there are.
_MIN_CUT = 100
_TEXT_FIELDS = ("prompt", "completion", "arguments", "result")
#: The key of a row's turns and rewards read from its spans.
_TREE = "spans"


def _key(sample_id: Any, step: Any) -> tuple[str, Any]:
    return str(sample_id), step


def _seconds(span: Span) -> float:
    return round(span.seconds, 6)


def _message_text(value: Any) -> Any:
    """The text of a generation's ``gen_ai.input.messages`` / ``gen_ai.output.messages``: the
    span holds it as GenAI messages in JSON (``[{"role", "parts": [{"type": "text",
    "content"}]}]``, non-ASCII escaped), which would show its line breaks as ``\\n`` and its
    characters as ``\\uXXXX``. One message is its text; several are each ``role: text``.
    Anything else (another tool's attribute) is shown as it is."""
    if not isinstance(value, str):
        return value
    try:
        messages = json.loads(value)
    except ValueError:
        return value
    if not isinstance(messages, list) or not messages:
        return value
    texts: list[tuple[Any, str]] = []
    for message in messages:
        parts = message.get("parts") if isinstance(message, dict) else None
        if not isinstance(parts, list):
            return value
        contents = [
            p["content"]
            for p in parts
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("content"), str)
        ]
        if len(contents) != len(parts):
            return value
        texts.append((message.get("role"), "".join(contents)))
    if len(texts) == 1:
        return texts[0][1]
    return "\n\n".join(f"{role}: {text}" for role, text in texts)


def _item(span: Span) -> dict[str, Any] | None:
    """One generation, tool call or reward of a turn, as the page shows it."""
    a = span.attributes
    op = a.get(_OPERATION)
    if op == "chat":
        reasons = a.get("gen_ai.response.finish_reasons")
        item = {
            "kind": "generation",
            "model": a.get("gen_ai.request.model"),
            "input_tokens": a.get("gen_ai.usage.input_tokens"),
            "output_tokens": a.get("gen_ai.usage.output_tokens"),
            "finish_reason": ", ".join(map(str, reasons))
            if isinstance(reasons, (list, tuple))
            else reasons,
            "latency_s": _seconds(span),
            "prompt": _message_text(a.get("gen_ai.input.messages")),
            "completion": _message_text(a.get("gen_ai.output.messages")),
        }
    elif op == "execute_tool":
        item = {
            "kind": "tool",
            "name": a.get("gen_ai.tool.name"),
            "outcome": a.get("rl.tool.outcome"),
            "error": a.get("error.type"),
            "latency_s": _seconds(span),
            "arguments": a.get("gen_ai.tool.call.arguments"),
            "result": a.get("gen_ai.tool.call.result"),
        }
    elif span.name.startswith("rl.reward"):
        item = {
            "kind": "reward",
            "component": a.get("rl.reward.component"),
            "value": a.get("rl.reward"),
        }
    else:
        return None
    item["start_ns"] = span.start_ns
    return {k: v for k, v in item.items() if v is not None}


def _ordered(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items.sort(key=lambda i: i.pop("start_ns"))
    return items


def _tree(traces: TraceSet, trajectory: Span) -> dict[str, Any]:
    """A trajectory span's turns (each its generations, tool calls and rewards in time order)
    and its own rewards."""
    turns: list[tuple[Any, int, list[dict[str, Any]]]] = []
    rewards: list[dict[str, Any]] = []
    for child in traces.children.get((trajectory.trace_id, trajectory.span_id), ()):
        if child.name == "rl.turn":
            found = [
                item
                for grandchild in traces.children.get((child.trace_id, child.span_id), ())
                if (item := _item(grandchild)) is not None
            ]
            index = child.attributes.get("rl.turn.index")
            turns.append((index if isinstance(index, int) else 1 << 62, child.start_ns, found))
        else:
            item = _item(child)
            if item is not None and item["kind"] == "reward":
                rewards.append(item)
    turns.sort(key=lambda t: (t[0], t[1]))
    return {
        "turns": [_ordered(items) for _i, _s, items in turns],
        "rewards": _ordered(rewards),
    }


def _spans_by_sample(traces: TraceSet) -> dict[tuple[str, Any], list[Span]]:
    """Trajectory spans by sample id and step, each key's in the order the file holds them
    (more than one when a loop logged several rollouts under one sample id)."""
    out: dict[tuple[str, Any], list[Span]] = {}
    for span in traces.spans:
        a = span.attributes
        if a.get(_OPERATION) == _TRAJECTORY_OP and "rl.sample.id" in a:
            out.setdefault(_key(a["rl.sample.id"], a.get(ITERATION_ATTR)), []).append(span)
    return out


#: A row's columns and the trajectory span's attributes that say the same thing: a row and a
#: span of one sample id and step are one record only where these agree.
_SAME = (
    ("turns", "rl.trajectory.turns"),
    ("tool_calls", "rl.trajectory.tool_calls"),
    ("outcome", "rl.trajectory.outcome"),
    ("reward", "rl.reward"),
)


def _agrees(row: Mapping[str, Any], span: Span) -> bool:
    a = span.attributes
    return all(row[col] == a[attr] for col, attr in _SAME if col in row and attr in a)


def _take(candidates: list[Span], row: Mapping[str, Any]) -> Span | None:
    """The first of ``candidates`` (spans of the row's sample id and step) that agrees with
    ``row``, removed so that the next row of that id takes another; None when none does."""
    for index, span in enumerate(candidates):
        if _agrees(row, span):
            return candidates.pop(index)
    return None


def _texts(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    """Every kept text of ``rows`` as (the dict holding it, its key): the rows' own and those
    of the generations and tool calls of their spans."""
    holders: list[dict[str, Any]] = []
    for row in rows:
        holders.append(row)
        tree = row.get(_TREE)
        if tree is not None:
            holders.extend(item for turn in tree["turns"] for item in turn)
    return [(h, f) for h in holders for f in _TEXT_FIELDS if isinstance(h.get(f), str)]


def _fitting_length(lengths: list[int], budget: int) -> int | None:
    """The length every text longer than it is cut to so that all of them hold ``budget``
    characters (the longest are cut first, the shorter kept whole); None when they fit."""
    left = budget
    ordered = sorted(lengths)
    for index, length in enumerate(ordered):
        if length * (len(ordered) - index) > left:
            return max(_MIN_CUT, left // (len(ordered) - index))
        left -= length
    return None


def _cut_texts(rows: list[dict[str, Any]], budget: int) -> int | None:
    """Cut the rows' texts to hold ``budget`` characters; the length they were cut to."""
    found = _texts(rows)
    cut = _fitting_length([len(h[f]) for h, f in found], budget)
    if cut is None:
        return None
    for holder, field in found:
        text = holder[field]
        if len(text) > cut:
            holder[field] = f"{text[:cut]}\n… (+{len(text) - cut} characters)"
    return cut


def read_trajectories(
    jsonl: str | os.PathLike[str],
    run_id: str | None,
    traces: TraceSet | None = None,
    limit: int = MAX_ROWS,
    steps: tuple[int, int] | None = None,
    text_budget: int = TEXT_BUDGET,
) -> dict[str, Any]:
    """The run's trajectory rows (``{"rows": [...], "total": n, "with_spans": k}``), the
    newest ``limit`` of them (of steps ``steps[0]`` to ``steps[1]`` when given), each as
    logged plus its ``step`` and, when its spans are in ``traces``, ``spans``: its ``turns``
    (each a list of generations, tool calls and rewards in time order) and the trajectory's
    own ``rewards``. Kept texts past ``text_budget`` characters in all are cut
    (``texts_cut_to`` says to how many characters; None when none was);
    ``spans_without_rows`` counts the trajectory spans no row took."""
    path = samples_beside(jsonl)  # a rotated run's (metrics.samples.jsonl.1.gz) too
    # The newest ``limit``: a bounded deque drops the oldest in O(1), where deleting a list's
    # head moved every kept row (0.95 s of reading 300 000 rows).
    newest: collections.deque[dict[str, Any]] = collections.deque(maxlen=max(0, limit))
    total = 0
    if path.is_file():
        for line in read_jsonl(path):
            sample = line.get("sample")
            if line.get("name") != TABLE or not isinstance(sample, Mapping):
                continue
            if run_id is not None and line.get("run_id") != run_id:
                continue
            step = line.get("step")
            if steps is not None and not (type(step) is int and steps[0] <= step <= steps[1]):
                continue
            total += 1
            # The page's own keys win over columns of those names (a table of the user's own
            # may have any): the step the row was logged at, and its spans' tree (set below).
            row = {k: v for k, v in sample.items() if k != _TREE}
            row["step"] = step
            newest.append(row)
    rows = list(newest)
    spans = _spans_by_sample(traces) if traces is not None else {}
    with_spans = 0
    for row in rows:
        span = _take(spans.get(_key(row.get("sample_id"), row.get("step")), []), row)
        if span is not None:
            row[_TREE] = _tree(traces, span)  # type: ignore[arg-type]
            with_spans += 1
    # Trajectories the traces hold that no row took (of the chosen steps): a live trajectory
    # without logger= writes spans and metrics but no row, and the page must not say none.
    left = [
        step
        for (_id, step), candidates in spans.items()
        for _span in candidates
        if steps is None or (type(step) is int and steps[0] <= step <= steps[1])
    ]
    return {
        "rows": rows,
        "total": total,
        "with_spans": with_spans,
        "traced": traces is not None,
        "texts_cut_to": _cut_texts(rows, text_budget),
        "spans_without_rows": len(left),
    }
