"""``rlmetrics report --timeline``: the run's phases as bands on a time axis, one lane per
thread of each process (the driver first, then its workers), coloured by ``rl.bucket``, with
each step shaded and numbered. Needs matplotlib (``pip install 'rlmetrics[report]'``).

A run of several ranks (each rank's spans in a file of its own, its resource carrying
``rlmetrics.rank``) gets a lane per rank and thread, rank 0 on top: every rank's steps of the
window are drawn, on the wall clock the ranks share, so a straggler shows as the lane whose
phase ends last.

A lane shows a phase's *own* time: a phase inside another is drawn on top of it, so the
colour at any instant is the innermost phase's. Phases without a bucket (the collector loop's
waits) are drawn hatched in grey. A long run is cut to a window of steps (``steps``), so the
picture stays readable in a bug report.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..tracing import ITERATION_ATTR, STEP_SPAN
from .plot import PLOT_DPI, NothingToPlot, _pyplot, unknown_glyphs_said_once
from .traces import Span, TraceSet

__all__ = ["BUCKET_COLOURS", "DEFAULT_STEPS", "lanes", "plot_timeline", "rank_window"]

BUCKET_COLOURS = {
    "productive": "#4c9f70",
    "overhead": "#5b8db8",
    "idle": "#e07b39",
    "wasted": "#d64550",
    None: "#b0b0b0",
}
#: Steps drawn when no window is given: the first ones.
DEFAULT_STEPS = 12
_WIDTH_PX = 1600


def _lane_name(span: Span, driver: tuple[Any, ...] | None) -> tuple[tuple[int, int], str]:
    resource = span.resource
    thread = span.thread
    rank_of = span.rank
    if rank_of is not None:  # a rank of a distributed run: lanes by rank, rank 0 first
        base = f"rank {rank_of}"
        rank = (0, rank_of)
    elif span.process == driver:
        base = "driver"
        rank = (0, -1)
    else:
        group = resource.get("rl.worker_group") or resource.get("service.name") or "worker"
        pid = resource.get("process.pid")
        which = (
            f"pid {pid}" if pid is not None else str(resource.get("service.instance.id", "?"))[:8]
        )
        base = f"{group} ({which})"
        rank = (1, 0)
    return rank, base if thread is None else f"{base} / {thread}"


def rank_window(traces: TraceSet, window: Sequence[Span]) -> list[Span]:
    """Every process's ``rl.step`` spans of the steps in ``window`` (which holds one process's
    each): with several ranks, each rank's own step spans, whose phases are its lanes."""
    numbers = {span.attributes.get(ITERATION_ATTR) for span in window}
    chosen = {id(span) for span in window}
    extra = [
        span
        for span in traces.spans
        if span.name == STEP_SPAN
        and id(span) not in chosen
        and span.attributes.get(ITERATION_ATTR) in numbers
    ]
    return [*window, *extra]


def lanes(traces: TraceSet, window: Sequence[Span]) -> dict[str, list[Span]]:
    """The phases (spans carrying ``rl.phase``) below the steps of ``window``, by lane; the
    driver's lanes first."""
    driver = window[0].process if window else None
    found: dict[tuple[tuple[int, int], str], list[Span]] = {}
    seen: set[tuple[str, str]] = set()
    for step in window:
        for span in traces.descendants(step):
            key = (span.trace_id, span.span_id)
            if key in seen or "rl.phase" not in span.attributes:
                continue
            seen.add(key)
            found.setdefault(_lane_name(span, driver), []).append(span)
    return {name: spans for (_rank, name), spans in sorted(found.items())}


def _depth(span: Span, index: Mapping[tuple[str, str], Span]) -> int:
    depth, parent_id = 0, span.parent_id
    while parent_id is not None and depth < 64:
        parent = index.get((span.trace_id, parent_id))
        if parent is None or "rl.phase" not in parent.attributes:
            break
        depth, parent_id = depth + 1, parent.parent_id
    return depth


