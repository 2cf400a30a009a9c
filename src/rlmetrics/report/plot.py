"""``rlmetrics report --plot``: one picture (PNG, SVG, PDF, JPEG...: its suffix says which)
with a panel for each thing the run logged: goodput and idle time per step (stacked), reward,
KL and loss over steps (or the series ``--keys`` names), rollout-checkpoint latencies. A
panel the run has no data for is left out. Needs matplotlib: ``pip install
'rlmetrics[report]'``."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .._warn import warn_once
from .destinations import file_problem
from .summary import RunReport

__all__ = [
    "DISTINCT_COLORS",
    "HEADROOM",
    "INSTALL_HINT",
    "MAX_COLUMNS",
    "PLOT_DPI",
    "PLOT_SIZE_PX",
    "MissingExtra",
    "NothingToPlot",
    "destination_problem",
    "panels",
    "plot_report",
    "report_figure",
    "supported_formats",
    "title",
    "unknown_glyphs_said_once",
]

INSTALL_HINT = "pip install 'rlmetrics[report]'"
#: The PNG's size in pixels (width, height).
PLOT_SIZE_PX = (1600, 1000)
PLOT_DPI = 100
#: Panels side by side below the goodput panel (which takes the whole width).
MAX_COLUMNS = 3
#: The trends drawn by default: (step row key, title).
_TRENDS = (("reward", "Mean reward"), ("kl", "KL"), ("loss", "Loss"))


#: matplotlib's warning for a character its font cannot draw.
_MISSING_GLYPH = re.compile(r"Glyph \d+ .*missing from font")


@contextlib.contextmanager
def unknown_glyphs_said_once() -> Iterator[None]:
    """matplotlib warns (two lines on stderr) for every character its font has no glyph for,
    each time it lays text out: a run id or key in another script made dozens of lines. Inside
    this block they are one line, once; other warnings pass on as they were."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    missing = False
    for found in caught:
        if issubclass(found.category, UserWarning) and _MISSING_GLYPH.search(str(found.message)):
            missing = True
            continue
        warnings.warn_explicit(found.message, found.category, found.filename, found.lineno)
    if missing:
        warn_once(
            "report:missing-glyphs",
            "rlmetrics report: the pictures' font has no glyph for some characters of their "
            "text (a run id, key or phase in another script); they are drawn as boxes",
            expected=True,
        )


class MissingExtra(ImportError):
    """matplotlib is not installed."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise MissingExtra(
            "--plot and --timeline need matplotlib, which the 'report' extra installs: "
            f"{INSTALL_HINT}"
        ) from exc
    matplotlib.use("Agg")  # files only: no display, no GUI toolkit
    import matplotlib.pyplot as plt

    return plt


class NothingToPlot(ValueError):
    """The run logged nothing a panel draws."""


def destination_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a picture cannot be written to ``path``, or None: it must be a file that can be
    written in a folder that exists (:func:`~.destinations.file_problem`, the check of every
    file the report writes), and its suffix name a format matplotlib writes (``.png``,
    ``.svg``, ``.pdf``, ``.jpg``...)."""
    path = Path(path)
    problem = file_problem(path)
    if problem is not None:
        return problem
    formats = supported_formats()
    suffix = path.suffix.lower()
    if suffix.removeprefix(".") not in formats:
        named = f"suffix {suffix!r}" if suffix else "no suffix"
        return (
            f"{path} has {named}, and the suffix names the picture's format: use one of "
            + ", ".join(f".{f}" for f in sorted(formats))
        )
    return None


def supported_formats() -> set[str]:
    """The suffixes (without the dot) matplotlib writes pictures as."""
    _pyplot()
    from matplotlib.backend_bases import FigureCanvasBase

    return set(FigureCanvasBase.get_supported_filetypes())


