"""``rlmetrics report --plot``: one PNG with goodput and idle time per step (stacked), reward
over steps and rollout-checkpoint latencies. Needs matplotlib: ``pip install
'rlmetrics[report]'``."""

from __future__ import annotations

import os
from typing import Any

from .summary import RunReport

__all__ = ["INSTALL_HINT", "PLOT_DPI", "PLOT_SIZE_PX", "MissingExtra", "plot_report"]

INSTALL_HINT = "pip install 'rlmetrics[report]'"
#: The PNG's size in pixels (width, height).
PLOT_SIZE_PX = (1600, 1000)
PLOT_DPI = 100


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


def plot_report(report: RunReport, path: str | os.PathLike[str]) -> None:
    """Write the report's picture to ``path`` (PNG, :data:`PLOT_SIZE_PX`)."""
    plt = _pyplot()
    width, height = PLOT_SIZE_PX
    figure = plt.figure(figsize=(width / PLOT_DPI, height / PLOT_DPI), dpi=PLOT_DPI)
    grid = figure.add_gridspec(2, 2, height_ratios=(1.15, 1), width_ratios=(1, 1.25))
    try:
        _goodput(figure.add_subplot(grid[0, :]), report)
        _reward(figure.add_subplot(grid[1, 0]), report)
        _checkpoints(figure.add_subplot(grid[1, 1]), report)
        title = os.path.basename(report.source) if report.source else "run"
        figure.suptitle(f"rlmetrics report: {title}", fontsize=13)
        figure.tight_layout()
        figure.savefig(path, dpi=PLOT_DPI, format="png")
    finally:
        plt.close(figure)


def _goodput(axes: Any, report: RunReport) -> None:
    steps = [s for s in report.steps if s.get("goodput_pct") is not None]
    axes.set_title("Where each step's wall time went (driver wall clock, step window)")
    if not steps:
        axes.text(0.5, 0.5, "no efficiency/* keys", ha="center", transform=axes.transAxes)
        return
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


def _reward(axes: Any, report: RunReport) -> None:
    axes.set_title("Reward over steps")
    points = [(s["step"], s["reward"]) for s in report.steps if s.get("reward") is not None]
    if not points:
        axes.text(0.5, 0.5, "no reward logged", ha="center", transform=axes.transAxes)
        return
    axes.plot([p[0] for p in points], [p[1] for p in points], color="#3b6ea8", marker=".")
    axes.set_xlabel("step")
    axes.set_ylabel("mean reward")
    axes.grid(alpha=0.3)


def _checkpoints(axes: Any, report: RunReport) -> None:
    axes.set_title("Rollout checkpoints: latency by phase, in the order they happened")
    checkpoints = report.checkpoints
    if checkpoints is None:
        axes.text(0.5, 0.5, "no rollout checkpoints", ha="center", transform=axes.transAxes)
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


def plt_colors(count: int) -> list[Any]:
    """``count`` distinct colours from matplotlib's tab20."""
    from matplotlib import colormaps

    cmap = colormaps["tab20"]
    return [cmap(i % 20) for i in range(count)]
