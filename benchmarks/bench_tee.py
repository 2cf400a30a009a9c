"""The tee at the cost of hand-written OpenTelemetry calls: every case against its baseline.

    python benchmarks/bench_tee.py [--processes 5] [--rounds 31] [--quick] [--update-readme]

Run it in each SDK's bench env (``tox -e bench-otel144,bench-otel1451,bench-otel1452``):
``--update-readme`` rewrites this SDK's table in benchmarks/README.md. Every case logs the
realistic 60-key GRPO step of ``grpo_step.py`` with the core's built-in families on (every
installed plugin too with ``--all-families``) and one in-memory reader; each baseline does by
hand what the case does (the same 18 series, with the same attributes, through raw SDK
calls). Ratios are per round, rounds alternate A B / B A, and the rounds of ``--processes``
fresh processes are pooled (``_harness.py``); read the median, and the spread for how noisy
the machine was.

The step advances on every call, as a training loop's does (``step=1`` on every call would
skip the per-step liveness work every real loop pays: the step number, its time, the median
interval). Time is the calling thread's CPU time; the table states the machine's load at the
start and the end of the run. ``count_record.py`` counts the same cases' instructions, for
comparing versions of the code where timings cannot tell them apart.

The histogram rows collect both providers between rounds, off the clock: rlmetrics holds a
histogram value recorded outside every span and records it into the SDK at collection, on
the collecting thread, as a periodic reader's collection once per export interval would.
Their reference rows say what that moves: a collection with a round's values held against
the same collection with none, and the amortised cost of a loop that is never collected
(the recording thread hands what is held over at the cap). ``--histogram-only`` runs only
these rows, into a table of their own.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import attrs
from _harness import Comparison, Load, compare, fresh_runs, machine, pool, update_readme
from grpo_step import GRPO_STEP, TRAINING_SERIES
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import rlmetrics
from rlmetrics.backends.worker import snapshot
from rlmetrics.instruments import HELD_VALUES_MAX
from rlmetrics.testing import in_memory_telemetry, isolated_state

COLLECTION = "the collection alone vs the raw SDK's collection of the same series"
FOUR_KEYS = "log_metrics, 4 keys, no backend"
#: Cases held to the median CPU microseconds of one call (as well as shown as a ratio).
GOALS_US = {FOUR_KEYS: 10.0}
#: The keys of the small dict: 4 training scalars.
FOUR = {key: GRPO_STEP[key] for key in ("reward", "loss", "kl_penalty", "lr")}

#: The median ratio each case is held to.
GOALS = {
    "log_metrics, no backend": 0.9,
    "log_metrics, JSONL backend": 1.0,
    "one step + one collection": 1.15,
    COLLECTION: 1.3,
    "record() counter": 1.2,
    "record() histogram": 1.2,
    "record() counter, 1 attribute": 1.2,
    "record() counter, 3 attributes": 1.2,
    "record() histogram, 1 attribute": 1.15,
    "record() histogram, 3 attributes": 1.15,
    "Logger + JSONL, telemetry not started": 1.5,
    "import rlmetrics (CPU, fresh process)": 1.2,
}
#: Rows that explain others and have no goal of their own.
REFERENCE = "SDK alone: observable gauges' collection vs sync set + collection"
COLLECTION_FLOOR = "SDK alone: observable gauges' collection vs the raw collection alone"
FLOOR = "Python alone: a bound method and a dict loop around Counter.add, no checks"
SNAPSHOT = "queued backends' snapshot of the step vs log_metrics, JSONL backend"
SNAPSHOT_ARRAYS = "the same, step + 4 NumPy arrays of 256 floats"
#: The histogram rows' references: what is held is handed to the SDK at collection, or by
#: the recording thread at the cap when no collection comes (instruments.HELD_VALUES_MAX).
NEVER_COLLECTED = (
    "record() histogram, 3 attributes, never collected (the loop hands held values over at "
    "the cap; rounds of 2 caps)"
)
HELD_COLLECTION = (
    "a collection with {n} held values (3 attributes) vs the same collection with none"
)

#: The labelled cases' attribute sets: the same dict every call, as a loop passes them.
ONE = {"rl.worker_group": "actor"}
THREE = {"rl.worker_group": "actor", "rl.dataset": "math", "rl.phase": "train"}

_EFFICIENCY = {
    "init/total": ("wall_clock", "run", "overhead"),
    "idle/buffer_starvation": ("wall_clock", "step", "idle"),
    "idle/refit_bubble": ("wall_clock", "step", "idle"),
    "idle/validation": ("wall_clock", "step", "idle"),
    "idle/refit_event_wait": ("collector_wall_clock", "run", "idle"),
    "idle/generation_limit_pause": ("collector_wall_clock", "run", "idle"),
    "idle/buffer_full_backoff": ("thread_seconds", "run", "idle"),
    "wasted/failed_trajectory": ("thread_seconds", "run", "wasted"),
}


def declare_bench_group() -> None:
    """The ``bench`` group the ``record()`` cases write: a counter (key ``counter``) and a
    histogram (key ``histogram``), each taking :data:`THREE`'s attributes."""
    rlmetrics.declare(
        "bench",
        [
            rlmetrics.MetricSpec(
                "bench.counter",
                rlmetrics.Kind.COUNTER,
                key="counter",
                attributes=dict.fromkeys(THREE, rlmetrics.OPEN),
            ),
            rlmetrics.MetricSpec(
                "bench.histogram",
                rlmetrics.Kind.HISTOGRAM,
                unit="s",
                key="histogram",
                buckets=[0.1, 1, 10],
                attributes=dict.fromkeys(THREE, rlmetrics.OPEN),
            ),
        ],
    )