def panels(report: RunReport) -> list[tuple[str, Callable[[Any, RunReport], None]]]:
    """The panels the report's picture has: only those the run has data for. Goodput and idle
    time when steps carry efficiency keys; a line per ``--keys`` series, else reward, KL and
    loss where logged; rollout checkpoints when there were any."""
    chosen: list[tuple[str, Callable[[Any, RunReport], None]]] = []
    if any(s.get("goodput_pct") is not None for s in report.steps):
        chosen.append(("goodput", _goodput))
    if report.series is not None:
        for key in report.series:
            chosen.append((key, functools.partial(_line, key=key)))
    else:
        for key, label in _TRENDS:
            if any(s.get(key) is not None for s in report.steps):
                chosen.append((key, functools.partial(_trend, key=key, label=label)))
    checkpoints = report.checkpoints
    if checkpoints is not None and (
        checkpoints["saves"]
        or checkpoints["restores"]
        or any(a["outcome"] != "completed" for a in checkpoints["attempt_log"])
    ):
        chosen.append(("checkpoints", _checkpoints))
    return chosen


def plot_report(report: RunReport, path: str | os.PathLike[str]) -> list[str]:
    """Write the report's picture to ``path`` (:data:`PLOT_SIZE_PX`, in the format its suffix
    names) with the panels the run has data for; returns their names. Raises
    :class:`NothingToPlot` when there are none."""
    chosen = panels(report)
    plt = _pyplot()
    with unknown_glyphs_said_once():
        figure = report_figure(report)
        try:
            figure.savefig(path, dpi=PLOT_DPI)
        finally:
            plt.close(figure)
    return [name for name, _ in chosen]


def report_figure(report: RunReport) -> Any:
    """The report's picture as a matplotlib figure (the caller closes it:
    ``matplotlib.pyplot.close(figure)``). Raises :class:`NothingToPlot` when no panel has
    data."""
    chosen = panels(report)
    if not chosen:
        raise NothingToPlot(
            "the run logged nothing to draw (no efficiency/* keys, reward, kl_penalty or loss "
            "at a trainer step, no rollout checkpoints): choose keys with --keys"
        )
    plt = _pyplot()
    width, height = PLOT_SIZE_PX
    figure = plt.figure(figsize=(width / PLOT_DPI, height / PLOT_DPI), dpi=PLOT_DPI)
    wide = chosen[0][0] == "goodput"
    small = chosen[1:] if wide else chosen
    columns = max(1, min(len(small), MAX_COLUMNS))
    rows = math.ceil(len(small) / columns) + wide
    grid = figure.add_gridspec(rows, columns, height_ratios=(1.15,) * wide + (1,) * (rows - wide))
    try:
        if wide:
            _goodput(figure.add_subplot(grid[0, :]), report)
        for index, (_name, draw) in enumerate(small):
            row, column = divmod(index, columns)
            # The last panel takes what its row leaves (a lone checkpoints panel: the width).
            last = column + 1 if index < len(small) - 1 else columns
            draw(figure.add_subplot(grid[row + wide, column:last]), report)
        figure.suptitle(title(report), fontsize=13)
        figure.tight_layout()
    except Exception:
        plt.close(figure)
        raise
    return figure


def title(report: RunReport) -> str:
    """The picture's title: the run's id (a file may hold several runs) and its file."""
    source = os.path.basename(report.source) if report.source else ""
    run = f"run {report.run_id}" if report.run_id else ""
    named = f"{run} ({source})" if run and source else run or source or "run"
    shown = f", {report.selection}" if report.selection else ""
    return f"rlmetrics report: {named}{shown}"


def _integer_steps(axes: Any, steps: Sequence[int]) -> None:
    """Steps are whole numbers: ticks only on them, the axis from the first logged step to
    the last (no slot for a step the run never logged, such as 0)."""
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    if steps:
        axes.set_xlim(min(steps) - 0.6, max(steps) + 0.6)


#: Headroom above the tallest bar, as a share of it: no bar touches the frame.
HEADROOM = 0.08


