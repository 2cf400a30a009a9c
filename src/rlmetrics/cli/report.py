"""Summarise a run's JSONL: per-step goodput and idle breakdown (driver wall clock against the
step's wall time; run-window values never summed across steps; thread-seconds as saturation;
init/total as overhead), setup cost (total_setup as logged), reward/KL/loss trends, vLLM tokens
and failures, rollout-checkpoint latencies and outcomes. A torn last line is skipped.

A file may hold several runs (every row carries its run id): each is reported on its own, or the
one --run names; steps a run logged more than once (a resumed run that went back to its
checkpoint) are named. The run's hyperparameters and its latest samples (the samples file beside
the JSONL) are shown.

--plot writes one PNG (1600x1000 px): goodput and idle time per step, stacked; reward over
steps; checkpoint latencies by phase. It needs matplotlib: pip install 'rlmetrics[report]'."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..report.runs import RunNotFound, read_reports
from ..report.text import render_runs
from ._output import add_format_options, print_json

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "report"
HELP = "summarise a run's JSONL (goodput, setup, trends, vLLM, checkpoints); --plot a PNG"


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
    add_format_options(parser)


def run(args: argparse.Namespace) -> int:
    if not args.jsonl.is_file():
        sys.stderr.write(f"rlmetrics report: {args.jsonl}: no such file\n")
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
    if args.plot is not None:
        from ..report.plot import MissingExtra, plot_report

        try:
            plot_report(report, args.plot)
        except MissingExtra as exc:
            sys.stderr.write(f"rlmetrics report: {exc}\n")
            return 1
    plot = str(args.plot) if args.plot else None
    if args.json:
        if len(reports) == 1:
            print_json({**report.as_dict(), "plot": plot})
        else:
            print_json({"runs": [r.as_dict() for r in reports], "plot": plot})
    else:
        sys.stdout.write(render_runs(reports))
        if args.plot is not None:
            shown = f" (run {report.run_id}, the last; --run picks another)" * (len(reports) > 1)
            sys.stdout.write(f"\nPicture: {args.plot}{shown}\n")
    return 0