class RawTee:
    """The 18 series of GRPO_STEP written by hand with raw SDK calls: what rlmetrics replaces
    (the 16 the training and efficiency families tee, and the liveness family's step number and
    the time it arrived)."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader], shutdown_on_exit=False)
        meter = self.provider.get_meter("raw")
        self.gauges = {key: meter.create_gauge(name) for key, name in TRAINING_SERIES.items()}
        self.seconds = meter.create_gauge("rl.efficiency.seconds", unit="s")
        self.pct = meter.create_gauge("rl.efficiency.pct", unit="%")
        self.step_number = meter.create_gauge("rl.step.number", unit="{step}")
        self.step_time = meter.create_gauge("rl.step.last_timestamp", unit="s")
        self.category_attributes = {
            category: {
                "rl.efficiency.category": category,
                "rl.efficiency.measurement": measurement,
                "rl.efficiency.window": window,
                "rl.bucket": bucket,
            }
            for category, (measurement, window, bucket) in _EFFICIENCY.items()
        }
        self.pct_attributes = {
            "rl.efficiency.measurement": "wall_clock",
            "rl.efficiency.window": "step",
        }

    def step(self, metrics: dict[str, Any], step: int) -> None:
        for key, gauge in self.gauges.items():
            gauge.set(metrics[key])
        for category, attributes in self.category_attributes.items():
            self.seconds.set(metrics[f"efficiency/{category}_s"], attributes)
        self.pct.set(metrics["efficiency/efficiency_pct"], self.pct_attributes)
        self.step_number.set(step)
        self.step_time.set(time.time())

    def four(self, metrics: dict[str, Any], step: int) -> None:
        """:data:`FOUR`'s keys by hand: their 4 gauges, the step number and its time."""
        for key in metrics:
            self.gauges[key].set(metrics[key])
        self.step_number.set(step)
        self.step_time.set(time.time())

    def collect(self) -> None:
        self.reader.get_metrics_data()