def plot_timeline(
    traces: TraceSet,
    path: str | os.PathLike[str],
    steps: tuple[int, int] | None = None,
    among: tuple[int, int] | None = None,
) -> int:
    """Write the timeline of the steps ``steps`` (first, last; default the first
    :data:`DEFAULT_STEPS` of the steps ``among``, the ones ``--steps`` or ``--tail`` chose,
    else of the run) to ``path`` as a PNG; returns how many steps it shows. Raises
    :class:`~.plot.NothingToPlot` (nothing written) when no step is there to draw, as the
    report's picture does: an empty picture would look like a run that did nothing."""
    plt = _pyplot()
    all_steps = traces.steps()
    if steps is None:
        chosen = [s for n, s in all_steps.items() if among is None or among[0] <= n <= among[1]]
        chosen = chosen[:DEFAULT_STEPS]
    else:
        chosen = [s for n, s in all_steps.items() if steps[0] <= n <= steps[1]]
    if not chosen:
        held = f"steps {min(all_steps)}-{max(all_steps)}" if all_steps else "no rl.step span"
        wanted = steps if steps is not None else among
        if wanted is None:
            asked = ""
        elif wanted[0] > wanted[1]:  # the empty range: --steps or --tail chose no step
            asked = ": the steps chosen hold none;"
        else:
            asked = f" in steps {wanted[0]}-{wanted[1]}:"
        raise NothingToPlot(f"no step to draw{asked or ':'} the traces hold {held}")
    every = rank_window(traces, chosen)
    by_lane = lanes(traces, every)
    height = max(4.0, 1.6 + 0.55 * max(1, len(by_lane)))
    figure = plt.figure(figsize=(_WIDTH_PX / PLOT_DPI, height), dpi=PLOT_DPI)
    axes = figure.add_subplot(1, 1, 1)
    try:
        title = ", ".join(os.path.basename(s) for s in traces.sources) or "trace"
        with unknown_glyphs_said_once():
            _draw(axes, traces, chosen, every, by_lane, all_steps)
            window = _window_said(chosen, all_steps, asked=steps is not None, among=among)
            axes.set_title(f"rlmetrics timeline: {title}, {window}", fontsize=12)
            figure.tight_layout()
            figure.savefig(path, dpi=PLOT_DPI)  # in the format its suffix names
    finally:
        plt.close(figure)
    return len(chosen)


def _window_said(
    chosen: Sequence[Span],
    all_steps: Mapping[int, Span],
    *,
    asked: bool,
    among: tuple[int, int] | None = None,
) -> str:
    """Which of the traced steps the picture shows: by default a window of the first ones
    (of the steps ``among``), which under a title of the file alone was read as the whole
    run."""
    shown = {id(span) for span in chosen}
    numbers = [n for n, span in all_steps.items() if id(span) in shown]
    if len(numbers) == len(all_steps):
        return f"all {len(all_steps)} traced steps"
    said = f"steps {min(numbers)}\u2013{max(numbers)} of the {len(all_steps)} traced"
    if asked:
        return said
    if among is not None:
        if len(numbers) == sum(among[0] <= n <= among[1] for n in all_steps):
            return said  # every step chosen is drawn
        of = f"the first {DEFAULT_STEPS} of steps {among[0]}\u2013{among[1]} chosen"
        return f"{said} ({of}; --timeline-steps FIRST:LAST draws others)"
    return f"{said} (the first {DEFAULT_STEPS}; --timeline-steps FIRST:LAST draws others)"


def _draw(
    axes: Any,
    traces: TraceSet,
    chosen: Sequence[Span],
    every: Sequence[Span],
    by_lane: Mapping[str, Sequence[Span]],
    all_steps: Mapping[int, Span],
) -> None:
    # Every rank's steps share the wall clock: the window spans the earliest start and the
    # latest end of any of them; the shaded bands are the steps of one process.
    origin = min(s.start_ns for s in every)
    names = list(by_lane)
    rows = {name: len(names) - 1 - i for i, name in enumerate(names)}  # driver on top
    number = {id(span): n for n, span in all_steps.items()}
    for index, step in enumerate(chosen):
        left = (step.start_ns - origin) / 1e9
        axes.axvspan(left, left + step.seconds, color="#000000", alpha=0.04 if index % 2 else 0.0)
        axes.axvline(left, color="#888888", linewidth=0.6)
        axes.text(left, len(names) - 0.45, f" {number[id(step)]}", fontsize=7, color="#555555")
    used: set[str | None] = set()
    for name, spans in by_lane.items():
        row = rows[name]
        for span in sorted(spans, key=lambda s: _depth(s, traces.by_id)):
            depth = _depth(span, traces.by_id)
            inset = min(0.3, 0.08 * depth)
            bucket = span.bucket
            used.add(bucket)
            axes.broken_barh(
                [((span.start_ns - origin) / 1e9, max(span.seconds, 1e-9))],
                (row - 0.4 + inset, 0.8 - 2 * inset),
                facecolors=BUCKET_COLOURS[bucket],
                edgecolor="white",
                linewidth=0.3,
                hatch="//" if bucket is None else None,
            )
    end = max(s.end_ns for s in every)
    axes.set_xlim(0.0, (end - origin) / 1e9 * 1.01)  # the steps' window: nothing else is drawn
    axes.set_yticks(list(rows.values()), list(rows))
    axes.set_ylim(-0.6, len(names) - 0.2)
    axes.set_xlabel("seconds since the first step shown (shaded bands: steps, numbered)")
    from matplotlib.patches import Patch

    handles = [
        Patch(
            facecolor=BUCKET_COLOURS[b],
            hatch="//" if b is None else None,
            label=b or "no bucket",
        )
        for b in ("productive", "overhead", "idle", "wasted", None)
        if b in used
    ]
    axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
