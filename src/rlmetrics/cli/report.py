"""Summarise a run's JSONL: per-step goodput and idle breakdown (driver wall clock against the
step's wall time; run-window values never summed across steps; thread-seconds as saturation;
init/total as overhead), setup cost (total_setup as logged), reward/KL/loss trends, vLLM tokens
and failures, rollout-checkpoint latencies and outcomes. A torn last line is skipped.

--plot writes one PNG (1600x1000 px): goodput and idle time per step, stacked; reward over
steps; checkpoint latencies by phase. It needs matplotlib: pip install 'rlmetrics[report]'."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..report.summary import read_report
from ..report.text import render
from ._output import add_format_options, print_json

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "report"
HELP = "summarise a run's JSONL (goodput, setup, trends, vLLM, checkpoints); --plot a PNG"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("jsonl", type=Path, metavar="RUN.jsonl", help="the run's JSONL file")
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
    report = read_report(args.jsonl)
    if args.plot is not None:
        from ..report.plot import MissingExtra, plot_report

        try:
            plot_report(report, args.plot)
        except MissingExtra as exc:
            sys.stderr.write(f"rlmetrics report: {exc}\n")
            return 1
    if args.json:
        print_json({**report.as_dict(), "plot": str(args.plot) if args.plot else None})
    else:
        sys.stdout.write(render(report))
        if args.plot is not None:
            sys.stdout.write(f"\nPicture: {args.plot}\n")
    return 0