class RawObservable:
    """The same 18 points as :class:`RawTee`, as the SDK's observable gauges reporting ready
    Observations: what rlmetrics' gauges cost the SDK at collection, with no rlmetrics code."""

    def __init__(self, raw: RawTee, metrics: dict[str, Any]) -> None:
        from opentelemetry.metrics import Observation

        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader], shutdown_on_exit=False)
        meter = self.provider.get_meter("raw-observable")
        plain = {key: [Observation(metrics[key])] for key in TRAINING_SERIES}
        for key, name in TRAINING_SERIES.items():
            meter.create_observable_gauge(name, callbacks=[lambda _o, obs=plain[key]: obs])
        seconds = [
            Observation(metrics[f"efficiency/{category}_s"], attributes)
            for category, attributes in raw.category_attributes.items()
        ]
        pct = [Observation(metrics["efficiency/efficiency_pct"], raw.pct_attributes)]
        meter.create_observable_gauge("rl.efficiency.seconds", callbacks=[lambda _o: seconds])
        meter.create_observable_gauge("rl.efficiency.pct", callbacks=[lambda _o: pct])
        step = [Observation(1)]
        arrived = [Observation(time.time())]
        meter.create_observable_gauge("rl.step.number", callbacks=[lambda _o: step])
        meter.create_observable_gauge("rl.step.last_timestamp", callbacks=[lambda _o: arrived])

    def collect(self) -> None:
        self.reader.get_metrics_data()


class _Floor:
    """What any ``record(group, {key: value})`` costs before it checks anything: a method
    bound to the registry (as ``rlmetrics.record`` is) loops over the dict into the
    instrument."""

    def __init__(self, counter: Any) -> None:
        self.counter = counter

    def record(self, _group: str, values: dict[str, Any], _attributes: Any) -> None:
        for _key, value in values.items():
            self.counter.add(value, None)


def _with_arrays(step: dict[str, Any]) -> dict[str, Any] | None:
    """``step`` plus per-sample arrays, as a loop logs rewards and lengths (None without
    NumPy)."""
    try:
        import numpy as np
    except ImportError:
        return None
    rng = np.random.default_rng(0)
    names = ("rewards", "advantages", "prompt_lengths", "response_lengths")
    return {**step, **{f"per_sample/{name}": rng.random(256) for name in names}}


def _write_json_row(handle: io.TextIOBase, metrics: dict[str, Any], step: int) -> None:
    """What a hand-written JSONL logger does per step."""
    row = {"time": time.time(), "step": step, "prefix": "train", "metrics": metrics}
    handle.write(json.dumps(row) + "\n")
    handle.flush()


def _child_cpu(code: str) -> float:
    """CPU seconds (user + system) of a fresh interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _import_rounds(rounds: int) -> Comparison:
    ratios, case_times, base_times = [], [], []
    for index in range(rounds):
        order = ("case", "base") if index % 2 == 0 else ("base", "case")
        code = {"case": "import rlmetrics", "base": "import pluggy, attrs, logging"}
        took = {side: _child_cpu(code[side]) for side in order}
        ratios.append(took["case"] / took["base"])
        case_times.append(took["case"])
        base_times.append(took["base"])
    return Comparison(tuple(ratios), statistics.median(case_times), statistics.median(base_times))


def _collected_between_rounds(
    case: Any, base: Any, collect: Any, *, number: int, rounds: int
) -> Comparison:
    """:func:`compare` with ``collect()`` run before every round, off the clock: a histogram's
    held values are handed to the SDK at each collection, on the collecting thread (a
    periodic reader's, never the loop's), so each round records what one export interval
    would, and the loop's thread pays only the holding. Rounds alternate A B / B A as
    ``compare``'s do."""
    ratios: list[float] = []
    case_times: list[float] = []
    base_times: list[float] = []
    for index in range(rounds):
        collect()
        if index % 2 == 0:
            one = compare(case, base, number=number, rounds=1)
            ratio, case_s, base_s = one.ratios[0], one.case_s, one.base_s
        else:
            one = compare(base, case, number=number, rounds=1)
            ratio, case_s, base_s = 1 / one.ratios[0], one.base_s, one.case_s
        ratios.append(ratio)
        case_times.append(case_s)
        base_times.append(base_s)
    return Comparison(tuple(ratios), statistics.median(case_times), statistics.median(base_times))


