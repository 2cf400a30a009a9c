"""Run a simulated async GRPO run through the real Logger and telemetry, on embedded defaults:
reward, KL and loss curves; setup phases at step 0; efficiency summaries with every
measurement kind and window; rollout-checkpoint events with one failed save; and whatever the
installed family distributions add (vLLM engine deltas with a mid-run engine restart, gen_ai
token usage, host memory, Gym rollouts).

Writes OUTPUT/metrics.jsonl and the run's spans to OUTPUT/traces.jsonl (the phases of each
step, timed with rlmetrics.phase on the simulated clock), serves the Prometheus endpoint on
127.0.0.1 while it runs (and after, with --serve), and ends with the report of its own JSONL,
goodput from its spans beside goodput from its metrics (and OUTPUT/report.png and
OUTPUT/timeline.png when matplotlib is installed). Deterministic for a seed: every logged value
is the same from run to run."""

from __future__ import annotations

import argparse
import math
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from ..configuration import ConfigurationError
from ..demo.run import (
    DEFAULT_OUTPUT,
    PLOT_NAME,
    TIMELINE_NAME,
    DemoOptions,
    DemoResult,
    OutputRefused,
    run_demo,
)
from ..report.text import render
from ..telemetry import TelemetryError
from ._output import add_format_options, positive_count, print_json

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "demo"
HELP = "run a simulated GRPO run end to end: JSONL, Prometheus endpoint, report"


def port_number(text: str) -> int:
    """A TCP port (0 picks a free one), or argparse's one-line error naming the flag."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(
            f"expected a port number (0-65535; 0 picks a free one), got {text!r}"
        )
    return port


#: The longest pause between steps ``--interval`` takes (time.sleep overflows past ~1e9 s).
MAX_INTERVAL_S = 3600.0


def interval_seconds(text: str) -> float:
    """A pause between steps: finite, 0 to :data:`MAX_INTERVAL_S` seconds."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not 0.0 <= seconds <= MAX_INTERVAL_S:  # False for NaN too
        raise argparse.ArgumentTypeError(
            f"expected seconds from 0 to {MAX_INTERVAL_S:g}, got {text!r}"
        )
    return seconds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--steps", type=positive_count, default=40, help="steps to run (default 40)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulation (default 0)")
    parser.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help=f"folder for metrics.jsonl and report.png (default ./{DEFAULT_OUTPUT})",
    )
    parser.add_argument(
        "--interval",
        type=interval_seconds,
        default=0.1,
        metavar="SECONDS",
        help="real time between steps, so a scraper sees the run move (default 0.1)",
    )
    parser.add_argument(
        "--prometheus-port",
        type=port_number,
        metavar="PORT",
        help="port of the Prometheus endpoint on 127.0.0.1 (default OTEL_EXPORTER_PROMETHEUS_PORT, "
        "else 9464; 0 picks a free one, and so does a port another process holds)",
    )
    parser.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="also export over OTLP to this collector (host:port or http://host:port): gRPC, "
        "or HTTP with OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf (then the base URL, e.g. a "
        "Phoenix or MLflow server's)",
    )
    parser.add_argument("--run-id", help="the run id resource attribute (default: generated)")
    parser.add_argument(
        "--serve",
        action="store_true",
        help="keep the Prometheus endpoint up after the run until interrupted (Ctrl-C)",
    )
    parser.add_argument(
        "--no-plot",
        action="store_true",
        help=f"do not write OUTPUT/{PLOT_NAME} and OUTPUT/{TIMELINE_NAME}",
    )
    add_format_options(parser)


def run(args: argparse.Namespace) -> int:
    options = DemoOptions(
        steps=args.steps,
        seed=args.seed,
        output=args.output,
        interval_s=max(0.0, args.interval),
        prometheus_port=args.prometheus_port,
        otlp_endpoint=args.otlp_endpoint,
        serve=args.serve,
        run_id=args.run_id,
    )
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda _n, _f: _stop(stop))
    # With --json stdout carries the JSON document only; the rest goes to stderr.
    say = sys.stderr if args.json else sys.stdout

    def show(result: DemoResult) -> None:
        plot = None if args.no_plot else _plot(result)
        timeline = None if args.no_plot or plot is None else _timeline(result)
        if args.json:
            print_json({**result.as_dict(), "plot": plot, "timeline": timeline}, "rlmetrics demo")
        else:
            say.write("\n" + render(result.report))
            if result.goodput is not None:
                from ..report.traces import render as render_traces

                say.write(render_traces(result.goodput))
            if timeline:
                say.write(f"\nTimeline: {timeline}\n")
            if plot:
                say.write(f"\nPicture: {plot}\n")
        sys.stdout.flush()

    try:
        run_demo(options, say=say, progress=sys.stderr, stop=stop, on_result=show)
    except OutputRefused as exc:
        sys.stderr.write(f"rlmetrics demo: --output {exc}\n")
        return 2
    except ConfigurationError as exc:
        # A setting the demo's telemetry refuses (an OTEL_* variable, say): the user's to change.
        sys.stderr.write(f"rlmetrics demo: {exc}\n")
        return 2
    except TelemetryError as exc:
        sys.stderr.write(f"rlmetrics demo: {exc}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("rlmetrics demo: interrupted\n")
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


def _stop(stop: threading.Event, _frame: FrameType | None = None) -> None:
    # SIGTERM ends the demo as Ctrl-C does: cleanly, telemetry shut down, parts closed.
    stop.set()
    raise KeyboardInterrupt


def _plot(result: DemoResult) -> str | None:
    from ..report.plot import MissingExtra, plot_report

    path = result.jsonl.parent / PLOT_NAME
    try:
        plot_report(result.report, path)
    except MissingExtra as exc:
        sys.stderr.write(f"rlmetrics demo: no picture: {exc}\n")
        return None
    return str(path)


def _timeline(result: DemoResult) -> str | None:
    if result.traces is None:
        return None
    from ..report.plot import NothingToPlot
    from ..report.timeline import plot_timeline
    from ..report.traces import read_traces

    path = result.jsonl.parent / TIMELINE_NAME
    try:
        plot_timeline(read_traces([result.traces]), path)
    except NothingToPlot as exc:  # (the demo's spans always hold its steps)
        sys.stderr.write(f"rlmetrics demo: no timeline: {exc}\n")
        return None
    return str(path)