def _goodput(axes: Any, report: RunReport) -> None:
    steps = [s for s in report.steps if s.get("goodput_pct") is not None]
    axes.set_title("Where each step's wall time went (driver wall clock, step window)")
    x = [s["step"] for s in steps]
    bottom = [0.0] * len(steps)
    productive = [s["productive_s"] for s in steps]
    axes.bar(x, productive, color="#4c9f70", label="productive")
    bottom = productive[:]
    categories = sorted({c for s in steps for c in s["idle_s"]})
    colors = ["#e07b39", "#d64550", "#8d6cab", "#e8c547", "#5b8db8"]
    for index, category in enumerate(categories):
        values = [s["idle_s"].get(category, 0.0) for s in steps]
        axes.bar(x, values, bottom=bottom, color=colors[index % len(colors)], label=category)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axes.set_ylim(0, max(bottom, default=0.0) * (1 + HEADROOM) or 1.0)
    _integer_steps(axes, x)
    axes.set_xlabel("step")
    axes.set_ylabel("seconds")
    share = axes.twinx()
    share.plot(x, [s["goodput_pct"] for s in steps], color="black", marker=".", label="goodput %")
    share.set_ylim(0, 105)
    share.set_ylabel("goodput %")
    handles, labels = axes.get_legend_handles_labels()
    more, more_labels = share.get_legend_handles_labels()
    axes.legend(
        handles + more,
        labels + more_labels,
        loc="upper left",
        bbox_to_anchor=(1.05, 1.0),
        fontsize=8,
        frameon=False,
    )


def _trend(axes: Any, report: RunReport, key: str, label: str) -> None:
    points = [(s["step"], s[key]) for s in report.steps if s.get(key) is not None]
    _draw_line(axes, f"{label} over steps", points)


def _line(axes: Any, report: RunReport, key: str) -> None:
    _draw_line(axes, key, (report.series or {}).get(key, []))


def _draw_line(axes: Any, title: str, points: Sequence[tuple[int, float]]) -> None:
    axes.set_title(title)
    axes.plot([p[0] for p in points], [p[1] for p in points], color="#3b6ea8", marker=".")
    _integer_steps(axes, [p[0] for p in points])
    axes.set_xlabel("step")
    axes.grid(alpha=0.3)


def _checkpoints(axes: Any, report: RunReport) -> None:
    axes.set_title("Rollout checkpoints: latency by phase, in the order they happened")
    checkpoints = report.checkpoints
    if checkpoints is None:  # panels() draws this panel only for a run that has them
        return
    timeline: list[tuple[float, str, dict[str, float]]] = []
    for kind, key in (("save", "saves"), ("restore", "restores")):
        for event in checkpoints[key]:
            if event["wall_time_s"] is not None:
                timeline.append((event["wall_time_s"], kind, event["phases_s"]))
    for attempt in checkpoints["attempt_log"]:
        if attempt["outcome"] != "completed":
            label = f"{attempt['outcome']}: {attempt['reason'] or 'no reason'}"
            timeline.append((attempt["wall_time_s"], label, {}))
    timeline.sort(key=lambda item: item[0])
    counts: dict[str, int] = {}
    labels = []
    for _, kind, _phases in timeline:
        counts[kind] = counts.get(kind, 0) + 1
        labels.append(f"{kind} {counts[kind]}" if kind in ("save", "restore") else kind)
    phases = sorted({p for _, _, phases_s in timeline for p in phases_s})
    palette = plt_colors(len(phases))
    left = [0.0] * len(timeline)
    for index, phase in enumerate(phases):
        values = [phases_s.get(phase, 0.0) for _, _, phases_s in timeline]
        axes.barh(labels, values, left=left, color=palette[index], label=phase)
        left = [a + b for a, b in zip(left, values, strict=True)]
    for row, (_, kind, phases_s) in enumerate(timeline):
        if not phases_s:
            axes.text(0.05, row, f"  {kind}", va="center", color="#d64550", fontweight="bold")
    axes.invert_yaxis()
    axes.set_xlabel("seconds")
    axes.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7, frameon=False)


#: Colours for categories a legend must tell apart: matplotlib's tab10, then eight more
#: chosen far from it and from each other (tab20's neighbours are a light and a dark shade of
#: one hue). Any two are at least 0.24 apart in RGB (0-1 per channel).
DISTINCT_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#1b1464",
    "#7cfc00",
    "#000000",
    "#ffd700",
    "#008080",
    "#800000",
    "#ff00ff",
    "#a0a0ff",
)


def plt_colors(count: int) -> list[str]:
    """``count`` colours from :data:`DISTINCT_COLORS` (repeating past 18)."""
    return [DISTINCT_COLORS[i % len(DISTINCT_COLORS)] for i in range(count)]