def measure_histograms(
    results: dict[str, Comparison], reader: Any, raw: RawTee, rounds: int, number: int
) -> None:
    """The histogram rows: ``record()`` against one raw ``Histogram.record`` (1 and 3
    attributes or none), both providers collected between rounds (``4 * number`` values of an
    attribute set per round, under the hold's cap); then the references: the same with no
    collection (the cap's hand-over on the recording thread), and what a collection costs
    with that many values held against the same collection with none."""
    meter = raw.provider.get_meter("raw-record")
    raw_histogram = meter.create_histogram("raw.histogram", unit="s")
    calls = number * 4

    def collect() -> None:
        reader.get_metrics_data()
        raw.collect()

    for label, labels in (("", None), (", 1 attribute", ONE), (", 3 attributes", THREE)):
        results[f"record() histogram{label}"] = _collected_between_rounds(
            lambda labels=labels: rlmetrics.record("bench", {"histogram": 0.5}, labels),
            lambda labels=labels: raw_histogram.record(0.5, labels),
            collect,
            number=calls,
            rounds=rounds,
        )
    collect()
    # Each round holds two caps' worth, so every round pays two hand-overs on the loop's
    # thread and its ratio is the amortised one (rounds shorter than a cap would show the
    # rounds between hand-overs in the median and hide the hand-overs in the max).
    results[NEVER_COLLECTED] = compare(
        lambda: rlmetrics.record("bench", {"histogram": 0.5}, THREE),
        lambda: raw_histogram.record(0.5, THREE),
        number=2 * HELD_VALUES_MAX,
        rounds=max(5, rounds // 3),
    )

    def hold() -> None:
        reader.get_metrics_data()  # nothing held before the values
        for _ in range(calls):
            rlmetrics.record("bench", {"histogram": 0.5}, THREE)

    results[HELD_COLLECTION.format(n=calls)] = compare(
        reader.get_metrics_data,
        reader.get_metrics_data,
        number=max(1, number // 25),
        rounds=rounds,
        case_setup=hold,
        base_setup=reader.get_metrics_data,
    )


def measure(
    rounds: int, number: int, histogram_only: bool = False
) -> tuple[dict[str, Comparison], dict[int, float]]:
    """Every case's comparison, and log_metrics' seconds per call by key count."""
    results: dict[str, Comparison] = {}
    raw = RawTee()
    workdir = Path(tempfile.mkdtemp(prefix="rlmetrics-bench-"))
    step = dict(GRPO_STEP)
    # One step counter for every case and baseline: each call is a new step, as in a loop.
    steps = itertools.count(1)

    if histogram_only:
        with isolated_state():
            declare_bench_group()
            with in_memory_telemetry() as (_handle, reader):
                measure_histograms(results, reader, raw, rounds, number)
        return results, {}

    # -- telemetry not started: the Logger and JSONL alone -----------------------------------
    with isolated_state():
        logger = rlmetrics.Logger(backends={"jsonl": {"path": workdir / "off.jsonl"}})
        with open(workdir / "off-raw.jsonl", "a", encoding="utf-8") as handle:
            results["Logger + JSONL, telemetry not started"] = compare(
                lambda: logger.log_metrics(step, step=next(steps), prefix="train"),
                lambda: _write_json_row(handle, step, next(steps)),
                number=number,
                rounds=rounds,
            )
        logger.finish()

    # -- telemetry started, every installed family on ----------------------------------------
    with isolated_state():
        declare_bench_group()
        with in_memory_telemetry() as (_handle, reader):
            quiet = rlmetrics.Logger(backends={})
            results["log_metrics, no backend"] = compare(
                lambda: quiet.log_metrics(step, step=next(steps), prefix="train"),
                lambda: raw.step(step, next(steps)),
                number=number,
                rounds=rounds,
            )
            results[FOUR_KEYS] = compare(
                lambda: quiet.log_metrics(FOUR, step=next(steps), prefix="train"),
                lambda: raw.four(FOUR, next(steps)),
                number=number,
                rounds=rounds,
            )
            writer = rlmetrics.Logger(backends={"jsonl": {"path": workdir / "on.jsonl"}})
            with open(workdir / "on-raw.jsonl", "a", encoding="utf-8") as handle:

                def raw_with_json() -> None:
                    number = next(steps)
                    raw.step(step, number)
                    _write_json_row(handle, step, number)

                results["log_metrics, JSONL backend"] = compare(
                    lambda: writer.log_metrics(step, step=next(steps), prefix="train"),
                    raw_with_json,
                    number=number,
                    rounds=rounds,
                )

            def ours_and_collect() -> None:
                quiet.log_metrics(step, step=next(steps), prefix="train")
                reader.get_metrics_data()

            def raw_and_collect() -> None:
                raw.step(step, next(steps))
                raw.collect()

            results["one step + one collection"] = compare(
                ours_and_collect, raw_and_collect, number=max(1, number // 4), rounds=rounds
            )
            observable = RawObservable(raw, step)
            results[REFERENCE] = compare(
                observable.collect, raw_and_collect, number=max(1, number // 4), rounds=rounds
            )
            # The floor of the next row: what the SDK's observable gauges cost at collection
            # with no rlmetrics code, against the same raw collection.
            results[COLLECTION_FLOOR] = compare(
                observable.collect,
                raw.collect,
                number=max(1, number // 4),
                rounds=rounds,
                base_setup=lambda: raw.step(step, next(steps)),
            )
            # Collection against collection: each side's step fills its provider off the clock.
            results[COLLECTION] = compare(
                reader.get_metrics_data,
                raw.collect,
                number=max(1, number // 4),
                rounds=rounds,
                case_setup=lambda: quiet.log_metrics(step, step=next(steps), prefix="train"),
                base_setup=lambda: raw.step(step, next(steps)),
            )
            meter = raw.provider.get_meter("raw-record")
            raw_counter = meter.create_counter("raw.counter")
            results["record() counter"] = compare(
                lambda: rlmetrics.record("bench", {"counter": 1}),
                lambda: raw_counter.add(1),
                number=number * 4,
                rounds=rounds,
            )
            floor_record = _Floor(raw_counter).record
            results[FLOOR] = compare(
                lambda: floor_record("bench", {"counter": 1}, None),
                lambda: raw_counter.add(1),
                number=number * 4,
                rounds=rounds,
            )
            for label, labels in (("1 attribute", ONE), ("3 attributes", THREE)):
                results[f"record() counter, {label}"] = compare(
                    lambda labels=labels: rlmetrics.record("bench", {"counter": 1}, labels),
                    lambda labels=labels: raw_counter.add(1, labels),
                    number=number * 4,
                    rounds=rounds,
                )
            # What a queued backend (W&B, MLflow) adds to the caller's thread: the step taken
            # as plain values before it is queued, once for all of them.
            results[SNAPSHOT] = compare(
                lambda: snapshot(step),
                lambda: writer.log_metrics(step, step=next(steps), prefix="train"),
                number=number,
                rounds=rounds,
            )
            with_arrays = _with_arrays(step)
            if with_arrays is not None:
                results[SNAPSHOT_ARRAYS] = compare(
                    lambda: snapshot(with_arrays),
                    lambda: writer.log_metrics(with_arrays, step=next(steps), prefix="train"),
                    number=max(1, number // 4),
                    rounds=rounds,
                )
            measure_histograms(results, reader, raw, rounds, number)
            scaling = {}
            for keys in (10, 100, 1000):
                wide = {f"scalar/{i}": float(i) for i in range(keys)}
                timed = compare(
                    lambda wide=wide: writer.log_metrics(wide, step=next(steps), prefix="train"),
                    lambda: None,
                    number=max(1, number * 10 // keys),
                    rounds=max(3, rounds // 3),
                )
                scaling[keys] = timed.case_s
            writer.finish()
    results["import rlmetrics (CPU, fresh process)"] = _import_rounds(max(5, rounds // 2))
    return results, scaling


def table(
    results: dict[str, Comparison], scaling: dict[int, float], families: str, load: Load
) -> str:
    lines = [
        f"#### {machine()}, {families}",
        "",
        f"CPU time of the calling thread; {load}.",
        "",
        "| case | ratio min | median | max | goal | case | baseline |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        low, mid, high = result.spread
        goal, goal_us = GOALS.get(name), GOALS_US.get(name)
        if goal_us is not None:
            met = result.case_s * 1e6 <= goal_us
            judged = f"≤{goal_us:g} µs " + ("met" if met else "**missed**")
        elif goal is None:
            judged = "(reference)"
        else:
            judged = f"≤{goal} " + ("met" if mid <= goal else "**missed**")
        lines.append(
            f"| {name} | {low:.2f} | **{mid:.2f}** | {high:.2f} | {judged} "
            f"| {result.case_s * 1e6:.1f} µs | {result.base_s * 1e6:.1f} µs |"
        )
    if not scaling:  # --histogram-only
        return "\n".join(lines) + "\n"
    sizes = sorted(scaling)
    per_call = ", ".join(f"{keys} keys {scaling[keys] * 1e6:.0f} µs" for keys in sizes)
    # The slope between sizes: the fixed cost of a call cancels, what each key adds remains.
    per_extra_key = ", ".join(
        f"{low}→{high}: {(scaling[high] - scaling[low]) / (high - low) * 1e6:.2f} µs"
        for low, high in itertools.pairwise(sizes)
    )
    lines += [
        "",
        f"Scaling (log_metrics + JSONL, keys no family tees): {per_call}; "
        f"each extra key {per_extra_key}.",
    ]
    return "\n".join(lines) + "\n"


def _as_json(results: dict[str, Comparison], scaling: dict[int, float]) -> str:
    return json.dumps(
        {
            "results": {name: attrs.asdict(result) for name, result in results.items()},
            "scaling": scaling,
        }
    )


def _in_processes(
    processes: int, child_args: list[str]
) -> tuple[dict[str, Comparison], dict[int, float]]:
    """Run the measurement in ``processes`` fresh interpreters and pool their rounds."""
    runs = fresh_runs(__file__, processes, ["--as-json", *child_args])
    results = pool([run["results"] for run in runs])
    scaling = {
        int(keys): statistics.median(run["scaling"][keys] for run in runs)
        for keys in runs[0]["scaling"]
    }
    return results, scaling


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--all-families", action="store_true", help="load every installed plugin, not only the core"
    )
    parser.add_argument(
        "--processes", type=int, default=5, help="fresh processes whose rounds are pooled"
    )
    parser.add_argument("--rounds", type=int, default=31, help="rounds per case in each process")
    parser.add_argument("--number", type=int, default=500, help="calls per side per round")
    parser.add_argument(
        "--quick", action="store_true", help="1 process, 5 rounds of 100 calls (a smoke run)"
    )
    parser.add_argument("--update-readme", action="store_true", help="rewrite this SDK's table")
    parser.add_argument(
        "--histogram-only",
        action="store_true",
        help="only the histogram rows and their references (a table of their own)",
    )
    parser.add_argument("--as-json", action="store_true", help=argparse.SUPPRESS)  # a child run
    args = parser.parse_args()
    if not args.all_families:
        os.environ["RLMETRICS_PLUGINS"] = ""  # an empty allow-list: the core's built-ins only
    processes, rounds, number = (
        (1, 5, 100) if args.quick else (args.processes, args.rounds, args.number)
    )
    if args.as_json:
        sys.stdout.write(_as_json(*measure(rounds, number, args.histogram_only)))
        return
    families = "every installed family" if args.all_families else "the core's families"
    load = Load()
    measured = (
        measure(rounds, number, args.histogram_only)
        if processes == 1
        else _in_processes(
            processes,
            ["--rounds", str(rounds), "--number", str(number)]
            + (["--all-families"] if args.all_families else [])
            + (["--histogram-only"] if args.histogram_only else []),
        )
    )
    block = table(*measured, f"{families}, {processes} processes of {rounds} rounds", load.stop())
    sys.stdout.write(block)
    if args.update_readme:
        every = ":all-families" if args.all_families else ""
        kind = "bench-tee-histogram" if args.histogram_only else "bench-tee"
        update_readme(f"{kind}:{version('opentelemetry-sdk')}{every}", block)


if __name__ == "__main__":
    main()
