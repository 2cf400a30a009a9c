"""Summarise a run's JSONL: per-step goodput and idle breakdown (driver wall clock against the
step's wall time; run-window values never summed across steps; thread-seconds as saturation;
init/total as overhead), setup cost (total_setup as logged), reward/KL/loss trends, vLLM tokens
and failures, rollout-checkpoint latencies and outcomes. A torn last line is skipped.

A file may hold several runs (every row carries its run id): each is reported on its own, or the
one --run names; steps a run logged more than once (a resumed run that went back to its
checkpoint) are named, each shown as its last attempt logged it. A run is read through the
key map its trainer applied (--key-map NAME; a transformers/TRL run's is found from its
hyperparameters), so TRL's kl is the report's KL. The run's hyperparameters and its latest
samples (the samples file beside the JSONL) are shown.

--steps A:B (or --tail N) reports those steps only; a long run's per-step table shows its
first and last steps and their mean (--table-rows N, --json for every step).

--plot writes one picture (1600x1000 px) in the format its suffix names (.png, .svg, .pdf,
.jpg...), a panel for each thing the run logged: goodput and idle time per step, stacked;
reward, KL and loss over steps (or the keys --keys names, a panel each); checkpoint latencies
by phase. It needs matplotlib: pip install 'rlmetrics[report]'.

--traces FILE (OTLP/JSON lines, the otlp_file exporter's; repeat it for a driver's and its
workers' files) adds goodput per step from the spans beside goodput from the metrics, with the
documented reason for each difference. --timeline FILE.png draws the steps' phases as bands on
a time axis, the driver's and each worker's threads as lanes (--timeline-steps FIRST:LAST).
With several runs in the file, both are about the last one (--run picks another).

--html FILE.html writes the run as one self-contained page (no network: inline CSS, script and
SVG): its curves, goodput per step, the timeline (with --traces) and a table of its
trajectories, filtered by outcome, env and reward, each row opening into its turns, tool calls
and kept text (from the --traces spans). No extra is needed."""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from ..backends.jsonl import SkippedLines
from ..report.runs import DamagedRows, RunNotFound, read_reports
from ..report.select import StepSelection, UnknownKeys
from ..report.text import TABLE_ROWS, render_runs, steps_named
from ._output import add_format_options, input_problem, positive_count, print_json

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "report"
HELP = (
    "summarise a run's JSONL (goodput, setup, trends, vLLM, checkpoints); --plot a picture; "
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
        "--key-map",
        metavar="NAME",
        help="read the run through this key map (Logger(key_map=NAME)); a transformers/TRL "
        "run is read through 'trl' without it",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--steps",
        type=_selection,
        metavar="A:B",
        help="report steps A to B only (A: and :B leave one end open); regressions are still "
        "judged on every step",
    )
    which.add_argument(
        "--tail",
        type=_tail,
        metavar="N",
        help="report the last N steps only",
    )
    parser.add_argument(
        "--keys",
        type=_keys,
        metavar="KEY,KEY",
        help="plot these logged keys, a panel each (a train key as logged, others as "
        "prefix/key: reward,loss,validation/accuracy)",
    )
    parser.add_argument(
        "--table-rows",
        type=positive_count,
        default=TABLE_ROWS,
        metavar="N",
        help=f"steps the per-step table shows in full (default {TABLE_ROWS}); a longer run "
        "shows its first and last steps and their mean",
    )
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="also write the report's picture, in the format its suffix names (.png, .svg, "
        ".pdf...; needs the 'report' extra: matplotlib)",
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
        "--perfetto",
        type=Path,
        metavar="FILE.json",
        help="write every process's spans (each --traces file) on one timeline in Chrome's "
        "Trace Event Format, for Perfetto or chrome://tracing (needs --traces)",
    )
    parser.add_argument(
        "--html",
        type=Path,
        metavar="FILE.html",
        help="write the run as one self-contained HTML page (no network): curves, goodput, "
        "timeline (with --traces) and its trajectories, filterable, each opening into its turns",
    )
    parser.add_argument(
        "--timeline-steps",
        type=_step_range,
        metavar="FIRST:LAST",
        help="the steps the timeline shows (default: the first 12 of the steps shown)",
    )
    add_format_options(parser)


def _selection(text: str) -> StepSelection:
    try:
        return StepSelection.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _tail(text: str) -> StepSelection:
    return StepSelection(tail=positive_count(text))


def _keys(text: str) -> tuple[str, ...]:
    keys = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    if not keys:
        raise argparse.ArgumentTypeError("expected one or more keys, comma-separated")
    return keys


def _step_range(text: str) -> tuple[int, int]:
    first, sep, last = text.partition(":")
    try:
        span = (int(first), int(last if sep else first))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIRST:LAST steps, got {text!r}") from None
    if span[0] > span[1]:
        raise argparse.ArgumentTypeError(f"FIRST must not be after LAST, got {text!r}")
    return span


