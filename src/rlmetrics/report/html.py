"""``rlmetrics report --html``: the run in one self-contained HTML file — its curves, goodput
per step, the timeline of its phases (with ``--traces``) and a table of its trajectories that
filters by outcome, env and reward and opens a row into its turns, tool calls and kept text.

Self-contained means the file asks for nothing: the CSS, the script and the run's data are
inline, the charts are SVG the script draws, and the page's Content-Security-Policy forbids
every request (``default-src 'none'``), so it opens the same from a laptop, a CI artifact or an
air-gapped cluster. The data is one JSON block; text a text policy kept is shown as text
(``textContent``), never as markup."""

from __future__ import annotations

import datetime
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from .summary import RunReport
from .timeline import DEFAULT_STEPS, _depth, lanes, rank_window
from .traces import Span, TraceSet
from .trajectory_view import read_trajectories

__all__ = [
    "CSP",
    "CURVE_POINTS",
    "GOODPUT_BARS",
    "GOODPUT_CURVE",
    "LEADING_CURVES",
    "build_page",
    "page_data",
    "write_html",
]

#: Nothing may be fetched: inline style and script only, images from data: URLs.
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
#: Step-row keys that are timings (the goodput chart's), not curves.
_TIMINGS = {"step", "wall_time_s", "idle_s", "productive_s", "goodput_pct"}


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity made None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


#: The curve of each step's goodput the page adds to the run's.
GOODPUT_CURVE = "goodput %"
#: The points a curve keeps: a chart is 330 px wide, and a run of 10⁵ steps in every one of
#: a few hundred series would make a page no browser opens.
CURVE_POINTS = 1000


def _curves(report: RunReport) -> dict[str, list[tuple[int, float]]]:
    """Every numeric per-step series of the run (:attr:`RunReport.curves`, else the report's
    columns: reward, KL, loss...) and goodput %, each thinned to :data:`CURVE_POINTS`: what
    --keys chose first, in the order named, then the rest in :func:`_curve_rank` order."""
    curves: dict[str, list[tuple[int, float]]] = {}
    if report.curves is not None:
        curves.update(report.curves)
    else:
        for row in report.steps:
            for key, value in row.items():
                if (
                    key in _TIMINGS
                    or isinstance(value, bool)
                    or not isinstance(value, (int, float))
                ):
                    continue
                if math.isfinite(value):
                    curves.setdefault(key, []).append((row["step"], value))
    # What --keys named leads, in the order named: the user chose those first.
    named = {key: list(points) for key, points in (report.series or {}).items()}
    goodput = [
        (row["step"], row["goodput_pct"])
        for row in report.steps
        if isinstance(row.get("goodput_pct"), (int, float))
    ]
    if goodput:
        # The run's own key of that name (a loop may log one) keeps its curve beside this one.
        taken = GOODPUT_CURVE in curves or GOODPUT_CURVE in named
        name = f"{GOODPUT_CURVE} (report)" if taken else GOODPUT_CURVE
        curves[name] = goodput
    rest = sorted((key for key in curves if key not in named), key=_curve_rank)
    return {
        key: _thinned(points, CURVE_POINTS)
        for key, points in {**named, **{key: curves[key] for key in rest}}.items()
    }


#: The curves a user looks at first, in this order (the training family's scalars: TRL's
#: ``kl`` and ``entropy`` beside their rlmetrics keys); a run's other series follow them.
LEADING_CURVES = (
    "reward",
    "kl_penalty",
    "kl",
    "loss",
    "critic/loss",
    "approx_entropy",
    "entropy",
    "mean_gen_tokens_per_sample",
    "grad_norm",
    "lr",
)


def _curve_rank(key: str) -> tuple[int, str, str]:
    """Where ``key``'s curve comes on the page: the :data:`LEADING_CURVES`, each reward
    component right after ``reward``; then the rest by group (the key's first ``/`` part;
    ungrouped keys first), sorted within each. Not the order the JSONL first held each key: a
    run whose engine logs first showed a dozen ``vllm/*`` curves before its reward."""
    if key in LEADING_CURVES:
        return (LEADING_CURVES.index(key), "", key)
    if key.startswith("reward/"):
        return (0, "reward", key)
    group = key.split("/", 1)[0] if "/" in key else ""
    return (len(LEADING_CURVES), group, key)


