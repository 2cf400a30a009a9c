"""What a run looks like from its files: one JSON answer an agent or a script can read.

:func:`run_state` reads a run's JSONL (and, when given, its OTLP/JSON traces file and a
Prometheus server's alerts) and answers in the documented, stable shape
``rlmetrics.query/1`` (``docs/query.schema.json``, ``docs/operations.md#rlmetrics-query``):
the run's identity and configuration, its steps and their pace, the stalls (the same
:class:`~rlmetrics.liveness.StallRule` ``/health`` and ``RLStepStalled`` apply), the last value
of every logged number, the slowest phases, step-time regressions and the alerts firing, and
``findings``: one line per thing a person should look at. ``rlmetrics query`` prints it and
``rlmetrics mcp`` serves it.

Never raises for what is in the files: a torn or foreign line is skipped and counted, a traces
file of another run contributes nothing (counted), a dead Prometheus is an ``alerts_error``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .backends.jsonl import (
    END_KIND,
    HYPERPARAMS_KIND,
    RESUME_KIND,
    SkippedLines,
    named_lines,
    read_jsonl,
    starts_over,
)
from .liveness import MEDIAN_WINDOW, StallRule

if TYPE_CHECKING:
    from .report.regressions import StepTimes

__all__ = ["SCHEMA", "QueryError", "run_state", "select"]

#: The answer's shape and version: a change that removes or retypes a field is a new version.
SCHEMA = "rlmetrics.query/1"
#: The most phases, stalls and values an answer lists (an agent's context is not a log).
MAX_PHASES = 10
MAX_STALLS = 20
MAX_VALUES = 500
#: A rate trend is judged on the newest steps against the ones before them.
TREND_STEPS = 20
#: A pace that changed by less than this share is steady.
TREND_TOLERANCE = 0.2


#: What :func:`read_jsonl` says of a last line without its newline.
_TORN_LAST_LINE = "a torn last line"


class QueryError(ValueError):
    """The question cannot be answered (a missing file, an unknown run, a bad field path)."""


def run_state(
    jsonl: str | os.PathLike[str],
    *,
    traces: str | os.PathLike[str] | None = None,
    prometheus: str | None = None,
    run: str | None = None,
    now: float | None = None,
    rule: StallRule | None = None,
) -> dict[str, Any]:
    """The answer for the run in ``jsonl`` (the file's last run unless ``run`` names one)."""
    path = Path(jsonl)
    if not path.is_file():
        raise QueryError(f"{path}: not a regular file (give the run's JSONL, as Logger wrote it)")
    # The report's rules for a run's rows and for a file that holds none.
    from .report.runs import DamagedRows, RowCensus, run_row_problem

    skipped, damaged, census = SkippedLines(), DamagedRows(), RowCensus()
    # The rows are taken as they are read, never held: a run of 10^5 steps is 100 MB of
    # JSONL and was 500 MB of rows. Kept is what the answer says of one run: the one ``run``
    # names, else the run whose id appeared last (a run first seen later takes its place).
    run_ids: dict[str, None] = {}
    facts, wanted = _RunFacts(), run
    try:
        line: deque[int] = deque(maxlen=1)  # the row's line, to name a damaged one
        for row in read_jsonl(path, every_row=True, skipped=skipped, lines=line):
            census.add(row)
            problem = run_row_problem(row)
            if problem is not None:
                damaged.add(problem, line[-1])
                continue
            run_id = row.get("run_id")
            if run_id is not None and run_id not in run_ids:
                run_ids[run_id] = None
                if run is None:
                    facts, wanted = _RunFacts(), run_id
            if run_id == wanted:
                if starts_over(row):  # a rerun without resume: the earlier attempts left out
                    facts = _RunFacts(reruns=facts.reruns + 1)
                facts.add(row)
    except (OSError, ValueError) as exc:
        raise QueryError(f"{path}: cannot be read: {exc}") from None
    # A traces, samples or empty file is a mistake in the question, not a run of no step
    # (judged before damaged rows are left out, as the report judges it).
    problem = census.problem(path, skipped)
    if problem is not None:
        raise QueryError(problem)
    if run is not None and run not in run_ids:
        raise QueryError(f"{path} has no run {run!r}; its runs: {list(run_ids)}")
    chosen = wanted
    now = time.time() if now is None else now
    steps, stalls, stalled_now = _steps(facts.first_seen, now, rule or StallRule())
    stalled_now = stalled_now and facts.ended is None  # a finished run is silent, not stalled
    answer: dict[str, Any] = {
        "schema": SCHEMA,
        "source": {
            "jsonl": str(path),
            "skipped_lines": skipped.count + damaged.count,
            "traces": None if traces is None else str(traces),
            "prometheus": prometheus,
        },
        "run": {
            "run_id": chosen,
            "runs_in_file": list(run_ids),
            "resumed": facts.resumed,
            "reruns": facts.reruns,
            "hyperparams": facts.hyperparams or None,
            "ended": facts.ended,
        },
        "steps": steps,
        "stalls": stalls[-MAX_STALLS:],
        "stalled_now": stalled_now,
        "last_values": dict(sorted(facts.last_values.items())),
        "slowest_phases": [],
        "traces_other_runs": 0,
        "regressions": _regressions(facts.step_times),
        "alerts": None,
        "alerts_error": None,
        "findings": [],
    }
    if traces is not None:
        answer["slowest_phases"], answer["traces_other_runs"] = _phases(traces, chosen)
    if prometheus is not None:
        answer["alerts"], answer["alerts_error"] = _alerts(prometheus, chosen)
    first = sorted([*skipped.first, *damaged.first], key=lambda line: line[0] or 0)
    not_rows = named_lines(first[: SkippedLines.SHOWN], skipped.count + damaged.count)
    answer["findings"] = _findings(answer, "" if _being_written(answer, skipped) else not_rows)
    return answer


def _being_written(answer: Mapping[str, Any], skipped: SkippedLines) -> bool:
    """Whether the only line that is no row is the last, torn, of a run still stepping: the
    row its loop is writing (a reader catches a row past a page half-copied into the file),
    counted in ``skipped_lines`` but no finding. Once the run is silent, its writer died in
    it."""
    return (
        answer["source"]["skipped_lines"] == 1
        and [why for _line, why in skipped.first] == [_TORN_LAST_LINE]
        and answer["steps"]["count"] > 0
        and not answer["stalled_now"]
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _steps(
    first_seen: Mapping[int, float], now: float, rule: StallRule
) -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
    """What the times each trainer step first arrived at say about the pace."""
    ordered = sorted(first_seen.items())
    times = [t for _, t in ordered]
    # A step that arrived before the one below it (a clock step back) counts as no wait.
    intervals = [max(0.0, b - a) for a, b in itertools.pairwise(times)]
    median = statistics.median(intervals[-MEDIAN_WINDOW:]) if intervals else None
    stalls: list[dict[str, Any]] = []
    # The pace known when each silence began: the intervals just before it, a window slid
    # along (a slice of every interval before each one made a 10^5-step run take a minute).
    known: deque[float] = deque(maxlen=MEDIAN_WINDOW)
    for index, gap in enumerate(intervals):
        limit = rule.limit_s(statistics.median(known) if len(known) >= MEDIAN_WINDOW else None)
        if gap > limit:
            stalls.append(
                {"after_step": ordered[index][0], "gap_s": round(gap, 3), "limit_s": limit}
            )
        known.append(gap)
    last_time = times[-1] if times else None
    since = None if last_time is None else max(0.0, now - last_time)
    limit_now = rule.limit_s(median if len(intervals) >= MEDIAN_WINDOW else None)
    steps = {
        "count": len(ordered),
        "first": ordered[0][0] if ordered else None,
        "last": ordered[-1][0] if ordered else None,
        "last_time": last_time,
        "seconds_since_last": since,
        "median_interval_s": median,
        "stall_limit_s": limit_now,
        "rate_per_min": _rate(intervals),
        "recent_rate_per_min": _rate(intervals[-TREND_STEPS:]),
        "trend": _trend(intervals),
    }
    return steps, stalls, since is not None and since > limit_now


def _rate(intervals: Sequence[float]) -> float | None:
    total = sum(intervals)
    return None if not intervals or total <= 0 else round(60.0 * len(intervals) / total, 4)


def _trend(intervals: Sequence[float]) -> str | None:
    """``slower``, ``faster`` or ``steady``: the newest steps' median interval against the
    median before them; None before there are enough of both."""
    if len(intervals) < 2 * TREND_STEPS:
        return None
    recent = statistics.median(intervals[-TREND_STEPS:])
    before = statistics.median(intervals[:-TREND_STEPS])
    if before <= 0:
        return None
    change = recent / before - 1.0
    if change > TREND_TOLERANCE:
        return "slower"
    if change < -TREND_TOLERANCE:
        return "faster"
    return "steady"


class _RunFacts:
    """What the answer says of one run, taken row by row (in the order written): when each
    trainer step first arrived, whether it was resumed, its configuration, the newest value of
    each key, and what its step-time regressions are judged on."""

    def __init__(self, reruns: int = 0) -> None:
        from .report.regressions import StepTimes  # the report's judgement, as it is

        #: How often the run was started again without resume; these facts are the last
        #: attempt's.
        self.reruns = reruns
        self.first_seen: dict[int, float] = {}
        self.resumed = False
        self.hyperparams: dict[str, Any] = {}
        #: ``{"time", "status"}`` of the run's ``end`` row (its Logger finished it), while no
        #: row came after it (another Logger of the run, a resume); else None.
        self.ended: dict[str, Any] | None = None
        #: ``prefix/key``: its newest number and step, the newest last; at most MAX_VALUES.
        self.last_values: dict[str, dict[str, Any]] = {}
        self.step_times = StepTimes()

    def add(self, row: Mapping[str, Any]) -> None:
        kind = row.get("kind")
        if kind == END_KIND:
            status = row.get("status")
            self.ended = {
                "time": _number(row.get("time")),
                "status": status if status in ("finished", "failed") else "finished",
            }
            return
        self.ended = None  # the run went on after an end
        if kind == RESUME_KIND:
            self.resumed = True
        elif kind == HYPERPARAMS_KIND and isinstance(row.get("hyperparams"), dict):
            self.hyperparams.update(row["hyperparams"])
        if "kind" in row or not isinstance(row.get("metrics"), dict):
            return
        self._first_seen(row)
        self._last_values(row)
        self.step_times.add(row)

    def _first_seen(self, row: Mapping[str, Any]) -> None:
        # /health's rule, not a copy of it (imported here: importing a family declares its
        # series, which reading a file must not do first).
        from .families.liveness import is_trainer_step

        step, at = row.get("step"), _number(row.get("time"))
        if type(step) is not int or at is None or step in self.first_seen:
            return
        if is_trainer_step(row["metrics"], str(row.get("prefix") or "")):
            self.first_seen[step] = at

    def _last_values(self, row: Mapping[str, Any]) -> None:
        prefix, step = row.get("prefix") or "", row.get("step")
        latest = self.last_values
        for key, value in row["metrics"].items():
            number = _number(value)
            if number is not None:
                name = f"{prefix}/{key}" if prefix else str(key)
                latest.pop(name, None)  # newest last, so the cap keeps the newest keys
                latest[name] = {"step": step if type(step) is int else None, "value": value}
                if len(latest) > MAX_VALUES:  # the oldest is older than the MAX_VALUES kept
                    del latest[next(iter(latest))]


def _regressions(taken: StepTimes) -> dict[str, Any]:
    report = taken.judge().as_dict()
    return {
        "status": report["status"],
        "reason": report["reason"],
        "slow_steps": report["slow_steps"],
        "count": len(report["regressions"]),
    }


def _phases(traces: str | os.PathLike[str], run: str | None) -> tuple[list[dict[str, Any]], int]:
    """The slowest leaf phases of ``run`` in the traces file, and how many spans of other
    runs the file held."""
    from .report.traces import read_traces

    path = Path(traces)
    if not path.is_file():
        raise QueryError(f"{path}: no such traces file (the otlp_file exporter's output)")
    totals: dict[str, list[float]] = {}
    mine, others = read_traces([path]).of_run(run)  # the report's rule: one run's spans
    for span in mine.spans:
        if span.bucket is not None:  # a leaf phase: umbrella spans hold the others
            totals.setdefault(span.name, []).append(span.seconds)
    phases: list[dict[str, Any]] = [
        {
            "name": name,
            "count": len(seconds),
            "total_s": round(sum(seconds), 6),
            "mean_s": round(sum(seconds) / len(seconds), 6),
        }
        for name, seconds in totals.items()
    ]
    phases.sort(key=lambda p: (-p["total_s"], p["name"]))
    return phases[:MAX_PHASES], others


def _alerts(url: str, run: str | None) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The alerts a Prometheus server at ``url`` has firing or pending for ``run`` (every
    alert when they carry no run id), or the reason none could be read."""
    endpoint = url.rstrip("/") + "/api/v1/alerts"
    try:
        with urllib.request.urlopen(endpoint, timeout=5) as response:
            body = json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return None, f"{endpoint}: {getattr(exc, 'reason', exc)}"
    found = []
    for alert in (body.get("data") or {}).get("alerts") or []:
        labels = alert.get("labels") or {}
        if run is not None and labels.get("rlmetrics_run_id") not in (None, run):
            continue
        found.append(
            {
                "name": labels.get("alertname"),
                "state": alert.get("state"),
                "summary": (alert.get("annotations") or {}).get("summary"),
            }
        )
    return found, None


def _findings(answer: Mapping[str, Any], bad_lines: str = "") -> list[str]:
    """One line per thing a person should look at; empty when the run looks healthy.
    ``bad_lines`` names the lines that were not rows (``line 3 (not JSON), ...``)."""
    found = []
    steps = answer["steps"]
    if steps["count"] == 0:
        found.append("no trainer step in the file")
    ended = answer["run"]["ended"]
    if ended is not None and ended["status"] == "failed":
        found.append("the run ended failed: its Logger finished with the exception that ended it")
    if answer["stalled_now"]:
        found.append(
            f"stalled: no step for {steps['seconds_since_last']:.0f} s after step "
            f"{steps['last']} (the limit is {steps['stall_limit_s']:.0f} s)"
        )
    if answer["stalls"]:
        worst = max(answer["stalls"], key=lambda s: s["gap_s"])
        found.append(
            f"{len(answer['stalls'])} stall(s) during the run; the longest {worst['gap_s']:.0f} s "
            f"after step {worst['after_step']}"
        )
    if steps["trend"] == "slower":
        found.append("steps are getting slower (the newest steps' median interval is up)")
    if answer["regressions"]["count"]:
        found.append(
            f"{answer['regressions']['count']} step-time regression(s): rlmetrics report "
            "shows what moved with them"
        )
    for alert in answer["alerts"] or []:
        if alert["state"] == "firing":
            found.append(f"alert {alert['name']} firing: {alert['summary']}")
    if answer["alerts_error"]:
        found.append(f"alerts not read: {answer['alerts_error']}")
    if answer["source"]["skipped_lines"] and bad_lines:
        named = f": {bad_lines}"
        found.append(
            f"{answer['source']['skipped_lines']} line(s) of the JSONL were not rows{named}"
        )
    return found


def select(answer: Any, path: str) -> Any:
    """The part of ``answer`` a field path names: dotted keys and ``[n]`` indexes
    (``steps.last``, ``stalls[0].gap_s``, ``last_values["train/loss"].value``); a quoted key
    is any text, its quote and backslashes escaped with a backslash (``["a\\"b"]``)."""
    current = answer
    for part in _parts(path):
        try:
            current = current[part]
        except (KeyError, IndexError, TypeError):
            raise QueryError(f"no field {path!r} in the answer (at {part!r})") from None
    return current


def _parts(path: str) -> list[str | int]:
    parts: list[str | int] = []
    text = path.strip()
    if text.startswith("$"):
        text = text[1:].lstrip(".")
    word = ""
    index = 0
    while index < len(text):
        char = text[index]
        if char == ".":
            if word:
                parts.append(word)
            word = ""
        elif char == "[":
            if word:
                parts.append(word)
            word = ""
            opened = len(text) - len(text[index + 1 :].lstrip())
            if text[opened : opened + 1] in ("'", '"'):
                key, index = _quoted_key(path, text, opened)
                parts.append(key)
                continue
            close = text.find("]", index)
            if close < 0:
                raise QueryError(f"field path {path!r}: '[' without ']'")
            inner = text[index + 1 : close].strip()
            if inner.lstrip("-").isdigit():
                parts.append(int(inner))
            else:
                raise QueryError(f"field path {path!r}: [{inner}] is neither an index nor a key")
            index = close
        else:
            word += char
        index += 1
    if word:
        parts.append(word)
    if not parts:
        raise QueryError("an empty field path")
    return parts


def _quoted_key(path: str, text: str, opened: int) -> tuple[str, int]:
    """The key quoted at ``text[opened]`` up to its closing quote (a backslash takes the next
    character as it is: ``\\"``, ``\\\\``; before any other it is itself), and the index
    past the ``]`` that must follow it."""
    quote, key, index = text[opened], [], opened + 1
    while index < len(text) and text[index] != quote:
        escaped = text[index] == "\\" and text[index + 1 : index + 2] in (quote, "\\")
        index += escaped
        key.append(text[index])
        index += 1
    close = len(text) - len(text[index + 1 :].lstrip())
    if index >= len(text) or text[close : close + 1] != "]":
        raise QueryError(f"field path {path!r}: a quoted key without its closing {quote}]")
    return "".join(key), close + 1
