"""rlmetrics query RUN.jsonl [--traces FILE] [--prometheus URL] [--field PATH ...]

A run's state as one JSON answer (schema ``rlmetrics.query/1``, docs/query.schema.json): its
identity and configuration, steps and their pace, stalls, the last value of every logged
number, the slowest phases, regressions, the alerts firing, and ``findings``. ``--field``
prints only the parts named (``steps.last``, ``stalls[0].gap_s``), one JSON value a line.

Exit status: 0 when there is no finding, 1 when there is one (a script's ``if``), 2 for a
usage mistake (a missing file, an unknown run or field).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..runstate import QueryError, run_state, select
from ._output import input_problem, print_json, prometheus_url

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "query"
HELP = "a run's state as JSON for an agent or a script: pace, stalls, values, alerts, findings"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("jsonl", type=Path, help="the run's JSONL file (Logger's jsonl backend)")
    parser.add_argument("--traces", type=Path, help="its OTLP/JSON traces file (otlp_file)")
    parser.add_argument(
        "--prometheus",
        type=prometheus_url,
        metavar="URL",
        help="a Prometheus server whose alerts to read",
    )
    parser.add_argument(
        "--run", dest="run_id", metavar="RUN_ID", help="the run (default: the file's last)"
    )
    parser.add_argument(
        "--field",
        action="append",
        default=[],
        metavar="PATH",
        help="print only this part of the answer (repeatable): steps.last, stalls[0].gap_s",
    )


def run(args: argparse.Namespace) -> int:
    problem = input_problem(args.jsonl)
    if problem is None and args.traces is not None:
        problem = input_problem(args.traces)
    if problem is not None:
        sys.stderr.write(f"rlmetrics query: {problem}\n")
        return 2
    try:
        answer = run_state(
            args.jsonl, traces=args.traces, prometheus=args.prometheus, run=args.run_id
        )
        picked = [select(answer, path) for path in args.field]
    except QueryError as exc:
        sys.stderr.write(f"rlmetrics query: {exc}\n")
        return 2
    if args.field:
        for value in picked:
            print_json(value, "rlmetrics query", indent=None)
    else:
        print_json(answer, "rlmetrics query")
    return 1 if answer["findings"] else 0
