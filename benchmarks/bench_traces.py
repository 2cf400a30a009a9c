"""Phases and traced steps at the cost of the same spans and points made by hand.

    python benchmarks/bench_traces.py [--processes 5] [--rounds 31] [--quick] [--update-readme]

Run it in each SDK's bench env (``tox exec -e bench-otel144 -- python
benchmarks/bench_traces.py``, likewise 1451 and 1452), under ``flock /work/locks/bench.lock``;
``--update-readme`` rewrites this SDK's table in benchmarks/README.md. Each case runs against
a baseline measured in the same process, in alternating rounds, the rounds of
``--processes`` fresh processes pooled (``_harness.py``):

- a phase while tracing, against ``tracer.start_as_current_span`` + end with the same
  attributes on the same provider and span processor (a ``SimpleSpanProcessor`` around an
  exporter that keeps nothing, so no queue or thread differs between the sides);
- a phase with telemetry off: its absolute cost (the goal is in microseconds), beside the
  floor of any timed ``with`` block, a class whose ``__enter__``/``__exit__`` read the clock;
- one traced 60-key GRPO step — the step span, five phases, the loop's dict through
  ``Logger.log_metrics`` and the step's efficiency summary, then one collection — against
  the same spans by hand with the raw SDK, the phases' seconds added up by hand and the same
  16 series written by raw ``Gauge.set`` into a provider of their own, then one collection;
  with two reference rows that split it: the step without the collection, and the step and
  collection with the core's liveness and pipeline families off (their observables are read
  at every collection, whatever the step did).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import attrs
from _harness import Comparison, compare, fresh_runs, machine, pool, update_readme
from grpo_step import GRPO_STEP, TRAINING_SERIES
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import rlmetrics
from rlmetrics.testing import isolated_state

#: The median ratio each case is held to (``µs`` rows: the median microseconds per call).
GOALS: dict[str, tuple[float, str]] = {
    "phase, tracing on (span-only name)": (1.2, "x"),
    "phase, tracing on (efficiency category)": (1.2, "x"),
    "phase, telemetry off (efficiency category)": (1.0, "µs"),
    "phase, telemetry off (span-only name)": (1.0, "µs"),
    "one traced 60-key step + one collection": (1.3, "x"),
}
#: Rows that explain the last one (no goal of their own).
NO_COLLECTION = "the same step, no collection (reference)"
WITHOUT_HEALTH = "the same step + collection, liveness and pipeline families off (reference)"
#: The phases of the traced step, in order: (name, bucket).
PHASES = (
    ("idle/buffer_starvation", None),
    ("generation", "productive"),
    ("idle/refit_bubble", None),
    ("policy_training", "productive"),
    ("logging", "overhead"),
)
_BUCKETS = {"idle/buffer_starvation": "idle", "idle/refit_bubble": "idle"}
_STEP_CATEGORIES = ("idle/buffer_starvation", "idle/refit_bubble", "idle/validation")
#: The loop's dict without the efficiency keys: the step's summary brings those.
LOGGED = {k: v for k, v in GRPO_STEP.items() if not k.startswith("efficiency/")}


class _Discard(SpanExporter):
    """Takes every span and keeps none: the export is not what is measured."""

    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class _TwoReads:
    """The floor of a timed ``with`` block: a class reading the clock on the way in and out."""

    __slots__ = ("t0",)

    def __enter__(self) -> _TwoReads:
        self.t0 = time.perf_counter_ns()
        return self

    def __exit__(self, *_: Any) -> None:
        time.perf_counter_ns() - self.t0


class RawStep:
    """One step done by hand: the spans with the raw SDK (the same names and attributes), the
    phases' seconds added up by hand, and the 16 series of the step by raw ``Gauge.set``
    (7 training gauges; 8 efficiency categories with their 4 attributes; the pct)."""

    def __init__(self) -> None:
        self.tracers = TracerProvider(shutdown_on_exit=False)
        self.tracers.add_span_processor(SimpleSpanProcessor(_Discard()))
        self.tracer = self.tracers.get_tracer("raw")
        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader], shutdown_on_exit=False)
        meter = self.meters.get_meter("raw")
        self.gauges = {key: meter.create_gauge(name) for key, name in TRAINING_SERIES.items()}
        self.seconds = meter.create_gauge("rl.efficiency.seconds", unit="s")
        self.pct = meter.create_gauge("rl.efficiency.pct", unit="%")
        measurement = {"idle/refit_event_wait": "collector_wall_clock"}
        self.categories = {
            c: {
                "rl.efficiency.category": c,
                "rl.efficiency.measurement": measurement.get(c, "wall_clock"),
                "rl.efficiency.window": "step" if c in _STEP_CATEGORIES else "run",
                "rl.bucket": "overhead" if c == "init/total" else c.split("/")[0],
            }
            for c in (
                "init/total",
                *_STEP_CATEGORIES,
                "idle/refit_event_wait",
                "idle/generation_limit_pause",
                "idle/buffer_full_backoff",
                "wasted/failed_trajectory",
            )
        }
        self.pct_attributes = {
            "rl.efficiency.measurement": "wall_clock",
            "rl.efficiency.window": "step",
        }
        self.run_seconds = {"init/total": 312.0}

    def step(self, n: int, collect: bool = True) -> None:
        tracer = self.tracer
        seconds: dict[str, float] = {}
        t0 = time.perf_counter_ns()
        with tracer.start_as_current_span("rl.step", attributes={"rl.iteration": n}):
            for name, bucket in PHASES:
                attributes = {
                    "rl.phase": name,
                    "rl.bucket": bucket or _BUCKETS[name],
                    "rl.iteration": n,
                }
                start = time.perf_counter_ns()
                with tracer.start_as_current_span(
                    "rl." + name.replace("/", "."), attributes=attributes
                ):
                    pass
                if name in _BUCKETS:
                    seconds[name] = seconds.get(name, 0.0) + (time.perf_counter_ns() - start) / 1e9
        wall = (time.perf_counter_ns() - t0) / 1e9
        for key, gauge in self.gauges.items():
            gauge.set(LOGGED[key])
        idle = 0.0
        for category, attributes in self.categories.items():
            value = seconds.get(category, self.run_seconds.get(category, 0.0))
            if category in _STEP_CATEGORIES:
                idle += value
            self.seconds.set(value, attributes)
        self.pct.set(100.0 * (1 - idle / wall), self.pct_attributes)
        if collect:
            self.reader.get_metrics_data()


def measure(rounds: int, number: int) -> dict[str, Comparison]:
    results: dict[str, Comparison] = {}
    floor = _TwoReads

    # -- telemetry off: a phase is two clock reads and the accounting -------------------------
    with isolated_state():

        def off_category() -> None:
            with rlmetrics.phase("idle/refit_bubble"):
                pass

        def off_plain() -> None:
            with rlmetrics.phase("generation", bucket="productive"):
                pass

        def bare() -> None:
            with floor():
                pass

        off_category()  # the phase table is read once, on first use
        results["phase, telemetry off (efficiency category)"] = compare(
            off_category, bare, number=number * 20, rounds=rounds
        )
        results["phase, telemetry off (span-only name)"] = compare(
            off_plain, bare, number=number * 20, rounds=rounds
        )

    # -- tracing on: a phase against the raw span with the same attributes --------------------
    with isolated_state():
        reader = InMemoryMetricReader()
        handle = rlmetrics.start(
            readers=[reader], span_processors=[SimpleSpanProcessor(_Discard())]
        )
        try:
            tracer = handle.tracer_provider.get_tracer("raw")  # type: ignore[union-attr]
            step = rlmetrics.step(1, summary=False)
            step.__enter__()  # the phases' parent on both sides

            def on_plain() -> None:
                with rlmetrics.phase("generation", bucket="productive"):
                    pass

            def raw_plain() -> None:
                with tracer.start_as_current_span(
                    "rl.generation",
                    attributes={
                        "rl.phase": "generation",
                        "rl.bucket": "productive",
                        "rl.iteration": 1,
                    },
                ):
                    pass

            def on_category() -> None:
                with rlmetrics.phase("idle/refit_bubble"):
                    pass

            def raw_category() -> None:
                with tracer.start_as_current_span(
                    "rl.idle.refit_bubble",
                    attributes={
                        "rl.phase": "idle/refit_bubble",
                        "rl.bucket": "idle",
                        "rl.iteration": 1,
                    },
                ):
                    pass

            results["phase, tracing on (span-only name)"] = compare(
                on_plain, raw_plain, number=number, rounds=rounds
            )
            results["phase, tracing on (efficiency category)"] = compare(
                on_category, raw_category, number=number, rounds=rounds
            )
            step.__exit__(None, None, None)
            _traced_step(results, reader, number, rounds)
        finally:
            handle.shutdown(timeout_s=5)

    # -- the same with the core's liveness and pipeline families off: what the traced step
    # costs on its own, beside what those families' observables add to every collection --
    with isolated_state():
        reader = InMemoryMetricReader()
        handle = rlmetrics.start(
            readers=[reader],
            span_processors=[SimpleSpanProcessor(_Discard())],
            disable_plugins=["liveness", "pipeline"],
        )
        try:
            timed: dict[str, Comparison] = {}
            _traced_step(timed, reader, number, rounds, collection_only=True)
            results[WITHOUT_HEALTH] = timed["one traced 60-key step + one collection"]
        finally:
            handle.shutdown(timeout_s=5)
    return results


def _traced_step(
    results: dict[str, Comparison],
    reader: InMemoryMetricReader,
    number: int,
    rounds: int,
    collection_only: bool = False,
) -> None:
    """One traced 60-key step (+ one collection) against the same by hand."""
    quiet = rlmetrics.Logger(backends={})
    with rlmetrics.phase("init/total"):
        pass
    raw = RawStep()
    counter = iter(range(2, 10**9))

    def ours_step() -> None:
        n = next(counter)
        with rlmetrics.step(n, logger=quiet):
            for name, bucket in PHASES:
                with rlmetrics.phase(name, bucket=bucket):
                    pass
            quiet.log_metrics(LOGGED, step=n, prefix="train")

    def ours() -> None:
        ours_step()
        reader.get_metrics_data()

    results["one traced 60-key step + one collection"] = compare(
        ours, lambda: raw.step(next(counter)), number=max(1, number // 10), rounds=rounds
    )
    if not collection_only:
        results[NO_COLLECTION] = compare(
            ours_step,
            lambda: raw.step(next(counter), collect=False),
            number=max(1, number // 10),
            rounds=rounds,
        )


def table(results: dict[str, Comparison]) -> str:
    lines = [
        f"#### {machine()}",
        "",
        "| case | ratio min | median | max | goal | case | baseline |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        low, mid, high = result.spread
        goal, unit = GOALS.get(name, (None, "x"))
        if goal is None:
            judged = "(reference)"
        elif unit == "µs":
            judged = f"≤{goal} µs " + ("met" if result.case_s * 1e6 <= goal else "**missed**")
        else:
            judged = f"≤{goal} " + ("met" if mid <= goal else "**missed**")
        lines.append(
            f"| {name} | {low:.2f} | **{mid:.2f}** | {high:.2f} | {judged} "
            f"| {result.case_s * 1e6:.2f} µs | {result.base_s * 1e6:.2f} µs |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5, help="fresh processes pooled")
    parser.add_argument("--rounds", type=int, default=31, help="rounds per case per process")
    parser.add_argument("--number", type=int, default=200, help="calls per side per round")
    parser.add_argument("--quick", action="store_true", help="1 process, 5 rounds (a smoke run)")
    parser.add_argument("--update-readme", action="store_true", help="rewrite this SDK's table")
    parser.add_argument("--as-json", action="store_true", help=argparse.SUPPRESS)  # a child run
    args = parser.parse_args()
    os.environ["RLMETRICS_PLUGINS"] = ""  # the core's built-ins only
    processes, rounds, number = (
        (1, 5, 50) if args.quick else (args.processes, args.rounds, args.number)
    )
    if args.as_json:
        results = measure(rounds, number)
        sys.stdout.write(json.dumps({k: attrs.asdict(v) for k, v in results.items()}))
        return
    print(machine(), end="\n\n")
    runs = fresh_runs(
        __file__, processes, ["--as-json", "--rounds", str(rounds), "--number", str(number)]
    )
    results = pool(runs)
    text = table(results)
    print(text)
    if args.update_readme:
        from importlib.metadata import version

        update_readme(f"bench_traces-{version('opentelemetry-sdk')}", text)


if __name__ == "__main__":
    main()
