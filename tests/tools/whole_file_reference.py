"""The tools' answers as they were computed before they streamed a run's rows: the whole file
read into a list, then each part of the answer taken from the list. The streamed answers are
held equal to these (a hypothesis property over small hand-made files), so reading a row at a
time changed what the tools hold in memory, not what they answer."""

from __future__ import annotations

import json
import os
from array import array
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from rlmetrics import runstate
from rlmetrics.backends.jsonl import (
    HYPERPARAMS_KIND,
    RERUN_KIND,
    RESUME_KIND,
    SkippedLines,
    read_jsonl,
)
from rlmetrics.families.liveness import is_trainer_step
from rlmetrics.liveness import StallRule
from rlmetrics.report.regressions import find_regressions
from rlmetrics.report.runs import DamagedRows, not_a_run_problem, run_rows

__all__ = ["jsonl_files", "whole_file_state"]


def whole_file_state(jsonl: str | os.PathLike[str], *, run: str | None, now: float) -> Any:
    """``run_state(jsonl, run=run, now=now)`` as it was computed from a list of every row;
    a :class:`~rlmetrics.runstate.QueryError` is returned, not raised, to be compared."""
    path = Path(jsonl)
    skipped, damaged = SkippedLines(), DamagedRows()
    lines = array("q")
    read = list(read_jsonl(path, every_row=True, skipped=skipped, lines=lines))
    problem = not_a_run_problem(path, read, skipped)
    if problem is not None:
        return runstate.QueryError(problem)
    rows = run_rows(read, damaged, lines)
    run_ids = list(dict.fromkeys(r.get("run_id") for r in rows if r.get("run_id") is not None))
    if run is not None and run not in run_ids:
        return runstate.QueryError(f"{path} has no run {run!r}; its runs: {run_ids}")
    chosen = run if run is not None else (run_ids[-1] if run_ids else None)
    mine = [r for r in rows if r.get("run_id") == chosen]
    reruns = sum(r.get("kind") == RERUN_KIND for r in mine)
    if reruns:  # the last attempt's rows: those after the run's last rerun row
        last = max(i for i, r in enumerate(mine) if r.get("kind") == RERUN_KIND)
        mine = mine[last + 1 :]
    metric_rows = [r for r in mine if "kind" not in r and isinstance(r.get("metrics"), dict)]
    first_seen: dict[int, float] = {}
    for row in metric_rows:
        step, at = row.get("step"), runstate._number(row.get("time"))
        if type(step) is not int or at is None or step in first_seen:
            continue
        if is_trainer_step(row["metrics"], str(row.get("prefix") or "")):
            first_seen[step] = at
    steps, stalls, stalled_now = runstate._steps(first_seen, now, StallRule())
    hyperparams: dict[str, Any] = {}
    for row in mine:
        if row.get("kind") == HYPERPARAMS_KIND and isinstance(row.get("hyperparams"), dict):
            hyperparams.update(row["hyperparams"])
    latest: dict[str, dict[str, Any]] = {}
    for row in metric_rows:
        prefix, step = row.get("prefix") or "", row.get("step")
        for key, value in row["metrics"].items():
            if runstate._number(value) is not None:
                name = f"{prefix}/{key}" if prefix else str(key)
                latest.pop(name, None)
                latest[name] = {"step": step if type(step) is int else None, "value": value}
    regressions = find_regressions(metric_rows).as_dict()
    answer: dict[str, Any] = {
        "schema": runstate.SCHEMA,
        "source": {
            "jsonl": str(path),
            "skipped_lines": skipped.count + damaged.count,
            "traces": None,
            "prometheus": None,
        },
        "run": {
            "run_id": chosen,
            "runs_in_file": run_ids,
            "resumed": any(r.get("kind") == RESUME_KIND for r in mine),
            "reruns": reruns,
            "hyperparams": hyperparams or None,
        },
        "steps": steps,
        "stalls": stalls[-runstate.MAX_STALLS :],
        "stalled_now": stalled_now,
        "last_values": dict(sorted(list(latest.items())[-runstate.MAX_VALUES :])),
        "slowest_phases": [],
        "traces_other_runs": 0,
        "regressions": {
            "status": regressions["status"],
            "reason": regressions["reason"],
            "slow_steps": regressions["slow_steps"],
            "count": len(regressions["regressions"]),
        },
        "alerts": None,
        "alerts_error": None,
        "findings": [],
    }
    first = sorted([*skipped.first, *damaged.first], key=lambda line: line[0] or 0)
    not_rows = runstate.named_lines(first[: SkippedLines.SHOWN], skipped.count + damaged.count)
    written = runstate._being_written(answer, skipped)
    answer["findings"] = runstate._findings(answer, "" if written else not_rows)
    return answer


_KEYS = (
    "reward",
    "loss",
    "efficiency/step_wall_time_s",
    "efficiency/idle/refit_bubble_s",
    "vllm/generation_tokens",
    "timing/generation",
    "gym/rollout/duration_ms",
    "x y",
)
_VALUES = st.one_of(
    st.floats(min_value=0, max_value=200, allow_nan=False),
    st.integers(min_value=-3, max_value=10**6),
    st.sampled_from([True, "NaN", None, 1e308, [1, 2]]),
)


@st.composite
def _line(draw: st.DrawFn, at: float, step: int) -> str:
    run_id = draw(st.sampled_from(["a", "a", "b", "c", None, 5]))
    kind = draw(st.sampled_from([None] * 12 + ["hyperparams", "resume", "rerun", "junk", "rank"]))
    row: dict[str, Any] = {"time": at}
    if run_id is not None or draw(st.booleans()):
        row["run_id"] = run_id
    if kind == "junk":
        return draw(st.sampled_from(["not json", "[1, 2]", '{"sample": {"a": 1}}', "{}"]))
    if kind == "hyperparams":
        row.update(kind="hyperparams", hyperparams={draw(st.sampled_from("xyz")): draw(_VALUES)})
    elif kind in ("resume", "rerun"):
        row.update(kind=kind)
    else:
        if kind == "rank":
            row["rank"] = draw(st.sampled_from([0] * 8 + [1]))
        row["step"] = draw(st.one_of(st.just(step), st.integers(min_value=-1, max_value=40)))
        row["prefix"] = draw(
            st.sampled_from(
                ["train", "train", "", "setup/timing", "rollout/throughput", "validation"]
            )
        )
        row["metrics"] = draw(st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4))
    return json.dumps(row)


@st.composite
def jsonl_files(draw: st.DrawFn) -> str:
    """A small JSONL file of several runs' rows (resumes, configurations, steps out of order,
    damaged rows, junk lines, perhaps a torn last line): the text to write."""
    count = draw(st.integers(min_value=0, max_value=120))
    at = 1000.0
    lines = []
    for index in range(count):
        at += draw(st.sampled_from([0.0, 1.0, 1.0, 1.0, 2.0, 50.0, -5.0]))
        lines.append(draw(_line(at, index // 2)))
    text = "".join(line + "\n" for line in lines)
    if lines and draw(st.booleans()):
        text = text[:-1]  # a torn (or merely unterminated) last line
    return text
