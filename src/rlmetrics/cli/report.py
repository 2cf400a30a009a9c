"""Summarise a run's JSONL: per-step goodput and idle breakdown (driver wall clock against the
step's wall time; run-window values never summed across steps; thread-seconds as saturation;
init/total as overhead), setup cost (total_setup as logged), reward/KL/loss trends, vLLM tokens
and failures, rollout-checkpoint latencies and outcomes. A torn last line is skipped.

A file may hold several runs (every row carries its run id): each is reported on its own, or the
one --run names; steps a run logged more than once (a resumed run that went back to its
checkpoint) are named. The run's hyperparameters and its latest samples (the samples file beside
the JSONL) are shown.

--plot writes one PNG (1600x1000 px): goodput and idle time per step, stacked; reward over
steps; checkpoint latencies by phase. It needs matplotlib: pip install 'rlmetrics[report]'.

--traces FILE (OTLP/JSON lines, the otlp_file exporter's; repeat it for a driver's and its
workers' files) adds goodput per step from the spans beside goodput from the metrics, with the
documented reason for each difference. --timeline FILE.png draws the steps' phases as bands on
a time axis, the driver's and each worker's threads as lanes (--timeline-steps FIRST:LAST).
With several runs in the file, both are about the last one (--run picks another)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..report.runs import RunNotFound, read_reports
from ..report.text import render_runs
from ._output import add_format_options, print_json

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "report"
HELP = (
    "summarise a run's JSONL (goodput, setup, trends, vLLM, checkpoints); --plot a PNG; "
    "--traces goodput from spans too, --timeline its phases"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("jsonl", type=Path, metavar="RUN.jsonl", help="the run's JSONL file")
    parser.add_argument(
        "--run",
        dest="run_id",
        metavar="RUN_ID",
        help="report only this run (a file may hold several; each is reported by default)",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="also write the report's picture (needs the 'report' extra: matplotlib)",
    )
    parser.add_argument(
        "--traces",
        type=Path,
        action="append",
        metavar="TRACES.jsonl",
        help="the run's spans as OTLP/JSON lines (the otlp_file exporter's); repeatable",
    )
    parser.add_argument(
        "--timeline",
        type=Path,
        metavar="FILE.png",
        help="draw the steps' phases, one lane per thread of each process (needs --traces)",
    )
    parser.add_argument(
        "--timeline-steps",
        type=_step_range,
        metavar="FIRST:LAST",
        help="the steps the timeline shows (default: the first 12)",
    )
    add_format_options(parser)


def _step_range(text: str) -> tuple[int, int]:
    first, sep, last = text.partition(":")
    try:
        span = (int(first), int(last if sep else first))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIRST:LAST steps, got {text!r}") from None
    if span[0] > span[1]:
        raise argparse.ArgumentTypeError(f"FIRST must not be after LAST, got {text!r}")
    return span


def run(args: argparse.Namespace) -> int:
    missing = [p for p in (args.jsonl, *(args.traces or ())) if not p.is_file()]
    if missing:
        sys.stderr.write(f"rlmetrics report: {missing[0]}: no such file\n")
        return 2
    if args.timeline is not None and not args.traces:
        sys.stderr.write(
            "rlmetrics report: --timeline draws spans: give their file with --traces\n"
        )
        return 2
    try:
        reports = read_reports(args.jsonl, args.run_id)
    except RunNotFound as exc:
        sys.stderr.write(f"rlmetrics report: {exc}\n")
        return 2
    for report in reports:
        if report.repeated_steps:
            sys.stderr.write(
                f"rlmetrics report: warning: run {report.run_id} logged steps "
                f"{list(report.repeated_steps)[:10]} more than once; the later values are shown\n"
            )
    report = reports[-1]
    traces = comparison = None
    if args.traces:
        from ..report.traces import compare_goodput, read_traces

        traces = read_traces(args.traces)
        comparison = compare_goodput(traces, report.steps, report.goodput)
    from ..report.plot import MissingExtra, plot_report

    try:
        if args.plot is not None:
            plot_report(report, args.plot)
        if args.timeline is not None and traces is not None:
            from ..report.timeline import plot_timeline

            plot_timeline(traces, args.timeline, args.timeline_steps)
    except MissingExtra as exc:
        sys.stderr.write(f"rlmetrics report: {exc}\n")
        return 1
    plot = str(args.plot) if args.plot else None
    extra = {"traces": comparison, "timeline": str(args.timeline) if args.timeline else None}
    if args.json:
        if len(reports) == 1:
            print_json({**report.as_dict(), "plot": plot, **extra})
        else:
            print_json({"runs": [r.as_dict() for r in reports], "plot": plot, **extra})
    else:
        sys.stdout.write(render_runs(reports))
        shown = f" (run {report.run_id}, the last; --run picks another)" * (len(reports) > 1)
        if comparison is not None:
            from ..report.traces import render as render_traces

            sys.stdout.write(render_traces(comparison))
        if args.plot is not None:
            sys.stdout.write(f"\nPicture: {args.plot}{shown}\n")
        if args.timeline is not None:
            sys.stdout.write(f"\nTimeline: {args.timeline}{shown}\n")
    return 0
