"""A trajectory's spans and points at the cost of the same written by hand.

    python benchmarks/bench_trajectories.py [--processes 5] [--rounds 31] [--quick]
                                            [--rss 1000000] [--rss-seconds 900]
                                            [--update-readme]

Run it in each SDK's bench env (``tox exec -e bench-otel1452 -- python
benchmarks/bench_trajectories.py``), under ``flock /work/locks/bench.lock``. Time is the
harness's CPU clock (the calling thread's on its newer version; neither side here runs threads
of its own), in alternating rounds against a baseline measured in the same process, the rounds
of ``--processes`` fresh processes pooled (``_harness.py``); the step advances every call, as
a training loop's does.

- one trajectory of 4 turns (a generation and a tool call each) and a reward, text off,
  through ``Logger.log_trajectories`` (no backend: the row is built and bounded, nothing is
  written), against the same 14 spans with the same names, attributes and explicit times by
  hand on the raw SDK (``tracer.start_span`` / ``span.end``, a ``SimpleSpanProcessor``
  around an exporter that keeps nothing on both sides) and the same 11 points by raw
  ``Counter.add`` / ``Histogram.record``, the duration inside the trajectory's span;
- the same trajectory live (``rlmetrics.trajectory``), against the same baseline (reference);
- a trajectory the span budget drops, in a batch of 100 that all are dropped: the cost per
  trajectory of the whole call (its metrics and row included; goal ≤5 µs), and of the span
  side alone — the budget's decision and the counted drop — against a batch traced whole
  minus its spans, and the floor: the three histogram points a dropped trajectory still owes,
  by hand on the raw SDK (reference rows: the absolute µs);
- every timed case collects both providers between rounds, off the clock, as the periodic
  reader does on its own thread (a histogram value recorded outside every span is held and
  recorded into the SDK at collection); two reference rows say what that leaves out: the
  dropped batch never collected (the loop hands held values over at the cap, rounds of two
  caps' worth), and inside an ``rlmetrics.step`` span, where every value is a point with an
  exemplar written to the SDK at once;
- memory: ``--rss`` trajectories (10⁶ by default; ``0`` skips it) through
  ``log_trajectories`` in batches of 1000 under the default span budget (the failures, the
  top and bottom 8 by reward and a tenth of the rest traced), each batch's ids and rewards
  new, the metrics collected every 10 batches as an exporting run's are; the process's RSS
  after a garbage collection once a tenth of them are logged (the warm-up) and at the end.
  Goal: growth within 5 MB. Bounded in time too: past ``--rss-seconds`` it stops and says how
  many it logged. Its own fresh process, after the timed ones.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import sys
import time
from collections.abc import Iterator
from typing import Any

import attrs
from _harness import Comparison, compare, fresh_runs, machine, pool, update_readme
from bench_tee import _collected_between_rounds
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import rlmetrics
from rlmetrics.instruments import HELD_VALUES_MAX
from rlmetrics.testing import isolated_state
from rlmetrics.trajectories import SpanBudget, configure, parse_trajectories, settings

ONE = "one trajectory (4 turns, 4 tool calls, a reward), text off"
LIVE = "the same trajectory, live (reference)"
DROPPED = "a budget-dropped trajectory, whole call (batch of 100)"
DROPPED_NEVER = (
    "the same, never collected (reference: the loop hands held histogram values over at the "
    "cap; rounds of 2 caps)"
)
DROPPED_IN_STEP = (
    "the same inside an rlmetrics.step span (reference: its turn and tool-call values go "
    "straight to the SDK, exemplars on the step span; its duration is held, no exemplar; the "
    "step's own span included)"
)
DROPPED_SPANS = "a budget-dropped trajectory, span side only (reference)"
DROPPED_FLOOR = "its 3 histogram points by hand on the raw SDK (reference: the floor)"
RSS_GOAL_MB = 5.0
RSS_BATCH = 1000
GOALS: dict[str, tuple[float, str]] = {ONE: (1.3, "x"), DROPPED: (5.0, "µs")}

TURNS = 4


def record(n: int) -> dict[str, Any]:
    return {
        "sample_id": f"s{n}",
        "group_id": "g0",
        "env": "math",
        "agent": "solver",
        "outcome": "success",
        "finish_reason": "stop",
        "weight_version": 3,
        "turns": [
            {
                "generations": [
                    {
                        "model": "policy",
                        "input_tokens": 100,
                        "output_tokens": 20,
                        "finish_reason": "tool_calls",
                        "latency_s": 0.5,
                    }
                ],
                "tool_calls": [{"name": "search", "latency_s": 0.25}],
            }
            for _ in range(TURNS)
        ],
        "rewards": [{"value": 1.0, "component": "correct", "latency_s": 0.1}],
    }


class _Discard(SpanExporter):
    """Takes every span and keeps none: the export is not what is measured."""

    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class RawTrajectory:
    """The same spans and points by hand on the raw SDK."""

    def __init__(self) -> None:
        self.tracers = TracerProvider(shutdown_on_exit=False)
        self.tracers.add_span_processor(SimpleSpanProcessor(_Discard()))
        self.tracer = self.tracers.get_tracer("raw")
        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader], shutdown_on_exit=False)
        meter = self.meters.get_meter("raw")
        self.completed = meter.create_counter("rl.trajectory.completed")
        self.turns = meter.create_histogram("rl.trajectory.turns")
        self.tool_calls = meter.create_histogram("rl.trajectory.tool_calls")
        self.tools = meter.create_counter("rl.tool.calls")
        self.tokens = meter.create_counter("rl.trajectory.tokens")
        self.reward_sum = meter.create_up_down_counter("rl.trajectory.reward.summed")
        self.reward_count = meter.create_counter("rl.trajectory.reward.count")
        self.duration = meter.create_histogram("rl.trajectory.duration", unit="s")

    def log(self, step: int) -> None:
        start, end = self.tracer.start_span, trace.set_span_in_context
        t1 = time.time_ns()
        t0 = t1 - TURNS * 750_000_000 - 100_000_000
        parent = otel_context.get_current()
        span = start(
            "invoke_agent solver",
            parent,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "rl.trajectory.outcome": "success",
                "rl.trajectory.turns": TURNS,
                "rl.trajectory.tool_calls": TURNS,
                "gen_ai.agent.name": "solver",
                "rl.iteration": step,
                "rl.sample.id": "s0",
                "rl.group.id": "g0",
                "rl.env": "math",
                "rl.weight_version": 3,
                "rl.trajectory.finish_reason": "stop",
                "rl.reward": 1.0,
            },
            start_time=t0,
        )
        inside = end(span, parent)
        at = t0
        for index in range(TURNS):
            turn = start("rl.turn", inside, attributes={"rl.turn.index": index}, start_time=at)
            in_turn = end(turn, inside)
            g = start(
                "chat policy",
                in_turn,
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "policy",
                    "gen_ai.usage.input_tokens": 100,
                    "gen_ai.usage.output_tokens": 20,
                    "gen_ai.response.finish_reasons": ("tool_calls",),
                },
                start_time=at,
            )
            g.end(end_time=at + 500_000_000)
            c = start(
                "execute_tool search",
                in_turn,
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "search",
                    "rl.tool.outcome": "success",
                },
                start_time=at + 500_000_000,
            )
            c.end(end_time=at + 750_000_000)
            turn.end(end_time=at + 750_000_000)
            at += 750_000_000
        r = start(
            "rl.reward correct",
            inside,
            attributes={"rl.reward.component": "correct", "rl.reward": 1.0},
            start_time=at,
        )
        r.end(end_time=at + 100_000_000)
        span.end(end_time=t1)
        env = {"rl.env": "math"}
        self.completed.add(
            1, {"rl.trajectory.outcome": "success", "rl.trajectory.finish_reason": "stop", **env}
        )
        self.turns.record(TURNS, env)
        self.tool_calls.record(TURNS, env)
        self.tokens.add(400, {"gen_ai.token.type": "input", **env})
        self.tokens.add(80, {"gen_ai.token.type": "output", **env})
        self.tools.add(TURNS, {"gen_ai.tool.name": "search", "rl.tool.outcome": "success"})
        for component in ("correct", "total"):  # the component and the trajectory's total
            self.reward_sum.add(1.0, {"rl.reward.component": component, **env})
            self.reward_count.add(1, {"rl.reward.component": component, **env})
        token = otel_context.attach(inside)
        try:
            self.duration.record((t1 - t0) / 1e9, {"rl.trajectory.outcome": "success", **env})
        finally:
            otel_context.detach(token)


@contextlib.contextmanager
def _session() -> Iterator[tuple[InMemoryMetricReader, rlmetrics.Logger]]:
    """What every measurement here runs in: isolated telemetry on an in-memory reader, spans
    ended into nothing, and a Logger with no backend."""
    with isolated_state():
        reader = InMemoryMetricReader()
        handle = rlmetrics.start(
            readers=[reader], span_processors=[SimpleSpanProcessor(_Discard())]
        )
        try:
            yield reader, rlmetrics.Logger(backends={})
        finally:
            handle.shutdown(timeout_s=5)


def measure(rounds: int, number: int) -> dict[str, Comparison]:
    results: dict[str, Comparison] = {}
    with _session() as (reader, logger):
        raw = RawTrajectory()

        def collect() -> None:
            # Between rounds, off the clock, as the periodic reader's thread collects once an
            # export interval: histogram values held since the last collection go to the SDK
            # there (each round is 100 calls of one trajectory, or 1000 dropped ones: under
            # the hold's cap of 4096 values an attribute set).
            reader.get_metrics_data()
            raw.reader.get_metrics_data()

        steps = iter(range(1, 10**9))
        one = [record(0)]

        def ours() -> None:
            logger.log_trajectories(one, step=next(steps))

        def by_hand() -> None:
            raw.log(next(steps))

        def live() -> None:
            with rlmetrics.trajectory(
                "s0", group="g0", env="math", agent="solver", step=next(steps)
            ) as t:
                for _ in range(TURNS):
                    with t.turn():
                        t.generation(
                            "policy",
                            input_tokens=100,
                            output_tokens=20,
                            finish_reason="tool_calls",
                            latency_s=0.5,
                        )
                        t.tool_call("search", latency_s=0.25)
                t.reward(1.0, component="correct", latency_s=0.1)
                t.finish("success", finish_reason="stop")

        ours(), by_hand(), live()  # first calls: instruments, attribute sets
        results[ONE] = _collected_between_rounds(
            ours, by_hand, collect, number=number, rounds=rounds
        )
        results[LIVE] = _collected_between_rounds(
            live, by_hand, collect, number=number, rounds=rounds
        )

        # -- the budget: a batch of 100 that is all dropped, per trajectory -----------------
        batch = [record(n) for n in range(100)]
        parsed = parse_trajectories(batch, settings().text)
        configure(budget=SpanBudget(top_k=0, bottom_k=0, sample_rate=0.0, trace_all_below=0))
        budget = settings().budget

        def dropped() -> None:
            logger.log_trajectories(batch, step=next(steps))

        def decided() -> None:
            budget.select(parsed)
            rlmetrics.record("rl.trajectory", {"rl.trajectory.spans.dropped": 100})

        def nothing() -> None:
            pass

        dropped()
        whole = _collected_between_rounds(
            dropped, nothing, collect, number=max(1, number // 10), rounds=rounds
        )
        results[DROPPED] = attrs.evolve(whole, case_s=whole.case_s / 100)
        collect()
        # Rounds of two caps' worth of each attribute set's values, so every round pays its
        # hand-overs on the loop's thread (the amortised cost with no collection).
        never = compare(
            dropped,
            nothing,
            number=-(-2 * HELD_VALUES_MAX // 100),
            rounds=max(5, rounds // 3),
        )
        results[DROPPED_NEVER] = attrs.evolve(never, case_s=never.case_s / 100)

        def dropped_in_step() -> None:
            # How a loop calls it inside its step: the step's span is the current context,
            # so every histogram value is a point with an exemplar, written to the SDK at once
            # (as a counter's point in a span is), and nothing is held.
            n = next(steps)
            with rlmetrics.step(n, summary=False):
                logger.log_trajectories(batch, step=n)

        dropped_in_step()
        in_step = _collected_between_rounds(
            dropped_in_step, nothing, collect, number=max(1, number // 10), rounds=rounds
        )
        results[DROPPED_IN_STEP] = attrs.evolve(in_step, case_s=in_step.case_s / 100)
        side = compare(decided, nothing, number=number, rounds=rounds)
        results[DROPPED_SPANS] = attrs.evolve(side, case_s=side.case_s / 100)
        # What a dropped trajectory still owes the SDK, one call per value (a histogram
        # takes no count): turns, tool calls and its duration. (Its counters' values, the
        # reward's sum and count among them, add up over a batch: one call per batch.)
        env = {"rl.env": "math"}
        outcome_set = {"rl.trajectory.outcome": "success", **env}

        def owed() -> None:
            for _ in range(100):
                raw.turns.record(TURNS, env)
                raw.tool_calls.record(TURNS, env)
                raw.duration.record(3.1, outcome_set)

        floor = compare(owed, nothing, number=max(1, number // 10), rounds=rounds)
        results[DROPPED_FLOOR] = attrs.evolve(floor, case_s=floor.case_s / 100)
    return results


_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * _PAGE


def measure_rss(total: int, seconds: float) -> dict[str, Any]:
    """RSS after the warm-up (a tenth of ``total``) and at the end (see the module's
    docstring); stops early past ``seconds``."""
    rng = random.Random(33)
    batch = [record(n) for n in range(RSS_BATCH)]
    warm_up = max(RSS_BATCH, total // 10)
    logged = 0
    rss_warm: int | None = None
    started = time.monotonic()
    with _session() as (reader, logger):
        step = 0
        while logged < total:
            step += 1
            for n, item in enumerate(batch):  # new ids and rewards each batch
                item["sample_id"] = f"s{step}-{n}"
                item["group_id"] = f"g{step}-{n // 8}"
                item["rewards"][0]["value"] = rng.random()
                item["outcome"] = "failure" if rng.random() < 0.01 else "success"
            logger.log_trajectories(batch, step=step)
            logged += len(batch)
            if step % 10 == 0:
                reader.get_metrics_data()
            if rss_warm is None and logged >= warm_up:
                gc.collect()
                rss_warm = rss_bytes()
            if time.monotonic() - started > seconds:
                break
        reader.get_metrics_data()
        gc.collect()
        rss_end = rss_bytes()
    return {
        "trajectories": logged,
        "warm_up": warm_up,
        "rss_warm": rss_warm if rss_warm is not None else rss_end,
        "rss_end": rss_end,
        "seconds": time.monotonic() - started,
    }


def rss_line(result: dict[str, Any]) -> str:
    growth = (result["rss_end"] - result["rss_warm"]) / 2**20
    judged = f"≤{RSS_GOAL_MB} MB " + ("met" if growth <= RSS_GOAL_MB else "**missed**")
    return (
        f"RSS over {result['trajectories']:,} trajectories (batches of {RSS_BATCH}, default "
        f"budget; {result['seconds']:.0f} s): {result['rss_warm'] / 2**20:.1f} MB after "
        f"{result['warm_up']:,}, {result['rss_end'] / 2**20:.1f} MB at the end: growth "
        f"{growth:+.2f} MB, goal {judged}"
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
        if unit == "µs" or name in (DROPPED_NEVER, DROPPED_IN_STEP, DROPPED_SPANS, DROPPED_FLOOR):
            judged = (
                f"≤{goal} µs " + ("met" if result.case_s * 1e6 <= goal else "**missed**")
                if goal is not None
                else "(reference)"
            )
            lines.append(f"| {name} | - | - | - | {judged} | {result.case_s * 1e6:.2f} µs | - |")
            continue
        judged = (
            "(reference)"
            if goal is None
            else f"≤{goal} " + ("met" if mid <= goal else "**missed**")
        )
        lines.append(
            f"| {name} | {low:.2f} | **{mid:.2f}** | {high:.2f} | {judged} "
            f"| {result.case_s * 1e6:.2f} µs | {result.base_s * 1e6:.2f} µs |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5, help="fresh processes pooled")
    parser.add_argument("--rounds", type=int, default=31, help="rounds per case per process")
    parser.add_argument("--number", type=int, default=100, help="calls per side per round")
    parser.add_argument("--quick", action="store_true", help="1 process, 5 rounds (a smoke run)")
    parser.add_argument("--update-readme", action="store_true", help="rewrite this SDK's table")
    parser.add_argument("--rss", type=int, default=10**6, help="trajectories for RSS; 0: skip")
    parser.add_argument("--rss-seconds", type=float, default=900.0, help="time bound for RSS")
    parser.add_argument("--as-json", action="store_true", help=argparse.SUPPRESS)  # a child run
    parser.add_argument("--rss-only", action="store_true", help=argparse.SUPPRESS)  # a child run
    args = parser.parse_args()
    os.environ["RLMETRICS_PLUGINS"] = ""  # the core's built-ins only
    processes, rounds, number = (
        (1, 5, 30) if args.quick else (args.processes, args.rounds, args.number)
    )
    if args.rss_only:
        sys.stdout.write(json.dumps(measure_rss(args.rss, args.rss_seconds)))
        return
    if args.as_json:
        results = measure(rounds, number)
        sys.stdout.write(json.dumps({k: attrs.asdict(v) for k, v in results.items()}))
        return
    print(machine(), end="\n\n")
    runs = fresh_runs(
        __file__, processes, ["--as-json", "--rounds", str(rounds), "--number", str(number)]
    )
    text = table(pool(runs))
    if args.rss:
        (memory,) = fresh_runs(
            __file__,
            1,
            ["--rss-only", "--rss", str(args.rss), "--rss-seconds", str(args.rss_seconds)],
        )
        text += "\n" + rss_line(memory) + "\n"
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    text += f"\nload average (1, 5, 15 min) at the end: {load}\n"
    print(text)
    if args.update_readme:
        from importlib.metadata import version

        update_readme(f"bench_trajectories-{version('opentelemetry-sdk')}", text)


if __name__ == "__main__":
    main()
