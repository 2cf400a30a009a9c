"""Print the Grafana dashboard generated from the declared series of every installed plugin:
rows for training, goodput and idle time, setup, rollout checkpointing, and each installed
family's own (vLLM, gen_ai, host memory, Gym). docs/grafana/rlmetrics.json is its output, with
every distribution of this repository installed.

--prometheus URL clips it to one run that Prometheus scraped (--run-id, default the one that
logged a step last): only the panels whose series the run exported, over the time it ran."""

from __future__ import annotations

import argparse
import sys

from ..dashboard.grafana import build_dashboard, collect_rows, dashboard_json
from ._output import prometheus_url
from .alerts import parse_duration

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "dashboard"
HELP = "print the Grafana dashboard JSON (docs/grafana/rlmetrics.json is its output)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--title", default="rlmetrics", help="the dashboard's title")
    parser.add_argument(
        "--prometheus",
        type=prometheus_url,
        metavar="URL",
        help="clip the dashboard to a run this Prometheus scraped (http://127.0.0.1:9090)",
    )
    parser.add_argument(
        "--run-id", help="with --prometheus: the run (default: the one that logged a step last)"
    )
    parser.add_argument(
        "--lookback",
        type=parse_duration,
        metavar="DURATION",
        help="with --prometheus: how far back to look for the run (default 7d)",
    )


#: How far back ``--prometheus`` looks for the run without ``--lookback``.
LOOKBACK_S = 7 * 86400.0


def run(args: argparse.Namespace) -> int:
    if args.prometheus is None:
        # Either would be ignored without a Prometheus to clip against: a dashboard that
        # looks clipped to a run and is not.
        for option, value in (("--run-id", args.run_id), ("--lookback", args.lookback)):
            if value is not None:
                sys.stderr.write(
                    f"rlmetrics dashboard: {option} is about the run a Prometheus scraped: give "
                    "its URL with --prometheus (without it, the whole dashboard is printed)\n"
                )
                return 2
    lookback = LOOKBACK_S if args.lookback is None else args.lookback
    rows, problems = collect_rows()
    for problem in problems:
        sys.stderr.write(f"rlmetrics dashboard: row {problem.builder} failed: {problem.reason}\n")
    if args.prometheus is None:
        sys.stdout.write(dashboard_json(build_dashboard(rows, title=args.title)))
        return 1 if problems else 0
    from ..dashboard.clip import (
        PrometheusAPI,
        PrometheusError,
        clip_dashboard,
        clip_rows,
        exported_names,
        find_run,
    )
    from ..dashboard.promql import Names
    from ..registry import default_registry

    names = Names(item.spec for item in default_registry().declared())
    api = PrometheusAPI(args.prometheus)
    try:
        window = find_run(api, names, args.run_id, lookback)
        present = exported_names(api, window, lookback)
    except PrometheusError as exc:
        sys.stderr.write(f"rlmetrics dashboard: {exc}\n")
        return 1
    clipped = clip_rows(rows, names, present)
    dashboard = clip_dashboard(build_dashboard(clipped.rows, title=args.title), window)
    sys.stdout.write(dashboard_json(dashboard))
    kept = sum(len(row.panels) for row in clipped.rows)
    dropped = (
        f"{len(clipped.dropped)} dropped (their series are absent): "
        + ", ".join(title for _, title in clipped.dropped)
        if clipped.dropped
        else "none dropped"
    )
    sys.stderr.write(f"rlmetrics dashboard: run {window.run_id}: {kept} panels kept, {dropped}\n")
    return 1 if problems else 0
