"""Print the Grafana dashboard generated from the declared series of every installed plugin:
rows for training, goodput and idle time, setup, rollout checkpointing, and each installed
family's own (vLLM, gen_ai, host memory, Gym). docs/grafana/rlmetrics.json is its output, with
every distribution of this repository installed."""

from __future__ import annotations

import argparse
import sys

from ..dashboard.grafana import build_dashboard, collect_rows, dashboard_json

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "dashboard"
HELP = "print the Grafana dashboard JSON (docs/grafana/rlmetrics.json is its output)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--title", default="rlmetrics", help="the dashboard's title")


def run(args: argparse.Namespace) -> int:
    rows, problems = collect_rows()
    for problem in problems:
        sys.stderr.write(f"rlmetrics dashboard: row {problem.builder} failed: {problem.reason}\n")
    sys.stdout.write(dashboard_json(build_dashboard(rows, title=args.title)))
    return 1 if problems else 0
