"""Goodput from a run's spans, beside goodput from its metrics, and why they differ.

Spans come from OTLP/JSON lines files (the ``otlp_file`` exporter's, one or several: a
driver's and its workers'). A step is an ``rl.step`` span with ``rl.iteration``; its leaves are
the spans below it (in any process, through the trace's parent links) that carry
``rl.bucket``. Each leaf counts its *own* time — its length minus that of the bucketed spans
inside it — so nested phases are not counted twice. Goodput from spans is the spec's
``productive / (productive + overhead + idle + wasted)``.

Goodput from metrics is the report's (``summary.py``): the step's wall time minus its
``wall_clock``/``step`` idle categories, over its wall time. The two answer different
questions, and where they differ the report says by how much each documented reason moves it,
applying them in this order (docs/traces.md, "Goodput from spans and from metrics"):

1. ``other clocks``: leaves on other threads or in other processes (a collector's workers, Ray
   workers) count on spans; the metric's share is the driver's wall clock only;
2. ``overlapping``: the driver's leaves of one wall-clock category open at once (concurrent
   asyncio tasks waiting together) each count on spans; the metric counts the time the
   category covered once (the union of their intervals);
3. ``overhead and wasted leaves``: they count against goodput on spans, while the metric
   counts only idle time against the step — except ``idle/validation``, ``overhead`` on its
   span but idle as a metric (the spec's second documented disagreement);
4. ``untimed step time``: step time in no leaf is outside the span rollup and productive for
   the metric.

What is left after these is ``unexplained`` (an idle phase that is no efficiency category,
``efficiency/*`` logged by hand beside ``rlmetrics.step``).

By bucket the report also shows the spec's two documented disagreements as they occurred:
``idle/validation`` seconds (idle as a metric, overhead as a span) and the collector loop's
waits (idle as metrics under ``collector_wall_clock``, no bucket as spans).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..backends.jsonl import SkippedLines
from ..exporters.otlp_file import read_spans, span_attributes
from ..families import efficiency
from ..identity import RUN_ID_ATTR
from ..tracing import BUCKET_ATTR, BUCKETS, ITERATION_ATTR, PHASE_ATTR, STEP_SPANS

__all__ = [
    "RANK_ATTRS",
    "REASONS",
    "Span",
    "TraceSet",
    "StepRollup",
    "compare_goodput",
    "compare_step",
    "read_traces",
    "render",
    "step_rollups",
]

#: Resource attributes that give a process's rank in a distributed run, the first found wins.
RANK_ATTRS = ("rlmetrics.rank", "rank")
#: Each documented reason goodput from spans and from metrics differ, in the order applied.
REASONS = {
    "other_clocks": "leaves on other threads or processes (spans count them; the metric is the "
    "driver's wall clock)",
    "overlapping": "the driver's leaves of one wall-clock category open at once (concurrent "
    "tasks: spans count each; the metric counts the time they cover once)",
    "overhead_and_wasted": "overhead and wasted leaves (against goodput on spans; the metric "
    "counts only idle time)",
    "untimed": "step time in no leaf (outside the span rollup; productive for the metric)",
}
#: Differences smaller than this (percentage points) are rounding, not a reason.
TOLERANCE_PP = 0.05
VALIDATION = "idle/validation"


@attrs.frozen
class Span:
    """One span of a trace file, as the report needs it."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    resource: Mapping[str, Any]
    source: str

    @property
    def seconds(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9

    @property
    def bucket(self) -> str | None:
        bucket = self.attributes.get(BUCKET_ATTR)
        return bucket if bucket in BUCKETS else None

    @property
    def process(self) -> tuple[Any, ...]:
        """What tells processes apart: their resource's instance id and pid."""
        return (
            self.resource.get("service.instance.id"),
            self.resource.get("process.pid"),
            self.source if self.resource.get("service.instance.id") is None else None,
        )

    @property
    def rank(self) -> int | None:
        """Its process's rank in a distributed run (resource ``rlmetrics.rank``, else
        ``rank``), when it has one."""
        for key in RANK_ATTRS:
            value = self.resource.get(key)
            if type(value) is int:
                return value
            if type(value) is str and value.isdigit():
                return int(value)
        return None

    @property
    def thread(self) -> str | None:
        """The thread it ran on, when not the process's main thread."""
        name = self.attributes.get("thread.name")
        return None if name is None else str(name)


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _span(resource: Mapping[str, Any], raw: Mapping[str, Any], source: str) -> Span | None:
    start, end = _int(raw.get("startTimeUnixNano")), _int(raw.get("endTimeUnixNano"))
    trace_id, span_id = raw.get("traceId"), raw.get("spanId")
    if start is None or end is None or not trace_id or not span_id:
        return None
    return Span(
        name=str(raw.get("name", "")),
        trace_id=str(trace_id),
        span_id=str(span_id),
        parent_id=str(raw["parentSpanId"]) if raw.get("parentSpanId") else None,
        start_ns=start,
        end_ns=end,
        attributes=span_attributes(dict(raw)),
        resource=dict(resource),
        source=source,
    )


class TraceSet:
    """Every span of the files read, indexed by id and by parent."""

    def __init__(self, spans: Sequence[Span], sources: Sequence[str], skipped: int = 0) -> None:
        self.spans = tuple(spans)
        self.sources = tuple(sources)
        self.skipped = skipped
        self.by_id = {(s.trace_id, s.span_id): s for s in self.spans}
        self.children: dict[tuple[str, str], list[Span]] = {}
        for span in self.spans:
            if span.parent_id is not None:
                self.children.setdefault((span.trace_id, span.parent_id), []).append(span)

    def of_run(self, run_id: str | None) -> tuple[TraceSet, int]:
        """The spans of the run ``run_id`` and how many spans of other runs were left out:
        several runs may append to one traces file, and a report or a query is about one.

        The run's spans are those its processes wrote (their resource's ``rlmetrics.run.id``;
        None for a process that had none) and every span in the same traces: a worker
        process parented through ``trace_env`` or ``trace_context`` starts with a run id of
        its own, and its phases are the run's."""
        traces = {s.trace_id for s in self.spans if s.resource.get(RUN_ID_ATTR) == run_id}
        mine = [s for s in self.spans if s.trace_id in traces]
        others = len(self.spans) - len(mine)
        return (self if not others else TraceSet(mine, self.sources, self.skipped)), others

    def steps(self) -> dict[int, Span]:
        """Each step's ``rl.step`` span by its ``rl.iteration`` (the last, if one repeats)."""
        out: dict[int, Span] = {}
        for span in self.spans:
            iteration = span.attributes.get(ITERATION_ATTR)
            if span.name in STEP_SPANS and type(iteration) is int:
                out[iteration] = span
        return dict(sorted(out.items()))

    def descendants(self, span: Span) -> list[Span]:
        """Every span below ``span``, in any file (a cycle in bad input is cut)."""
        out: list[Span] = []
        seen = {(span.trace_id, span.span_id)}
        todo = [span]
        while todo:
            current = todo.pop()
            for child in self.children.get((current.trace_id, current.span_id), ()):
                key = (child.trace_id, child.span_id)
                if key not in seen:
                    seen.add(key)
                    out.append(child)
                    todo.append(child)
        return out


def read_traces(paths: Iterable[str | os.PathLike[str]]) -> TraceSet:
    """The spans of every OTLP/JSON lines file in ``paths``; ``skipped`` counts what could
    not be read: a line that is no trace request, and a span without its ids or times."""
    spans: list[Span] = []
    skipped = 0
    sources = []
    for path in paths:
        source = str(path)
        sources.append(source)
        lines = SkippedLines()
        for resource, raw in read_spans(path, lines):
            span = _span(resource, raw, source)
            if span is None:
                skipped += 1
            else:
                spans.append(span)
        skipped += lines.count
    return TraceSet(spans, sources, skipped)


# -- one step's leaves ---------------------------------------------------------------------------


@attrs.frozen
class StepRollup:
    """One step's leaves, their own seconds by bucket.

    ``buckets`` sums every leaf below the step; ``driver`` only the leaves on the step's own
    process and thread; ``validation_s`` is the driver's ``idle/validation`` leaves (in
    ``driver["overhead"]``); ``unbucketed`` the seconds of phases whose span has no bucket
    (the collector loop's), by phase; ``overlap_s`` how much more the driver's idle leaves of
    each wall-clock category add up to than the time they cover (leaves open at once).
    """

    step: int
    wall_s: float
    buckets: dict[str, float]
    driver: dict[str, float]
    validation_s: float
    unbucketed: dict[str, float]
    overlap_s: float = 0.0


def _own_seconds(
    step: Span, leaves: Sequence[Span], index: Mapping[tuple[str, str], Span]
) -> dict[tuple[str, str], float]:
    """Each bucketed span's own time: its length minus the bucketed spans nearest inside it."""
    own = {(s.trace_id, s.span_id): s.seconds for s in leaves}
    for leaf in leaves:
        parent_id = leaf.parent_id
        hops = 0
        while parent_id is not None and parent_id != step.span_id and hops < 256:
            key = (leaf.trace_id, parent_id)
            if key in own:
                own[key] -= leaf.seconds
                break
            parent = index.get(key)
            parent_id = None if parent is None else parent.parent_id
            hops += 1
    return {key: max(0.0, seconds) for key, seconds in own.items()}


def step_rollups(traces: TraceSet) -> dict[int, StepRollup]:
    """Every step's :class:`StepRollup`."""
    out: dict[int, StepRollup] = {}
    for iteration, step in traces.steps().items():
        below = traces.descendants(step)
        leaves = [s for s in below if s.bucket is not None]
        own = _own_seconds(step, leaves, traces.by_id)
        buckets = dict.fromkeys(sorted(BUCKETS), 0.0)
        driver = dict(buckets)
        validation = 0.0
        for leaf in leaves:
            seconds = own[(leaf.trace_id, leaf.span_id)]
            buckets[leaf.bucket] += seconds  # type: ignore[index]
            if leaf.process == step.process and leaf.thread == step.thread:
                driver[leaf.bucket] += seconds  # type: ignore[index]
                if leaf.attributes.get(PHASE_ATTR) == VALIDATION:
                    validation += seconds
        unbucketed: dict[str, float] = {}
        overlap = _overlap_seconds(step, leaves, own)
        for span in below:
            phase = span.attributes.get(PHASE_ATTR)
            if span.bucket is None and isinstance(phase, str):
                unbucketed[phase] = unbucketed.get(phase, 0.0) + span.seconds
        out[iteration] = StepRollup(
            iteration, step.seconds, buckets, driver, validation, unbucketed, overlap
        )
    return out


def _overlap_seconds(
    step: Span, leaves: Sequence[Span], own: Mapping[tuple[str, str], float]
) -> float:
    """How much more the driver's idle leaves of each wall-clock category add up to (their
    own seconds) than the time they cover: what the metric, which counts a wall-clock
    category's time once, does not count."""
    by_category: dict[str, list[Span]] = {}
    for leaf in leaves:
        phase = leaf.attributes.get(PHASE_ATTR)
        if (
            leaf.bucket == "idle"
            and leaf.process == step.process
            and leaf.thread == step.thread
            and isinstance(phase, str)
            and efficiency.MEASUREMENTS.get(phase) == efficiency.WALL_CLOCK
        ):
            by_category.setdefault(phase, []).append(leaf)
    overlap = 0.0
    for spans in by_category.values():
        if len(spans) < 2:
            continue
        covered, reach = 0, None
        for start, end in sorted((s.start_ns, max(s.start_ns, s.end_ns)) for s in spans):
            if reach is None or start > reach:
                covered += end - start
                reach = end
            elif end > reach:
                covered += end - reach
                reach = end
        added = sum(own[(s.trace_id, s.span_id)] for s in spans)
        overlap += max(0.0, added - covered / 1e9)
    return overlap


def _goodput(buckets: Mapping[str, float]) -> float | None:
    total = sum(buckets.values())
    return None if total <= 0 else 100.0 * buckets["productive"] / total


def _pp(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def compare_step(rollup: StepRollup, metrics_pct: float | None) -> dict[str, Any]:
    """Goodput of one step from spans and from metrics, and the difference by reason."""
    spans_pct = _goodput(rollup.buckets)
    row: dict[str, Any] = {
        "step": rollup.step,
        "wall_time_s": rollup.wall_s,
        "metrics_pct": metrics_pct,
        "spans_pct": spans_pct,
        "buckets_s": rollup.buckets,
        "difference_pp": None,
        "reasons_pp": {},
        "unexplained_pp": None,
    }
    if spans_pct is None or metrics_pct is None:
        return row
    driver = rollup.driver
    # The metric counts a wall-clock category's time once, however many leaves were open.
    once = {**driver, "idle": max(0.0, driver["idle"] - rollup.overlap_s)}
    total = sum(once.values())
    # The metric's idle: the driver's idle leaves, and validation, idle as a metric.
    idle = once["idle"] + rollup.validation_s
    stages = {
        "other_clocks": _goodput(driver),
        "overlapping": _goodput(once),
        "overhead_and_wasted": None if total <= 0 else 100.0 * (total - idle) / total,
        "untimed": None if rollup.wall_s <= 0 else 100.0 * (rollup.wall_s - idle) / rollup.wall_s,
    }
    reasons: dict[str, float] = {}
    current = spans_pct
    for reason, value in stages.items():
        if value is None:
            continue
        if abs(value - current) >= TOLERANCE_PP:
            reasons[reason] = value - current
        current = value
    row["difference_pp"] = metrics_pct - spans_pct
    row["reasons_pp"] = {k: _pp(v) for k, v in reasons.items()}
    residual = metrics_pct - current
    row["unexplained_pp"] = _pp(residual) if abs(residual) >= TOLERANCE_PP else 0.0
    return row


def compare_goodput(
    traces: TraceSet,
    metric_steps: Sequence[Mapping[str, Any]],
    metric_goodput: Mapping[str, Any],
    other_runs: int = 0,
) -> dict[str, Any]:
    """Goodput per step and over the run from ``traces`` and from the metrics (a RunReport's
    ``steps`` and ``goodput``), the differences by reason, and the run's bucket rollups with
    the spec's two documented disagreements as they occurred. ``traces`` are the run's own
    (:meth:`TraceSet.of_run`); ``other_runs`` counts the spans of other runs left out."""
    rollups = step_rollups(traces)
    logged = {row["step"]: row for row in metric_steps}
    steps = [
        compare_step(rollup, logged.get(n, {}).get("goodput_pct")) for n, rollup in rollups.items()
    ]
    buckets = dict.fromkeys(sorted(BUCKETS), 0.0)
    for rollup in rollups.values():
        for bucket, seconds in rollup.buckets.items():
            buckets[bucket] += seconds
    compared = [s for s in steps if s["difference_pp"] is not None]
    reasons: dict[str, int] = {}
    for row in compared:
        for reason in row["reasons_pp"]:
            reasons[reason] = reasons.get(reason, 0) + 1
    unexplained = [row["step"] for row in compared if row["unexplained_pp"]]
    metric_idle = sum(
        seconds
        for row in metric_steps
        if row["step"] in rollups
        for seconds in row.get("idle_s", {}).values()
    )
    metric_validation = sum(
        row.get("idle_s", {}).get(VALIDATION, 0.0) for row in metric_steps if row["step"] in rollups
    )
    span_validation = sum(r.validation_s for r in rollups.values())
    collector_metrics = dict(metric_goodput.get("collector_wall_clock_s") or {})
    collector_spans: dict[str, float] = {}
    for span in traces.spans:
        phase = span.attributes.get(PHASE_ATTR)
        if (
            span.bucket is None
            and isinstance(phase, str)
            and efficiency.MEASUREMENTS.get(phase) == efficiency.COLLECTOR_WALL_CLOCK
        ):
            collector_spans[phase] = collector_spans.get(phase, 0.0) + span.seconds
    return {
        "sources": list(traces.sources),
        "spans": len(traces.spans),
        "skipped_spans": traces.skipped,
        "spans_other_runs": other_runs,
        "steps": steps,
        "spans_goodput_pct": _goodput(buckets),
        "buckets_s": buckets,
        "steps_compared": len(compared),
        "reasons_steps": reasons,
        "unexplained_steps": unexplained,
        "disagreements": {
            "validation": {
                "metrics_idle_s": metric_validation,
                "spans_overhead_s": span_validation,
            },
            "collector_loop": {
                "metrics_idle_s": collector_metrics,
                "spans_unbucketed_s": collector_spans,
            },
        },
        "idle_s": {
            "metrics": metric_idle,
            "spans_driver": sum(r.driver["idle"] for r in rollups.values()),
            "spans_driver_validation": span_validation,
        },
    }


# -- as text -------------------------------------------------------------------------------------

_SHORT = {
    "other_clocks": "other clocks",
    "overlapping": "overlapping",
    "overhead_and_wasted": "overhead/wasted",
    "untimed": "untimed",
}


def _f(value: float | None, digits: int = 1, sign: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def render(comparison: Mapping[str, Any], max_rows: int = 12) -> str:
    """The comparison as the text ``rlmetrics report --traces`` prints."""
    steps = comparison["steps"]
    lines = [
        "",
        f"Goodput from spans ({comparison['spans']} spans in "
        f"{', '.join(os.path.basename(s) for s in comparison['sources'])}"
        + (
            f"; {comparison['skipped_spans']} unreadable skipped"
            if comparison["skipped_spans"]
            else ""
        )
        + (
            f"; {comparison['spans_other_runs']} spans of other runs left out"
            if comparison.get("spans_other_runs")
            else ""
        )
        + "):",
    ]
    if not steps:
        return "\n".join([*lines, "  no rl.step spans with rl.iteration in the trace", ""])
    buckets = comparison["buckets_s"]
    if comparison["spans_goodput_pct"] is None and not any(buckets.values()):
        # Steps traced with nothing timed inside them (a loop whose rollouts are trajectory
        # spans of their own): a table of dashes would read as a failed comparison.
        lines.append(
            f"  over {len(steps)} steps: their spans hold no phases (rlmetrics.phase), so there "
            "is no span goodput to set beside the metrics' (docs/traces.md)"
        )
        return "\n".join([*lines, ""])
    lines.append(
        f"  over {len(steps)} steps: {_f(comparison['spans_goodput_pct'])}% productive of the "
        "leaves' time ("
        + ", ".join(f"{b} {buckets[b]:.1f}s" for b in ("productive", "overhead", "idle", "wasted"))
        + ")"
    )
    header = ["step", "metrics %", "spans %", "diff pp", "explained by (pp)"]
    rows = []
    shown = steps if len(steps) <= max_rows else [*steps[: max_rows // 2], *steps[-max_rows // 2 :]]
    for row in shown:
        reasons = ", ".join(f"{_SHORT[k]} {_f(v, sign=True)}" for k, v in row["reasons_pp"].items())
        if row["unexplained_pp"]:
            reasons += (
                ", " if reasons else ""
            ) + f"UNEXPLAINED {_f(row['unexplained_pp'], sign=True)}"
        rows.append(
            [
                str(row["step"]),
                _f(row["metrics_pct"]),
                _f(row["spans_pct"]),
                _f(row["difference_pp"], sign=True),
                reasons or ("-" if row["difference_pp"] is None else "none"),
            ]
        )
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header) - 1)]
    for cells in (header, *rows):
        lines.append(
            "  "
            + "  ".join(c.rjust(w) for c, w in zip(cells[:-1], widths, strict=True))
            + "  "
            + cells[-1]
        )
    if len(steps) > len(shown):
        lines.append(f"  ({len(steps) - len(shown)} steps not shown; --json has every one)")
    lines.append("  why they differ (docs/traces.md, 'Goodput from spans and from metrics'):")
    for reason, text in REASONS.items():
        count = comparison["reasons_steps"].get(reason, 0)
        if count:
            lines.append(f"    {_SHORT[reason]}: {text}; {count} steps")
    unexplained = comparison["unexplained_steps"]
    if unexplained:
        lines.append(
            f"    UNEXPLAINED at steps {unexplained[:20]}: an idle phase that is no efficiency "
            "category, efficiency/* logged by hand beside rlmetrics.step, or a phase outside "
            "its step"
        )
    elif comparison["steps_compared"]:
        lines.append("    nothing else: every difference is one of these")
    validation = comparison["disagreements"]["validation"]
    if validation["metrics_idle_s"] or validation["spans_overhead_s"]:
        lines.append(
            f"  idle/validation: {validation['metrics_idle_s']:.1f} s idle as a metric, "
            f"{validation['spans_overhead_s']:.1f} s overhead on spans (the spec's documented "
            "disagreement: training GPUs idle, generation GPUs busy)"
        )
    collector = comparison["disagreements"]["collector_loop"]
    names = sorted(set(collector["metrics_idle_s"]) | set(collector["spans_unbucketed_s"]))
    for name in names:
        traced = collector["spans_unbucketed_s"].get(name)
        spans = (
            "not traced (accounted without a span)"
            if traced is None
            else f"{traced:.1f} s of spans with no bucket (the spec's documented disagreement: "
            "a trace has no measurement filter)"
        )
        lines.append(
            f"  {name}: {_f(collector['metrics_idle_s'].get(name))} s idle as a metric "
            f"(collector_wall_clock, run total); {spans}"
        )
    return "\n".join(lines) + "\n"