def _usage_problem(args: argparse.Namespace) -> str | None:
    """The first mistake in what was asked, before anything is read."""
    for path in (args.jsonl, *(args.traces or ())):
        problem = input_problem(path)
        if problem is not None:
            return problem
    if args.timeline is not None and not args.traces:
        return "--timeline draws spans: give their file with --traces"
    if args.perfetto is not None and not args.traces:
        return "--perfetto writes spans: give each process's file with --traces"
    if args.keys is not None and args.plot is None:
        return "--keys chooses what --plot draws: give the picture's file with --plot"
    # One check of every file the report writes, so a mistake reads the same for each.
    from ..report.destinations import file_problem
    from ..report.plot import destination_problem

    written = (
        ("--html", args.html, file_problem),
        ("--perfetto", args.perfetto, file_problem),
        ("--plot", args.plot, destination_problem),  # also the suffix naming the format
        ("--timeline", args.timeline, destination_problem),
    )
    for option, path, check in written:
        if path is not None and (problem := check(path)) is not None:
            return f"{option} {problem}"
    return None


def run(args: argparse.Namespace) -> int:
    from ..report.plot import MissingExtra, NothingToPlot, plot_report

    try:
        problem = _usage_problem(args)
    except MissingExtra as exc:
        sys.stderr.write(f"rlmetrics report: {exc}\n")
        return 1
    if problem is not None:
        sys.stderr.write(f"rlmetrics report: {problem}\n")
        return 2
    skipped, damaged = SkippedLines(), DamagedRows()
    selection = args.steps or args.tail
    thin = None
    if args.html is not None:
        from ..report.html import CURVE_POINTS, _thinned

        # The page draws a curve in at most CURVE_POINTS points: thinned (the page's own rule,
        # so the page is the same) as the report is made, a long run's every point of every
        # series is never held at once.
        thin = functools.partial(_thinned, most=CURVE_POINTS)
    try:
        reports = read_reports(
            args.jsonl,
            args.run_id,
            skipped,
            steps=selection,
            keys=args.keys,
            key_map=args.key_map,
            damaged=damaged,
            curves=args.html is not None,
            thin_curves=thin,
        )
    # ValueError: an unknown key map, or NotARunFile (a traces, samples or CSV file given).
    except (RunNotFound, UnknownKeys, ValueError) as exc:
        sys.stderr.write(f"rlmetrics report: {exc.args[0]}\n")
        return 2
    for counted in (skipped, damaged):
        if counted.count:
            sys.stderr.write(counted.summary(args.jsonl) + "\n")
    for report in reports:
        if report.repeated_steps:
            sys.stderr.write(
                f"rlmetrics report: warning: run {report.run_id} logged steps "
                f"{steps_named(report.repeated_steps)} again after going back (a resumed run); "
                "each is shown as the last attempt logged it\n"
            )
    report = reports[-1]
    traces = comparison = None
    if args.traces:
        from ..report.traces import compare_goodput, read_traces

        # Several runs may append to one traces file: the report, its pictures and its page
        # are about one run, so another's spans are left out, and said.
        traces, others = read_traces(args.traces).of_run(report.run_id)
        if others:
            sys.stderr.write(
                f"rlmetrics report: {others} spans of other runs in the traces left out (the "
                f"report is about run {report.run_id})\n"
            )
        comparison = compare_goodput(traces, report.steps, report.goodput, others)
        if args.perfetto is not None:
            from ..report.perfetto import write_perfetto

            try:
                written = write_perfetto(traces, args.perfetto)
            except OSError as exc:
                sys.stderr.write(f"rlmetrics report: cannot write {args.perfetto}: {exc}\n")
                return 1
            sys.stderr.write(f"{written} spans written to {args.perfetto} (open it in Perfetto)\n")
    if args.html is not None:
        from ..report.html import write_html

        try:
            count = write_html(report, args.jsonl, args.html, traces, args.timeline_steps)
        except OSError as exc:
            sys.stderr.write(f"rlmetrics report: cannot write {args.html}: {exc}\n")
            return 1
        sys.stderr.write(f"{args.html} written ({count} trajectories)\n")
    try:
        if args.plot is not None:
            plot_report(report, args.plot)
        if args.timeline is not None and traces is not None:
            from ..report.timeline import plot_timeline

            plot_timeline(traces, args.timeline, args.timeline_steps, report.chosen_steps)
    except MissingExtra as exc:
        sys.stderr.write(f"rlmetrics report: {exc}\n")
        return 1
    except NothingToPlot as exc:
        sys.stderr.write(f"rlmetrics report: no picture written: {exc}\n")
        return 1
    except OSError as exc:  # the folder went away, a full disk: one line, not a traceback
        sys.stderr.write(f"rlmetrics report: cannot write the picture: {exc}\n")
        return 1
    plot = str(args.plot) if args.plot else None
    extra = {
        "traces": comparison,
        "timeline": str(args.timeline) if args.timeline else None,
        "html": str(args.html) if args.html else None,
    }
    if args.json:
        if len(reports) == 1:
            print_json({**report.as_dict(), "plot": plot, **extra}, "rlmetrics report")
        else:
            print_json(
                {"runs": [r.as_dict() for r in reports], "plot": plot, **extra}, "rlmetrics report"
            )
    else:
        sys.stdout.write(render_runs(reports, args.table_rows))
        shown = f" (run {report.run_id}, the last; --run picks another)" * (len(reports) > 1)
        if comparison is not None:
            from ..report.traces import render as render_traces

            sys.stdout.write(render_traces(comparison))
        if args.plot is not None:
            sys.stdout.write(f"\nPicture: {args.plot}{shown}\n")
        if args.timeline is not None:
            sys.stdout.write(f"\nTimeline: {args.timeline}{shown}\n")
        if args.html is not None:
            sys.stdout.write(f"\nPage: {args.html}{shown}\n")
    return 0
