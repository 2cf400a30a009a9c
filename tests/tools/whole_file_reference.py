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

import attrs
from hypothesis import strategies as st

from rlmetrics import runstate
from rlmetrics.backends.jsonl import (
    END_KIND,
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

__all__ = ["jsonl_files", "whole_file_reports", "whole_file_state"]


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
    ended = None  # the run's end row, when no row of it came after
    if mine and mine[-1].get("kind") == END_KIND:
        status = mine[-1].get("status")
        ended = {
            "time": runstate._number(mine[-1].get("time")),
            "status": status if status in ("finished", "failed") else "finished",
        }
    stalled_now = stalled_now and ended is None
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
            "ended": ended,
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


def whole_file_reports(
    jsonl: str | os.PathLike[str],
    run: str | None = None,
    *,
    steps: Any = None,
    keys: Any = None,
    key_map: str | None = None,
    curves: bool = False,
) -> Any:
    """``read_reports(jsonl, ...)`` as it was computed from a list of every row (each run's
    rows split off, its shown rows read through its key map, the selection applied, the
    report built from each step's every key); an exception is returned, not raised."""
    from rlmetrics.report.keymap import RunKeys, found_key_map
    from rlmetrics.report.runs import (
        NotARunFile,
        RunNotFound,
        _Run,
        _samples,
        samples_path,
        split_runs,
    )
    from rlmetrics.report.select import UnknownKeys, choose, is_step_row

    path = Path(jsonl)
    bad, broken = SkippedLines(), DamagedRows()
    lines = array("q")
    rows = list(read_jsonl(path, every_row=True, skipped=bad, lines=lines))
    problem = not_a_run_problem(path, rows, bad)
    if problem is not None:
        return NotARunFile(problem)
    rows = run_rows(rows, broken, lines)
    runs = split_runs(rows) or {None: _Run()}
    if run is not None:
        if run not in runs:
            held = ", ".join(str(r) for r in runs) or "none"
            return RunNotFound(f"{path} holds no run {run!r} (runs: {held})")
        runs = {run: runs[run]}
    samples = _samples(samples_path(path))
    reports = []
    for run_id, found in runs.items():
        read = found_key_map(found.hyperparams, key_map)
        rows = found.shown_rows()
        if read is not None:
            rows = RunKeys(read.name).rows(rows)
        shown = rows if steps is None else steps.apply(rows)
        report = _whole_build_report(shown, source=str(path), skipped=bad.count + broken.count)
        if steps is not None:
            report = attrs.evolve(
                report,
                selection=steps.describe(),
                steps_logged=len({r["step"] for r in rows if is_step_row(r)}),
                regressions=find_regressions(rows).as_dict(),
            )
        try:
            series = None if keys is None else choose(keys, _whole_numeric_series(shown))
        except UnknownKeys as exc:
            return exc
        reports.append(
            attrs.evolve(
                report,
                run_id=run_id,
                resumed=found.resumed,
                reruns=found.reruns,
                repeated_steps=tuple(sorted(found.repeated)),
                hyperparams=found.hyperparams or None,
                samples=samples.get(run_id),
                series=series,
                key_map=None if read is None else read.as_dict(),
                curves=_whole_numeric_series(shown) if curves else None,
            )
        )
    return reports


def _whole_numeric_series(rows: Any) -> dict[str, list[tuple[int, float]]]:
    from rlmetrics.report.select import key_name, step_values
    from rlmetrics.values import finite_float

    found: dict[str, dict[int, float]] = {}
    for step, prefix, key, value in step_values(rows):
        number = finite_float(value)
        if number is not None:
            found.setdefault(key_name(prefix, key), {})[step] = number
    return {name: sorted(points.items()) for name, points in found.items()}


def _whole_build_report(rows: Any, source: str, skipped: int) -> Any:
    """``build_report`` as it was: every step's train dicts merged whole."""
    from rlmetrics.events import (
        SETUP_TIMING_PREFIX,
        TRAIN_PREFIXES,
        CheckpointOutcome,
        CheckpointRestore,
        CheckpointSave,
    )
    from rlmetrics.report import summary as s
    from rlmetrics.report.signals import GPU_PREFIX, summarise_signals

    rows = list(rows)
    by_step: dict[int, dict[str, Any]] = {}
    setup = None
    saves: list[dict[str, float]] = []
    restores: list[dict[str, float]] = []
    attempts: dict[str, int] = {}
    reasons: dict[str, int] = {}
    attempt_log: list[dict[str, Any]] = []
    gpu_rows: list[Any] = []
    for row in rows:
        metrics = row.get("metrics")
        prefix = row.get("prefix", "")
        if not isinstance(metrics, dict):
            continue
        step = row.get("step")
        if prefix in TRAIN_PREFIXES and isinstance(step, int):
            by_step.setdefault(step, {}).update(metrics)
        elif prefix == SETUP_TIMING_PREFIX:
            setup = s._setup(metrics)
        elif prefix == GPU_PREFIX:
            gpu_rows.append(metrics)
        elif prefix == CheckpointSave.PREFIX:
            saves.append(s._numbers(metrics))
        elif prefix == CheckpointRestore.PREFIX:
            restores.append(s._numbers(metrics))
        elif prefix == CheckpointOutcome.PREFIX:
            outcome = CheckpointOutcome.from_metrics(metrics)
            name = outcome.outcome or "unknown"
            attempts[name] = attempts.get(name, 0) + 1
            if outcome.reason:
                reasons[outcome.reason] = reasons.get(outcome.reason, 0) + 1
            attempt_log.append(
                {
                    "wall_time_s": outcome.wall_time_s,
                    "outcome": outcome.outcome,
                    "reason": outcome.reason,
                }
            )
    step_rows = [s._step_row(step, by_step[step]) for step in sorted(by_step)]
    return s.RunReport(
        source=source,
        rows=len(rows),
        skipped_lines=skipped,
        steps=tuple(step_rows),
        goodput=s._goodput(step_rows, by_step),
        setup=setup,
        trends={
            name: s._trend(values)
            for key, name in s._TRENDS
            if (values := [r[name] for r in step_rows if r.get(name) is not None])
        },
        vllm=s._vllm(by_step),
        checkpoints=s._checkpoints(saves, restores, attempts, reasons, attempt_log),
        regressions=find_regressions(rows).as_dict(),
        signals=summarise_signals(by_step, gpu_rows),
    )