def _thinned(points: list[tuple[int, float]], most: int) -> list[tuple[int, float]]:
    """``points`` (in step order) in at most ``most``: the lowest and the highest of each of
    ``(most - 2) // 2`` runs of consecutive steps, in step order, so a spike or a dip stays in the
    curve where every n-th point would step over it. The first and last points are kept."""
    if len(points) <= most:
        return points
    buckets = (most - 2) // 2  # room for the first and last points beside them
    kept = [points[0]]
    for b in range(buckets):
        run = points[b * len(points) // buckets : (b + 1) * len(points) // buckets]
        low = min(run, key=lambda p: p[1])
        high = max(run, key=lambda p: p[1])
        kept.extend(p for p in sorted({low, high}) if p[0] > kept[-1][0])
    if kept[-1] != points[-1]:
        kept.append(points[-1])
    return kept


def _timeline(
    traces: TraceSet, steps: tuple[int, int] | None, chosen: tuple[int, int] | None = None
) -> dict[str, Any]:
    """The phases of a window of steps, by lane, in seconds from the window's start: what
    ``--timeline`` draws, as data. The window is ``steps`` (``--timeline-steps``), else the
    first ``DEFAULT_STEPS`` of the ``chosen`` ones (``--steps``, ``--tail``: the page's curves
    and trajectories are of those), else of the run."""
    by_step = traces.steps()
    if steps is None:
        window = [s for n, s in by_step.items() if chosen is None or chosen[0] <= n <= chosen[1]][
            :DEFAULT_STEPS
        ]
    else:
        window = [s for n, s in by_step.items() if steps[0] <= n <= steps[1]]
    # Which of the traced steps the window is, for the caption: a window of the first 12
    # with nothing said was read as the whole run.
    numbers = list(by_step)
    traced = {
        "traced": len(numbers),
        "first": min(numbers, default=None),
        "last": max(numbers, default=None),
        "asked": steps is not None,
        "chosen": None if steps is not None else chosen,
        "default_steps": DEFAULT_STEPS,
    }
    if not window:
        return {"steps": [], "lanes": [], "end": 0.0, **traced}
    t0 = min(s.start_ns for s in window)
    # With several ranks, each rank's own step spans hold its phases: every rank a lane.
    found = lanes(traces, rank_window(traces, window))
    spans: list[Span] = [s for lane in found.values() for s in lane]
    end = max([s.end_ns for s in window] + [s.end_ns for s in spans])

    def sec(ns: int) -> float:
        return round((ns - t0) / 1e9, 6)

    def depth(span: Span) -> int:
        return _depth(span, traces.by_id)

    return {
        "steps": [
            {
                "step": s.attributes.get("rl.iteration"),
                "start": sec(s.start_ns),
                "end": sec(s.end_ns),
            }
            for s in window
        ],
        "lanes": [
            {
                "name": name,
                "spans": [
                    [
                        sec(s.start_ns),
                        sec(s.end_ns),
                        str(s.attributes["rl.phase"]),
                        s.bucket,
                        depth(s),
                    ]
                    for s in sorted(lane, key=depth)
                ],
            }
            for name, lane in found.items()
        ],
        "end": sec(end),
        **traced,
    }


def page_data(
    report: RunReport,
    jsonl: str | os.PathLike[str],
    traces: TraceSet | None = None,
    timeline_steps: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """What the page draws, as one JSON-able dict."""
    chosen = report.chosen_steps
    data: dict[str, Any] = _finite(
        {
            "run_id": report.run_id,
            "source": str(jsonl),
            "generated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "traces": list(traces.sources) if traces is not None else [],
            "steps": _bars(report.steps),
            # Every step shown, timed or not (the goodput's count is of the timed ones).
            "step_count": len(report.steps),
            "goodput": report.goodput,
            "curves": _curves(report),
            "timeline": None if traces is None else _timeline(traces, timeline_steps, chosen),
            "trajectories": read_trajectories(jsonl, report.run_id, traces, steps=chosen),
        }
    )
    return data


#: What the goodput chart draws of a step; its other columns are the curves (a step's whole
#: row, every key of it, made a run of 10^5 steps a 20 MB page).
_BAR_KEYS = ("step", "wall_time_s", "productive_s", "idle_s", "goodput_pct")


#: The most bars the goodput chart draws: it is at most 1400 px wide, so a bar a step of a
#: run of 2*10^5 steps was 400 000 sub-pixel rectangles (21 s to draw); a longer run's steps
#: are drawn a bar per run of consecutive steps, at least 2 px each.
GOODPUT_BARS = 600


def _bar(row: Mapping[str, Any]) -> dict[str, Any]:
    return {key: row[key] for key in _BAR_KEYS if key in row}


def _bars(steps: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What the goodput chart draws: each step (:data:`_BAR_KEYS`), or past
    :data:`GOODPUT_BARS` timed steps a bar per run of consecutive ones (:func:`_bucket`)."""
    timed = [row for row in steps if _seconds(row.get("wall_time_s")) is not None]
    if len(timed) <= GOODPUT_BARS:
        return [_bar(row) for row in steps]
    return [
        _bucket(timed[b * len(timed) // GOODPUT_BARS : (b + 1) * len(timed) // GOODPUT_BARS])
        for b in range(GOODPUT_BARS)
    ]


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _bucket(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One bar for consecutive steps: the mean of each part of a step (productive, each idle
    category; a step without one spent 0 s there), so the bar's height is the mean wall time
    and its parts add up as a step's do, and the shortest and the longest step (and which one
    it was), so one slow step among hundreds still shows as a whisker to its height."""
    count = len(rows)
    walls = [float(row["wall_time_s"]) for row in rows]
    longest = max(range(count), key=walls.__getitem__)
    idle: dict[str, float] = {}
    for row in rows:
        for category, seconds in (row.get("idle_s") or {}).items():
            if (number := _seconds(seconds)) is not None:
                idle[category] = idle.get(category, 0.0) + number
    productive = sum(_seconds(row.get("productive_s")) or 0.0 for row in rows)
    wall = math.fsum(walls)
    return {
        "step": rows[0]["step"],
        "last_step": rows[-1]["step"],
        "steps": count,
        "wall_time_s": wall / count,
        "wall_min_s": min(walls),
        "wall_max_s": walls[longest],
        "longest_step": rows[longest]["step"],
        "productive_s": productive / count,
        "idle_s": {category: seconds / count for category, seconds in sorted(idle.items())},
        "goodput_pct": min(100.0, 100.0 * productive / wall) if wall > 0 else None,
    }


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("html_assets").joinpath(name).read_text("utf-8")


def _script_json(data: Mapping[str, Any]) -> str:
    """``data`` as JSON safe inside a ``<script>`` element: no ``</script>``, no HTML comment
    opener, no line separators JavaScript would read as line ends."""
    text = json.dumps(data, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(raw, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def build_page(data: Mapping[str, Any]) -> str:
    """The whole HTML document for ``data`` (:func:`page_data`)."""
    title = html.escape(f"rlmetrics run {data.get('run_id') or ''}".strip())
    sections = (
        ("curves", "Curves"),
        ("goodput", "Goodput per step (seconds)"),
        ("timeline", "Timeline"),
        ("trajectories", "Trajectories"),
    )
    body = "\n".join(f'<h2>{label}</h2>\n<section id="{sid}"></section>' for sid, label in sections)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="rlmetrics report --html">
<title>{title}</title>
<style>
{_asset("report.css")}
</style>
</head>
<body>
<header id="header"></header>
{body}
<script id="rlmetrics-data" type="application/json">{_script_json(data)}</script>
<script>
{_asset("report.js")}
</script>
</body>
</html>
"""


def write_html(
    report: RunReport,
    jsonl: str | os.PathLike[str],
    path: str | os.PathLike[str],
    traces: TraceSet | None = None,
    timeline_steps: tuple[int, int] | None = None,
) -> int:
    """Write the page of ``report`` (read from ``jsonl``, with its spans from ``traces``) to
    ``path``; returns how many trajectory rows it holds."""
    data = page_data(report, jsonl, traces, timeline_steps)
    Path(path).write_text(build_page(data), encoding="utf-8")
    rows: Sequence[Any] = data["trajectories"]["rows"]
    return len(rows)
