"""Interpreter instructions per ``record()`` call, counted by callgrind: repeatable where the
timings of these shared VMs are not, for telling apart changes smaller than timing noise.

    python benchmarks/count_record.py [--calls 20000] [--tee] [--update-readme]

Every case runs in a fresh interpreter under ``valgrind --tool=callgrind``, after the same
setup and the same warm-up of every case, then ``--calls`` calls of that case alone; a run
with no calls gives what the setup costs, and the difference over the calls is one call's
instructions. Instructions are not time (mispredicted branches and cache misses are not in
them, and they cost the interpreter's dispatch more than its arithmetic): compare versions
of the code here, and hold the goals with ``bench_tee.py``.

With ``--tee`` it counts ``bench_tee.py``'s step cases instead: ``log_metrics`` of the 60-key
GRPO step and of a 4-key dict, and a step with one collection, each against its hand-written
baseline, the step advancing on every call as a loop's does (a tenth of ``--calls`` calls for
a step, a fortieth for a step with a collection).
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from importlib.metadata import version

from _harness import machine, update_readme
from bench_tee import FLOOR, FOUR, RawTee, _Floor
from grpo_step import GRPO_STEP
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import rlmetrics
from rlmetrics.testing import in_memory_telemetry, isolated_state

#: Each case and the raw call it is read against.
CASES = {
    "raw Counter.add": None,
    FLOOR: "raw Counter.add",
    "record() counter": "raw Counter.add",
    "raw Histogram.record": None,
    "record() histogram": "raw Histogram.record",
    "raw Counter.add, 1 attribute": None,
    "record() counter, 1 attribute": "raw Counter.add, 1 attribute",
    "raw Counter.add, 3 attributes": None,
    "record() counter, 3 attributes": "raw Counter.add, 3 attributes",
    "raw Histogram.record, 1 attribute": None,
    "record() histogram, 1 attribute": "raw Histogram.record, 1 attribute",
    "raw Histogram.record, 3 attributes": None,
    "record() histogram, 3 attributes": "raw Histogram.record, 3 attributes",
}
#: ``--tee``'s cases, the raw calls each is read against, and the share of ``--calls`` made.
TEE_CASES = {
    "raw step: the 18 series by Gauge.set": (None, 10),
    "log_metrics, 60 keys, no backend": ("raw step: the 18 series by Gauge.set", 10),
    "raw 4 keys by Gauge.set": (None, 10),
    "log_metrics, 4 keys, no backend": ("raw 4 keys by Gauge.set", 10),
    "raw step + collection": (None, 40),
    "one step + one collection": ("raw step + collection", 40),
}
#: The attribute sets of the labelled cases: the same dict every call, as a loop passes them.
ONE = {"rl.worker_group": "actor"}
THREE = {"rl.worker_group": "actor", "rl.dataset": "math", "rl.phase": "train"}
_WARM_UP = 200


def _run_tee_case(name: str | None, calls: int) -> None:
    """:func:`_run_case` for ``--tee``'s cases: the Logger and the raw provider set up, every
    case warmed up, then ``name`` alone ``calls`` times."""
    raw = RawTee()
    step = dict(GRPO_STEP)
    steps = itertools.count(1)
    with isolated_state(), in_memory_telemetry() as (_handle, reader):
        quiet = rlmetrics.Logger(backends={})

        def ours_and_collect() -> None:
            quiet.log_metrics(step, step=next(steps), prefix="train")
            reader.get_metrics_data()

        def raw_and_collect() -> None:
            raw.step(step, next(steps))
            raw.collect()

        cases: dict[str, Callable[[], object]] = {
            "raw step: the 18 series by Gauge.set": lambda: raw.step(step, next(steps)),
            "log_metrics, 60 keys, no backend": lambda: quiet.log_metrics(
                step, step=next(steps), prefix="train"
            ),
            "raw 4 keys by Gauge.set": lambda: raw.four(FOUR, next(steps)),
            "log_metrics, 4 keys, no backend": lambda: quiet.log_metrics(
                FOUR, step=next(steps), prefix="train"
            ),
            "raw step + collection": raw_and_collect,
            "one step + one collection": ours_and_collect,
        }
        for call in cases.values():
            for _ in range(_WARM_UP // 4):
                call()
        if name is not None:
            call = cases[name]
            for _ in range(calls):
                call()
    raw.provider.shutdown()


def _run_case(name: str | None, calls: int) -> None:
    """Set up, warm every case up, then call ``name`` ``calls`` times (under callgrind)."""
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()], shutdown_on_exit=False)
    meter = provider.get_meter("raw-record")
    raw_counter = meter.create_counter("raw.counter")
    raw_histogram = meter.create_histogram("raw.histogram", unit="s")
    with isolated_state():
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
                    attributes=dict.fromkeys(THREE, rlmetrics.OPEN),
                ),
            ],
        )
        with in_memory_telemetry() as (_handle, reader):
            floor_record = _Floor(raw_counter).record
            cases: dict[str, Callable[[], object]] = {
                "raw Counter.add": lambda: raw_counter.add(1),
                FLOOR: lambda: floor_record("bench", {"counter": 1}, None),
                "record() counter": lambda: rlmetrics.record("bench", {"counter": 1}),
                "raw Histogram.record": lambda: raw_histogram.record(0.5),
                "record() histogram": lambda: rlmetrics.record("bench", {"histogram": 0.5}),
                "raw Counter.add, 1 attribute": lambda: raw_counter.add(1, ONE),
                "record() counter, 1 attribute": lambda: rlmetrics.record(
                    "bench", {"counter": 1}, ONE
                ),
                "raw Counter.add, 3 attributes": lambda: raw_counter.add(1, THREE),
                "record() counter, 3 attributes": lambda: rlmetrics.record(
                    "bench", {"counter": 1}, THREE
                ),
                "raw Histogram.record, 1 attribute": lambda: raw_histogram.record(0.5, ONE),
                "record() histogram, 1 attribute": lambda: rlmetrics.record(
                    "bench", {"histogram": 0.5}, ONE
                ),
                "raw Histogram.record, 3 attributes": lambda: raw_histogram.record(0.5, THREE),
                "record() histogram, 3 attributes": lambda: rlmetrics.record(
                    "bench", {"histogram": 0.5}, THREE
                ),
            }
            for call in cases.values():
                for _ in range(_WARM_UP):
                    call()
            if name is not None:
                call = cases[name]
                for _ in range(calls):
                    call()
            # One collection, counted (the setup run makes it too, so its fixed cost cancels):
            # what rlmetrics holds or adds up until the collection is handed to the SDK there,
            # so a count is the whole work of a call, on whichever thread it runs.
            reader.get_metrics_data()
    provider.shutdown()


def _instructions(valgrind: str, name: str | None, calls: int, tee: bool = False) -> int:
    child = [sys.executable, __file__, "--child", "--calls", str(calls)] + (
        ["--tee"] if tee else []
    )
    if name is not None:
        child += ["--case", name]
    done = subprocess.run(
        [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", *child],
        check=True,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},  # the same dict layouts every run
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind printed no total:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls of the counted case")
    parser.add_argument(
        "--tee", action="store_true", help="count bench_tee.py's step cases, not record()'s"
    )
    parser.add_argument(
        "--histogram-only",
        action="store_true",
        help="only the histogram cases and their raw calls (a table of their own)",
    )
    parser.add_argument("--update-readme", action="store_true", help="rewrite this SDK's table")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["RLMETRICS_PLUGINS"] = ""  # an empty allow-list: the core's built-ins only
    if args.child:
        (_run_tee_case if args.tee else _run_case)(args.case, args.calls)
        return
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SystemExit("count_record.py needs valgrind (Debian's package valgrind)")
    setup = _instructions(valgrind, None, 0, args.tee)
    if args.tee:
        against = {name: raw for name, (raw, _share) in TEE_CASES.items()}
        calls = {name: max(1, args.calls // share) for name, (_raw, share) in TEE_CASES.items()}
    else:
        against = {
            name: raw
            for name, raw in CASES.items()
            if not args.histogram_only or "Histogram" in name or "histogram" in name
        }
        calls = dict.fromkeys(against, args.calls)
    per_call = {
        name: (_instructions(valgrind, name, calls[name], args.tee) - setup) / calls[name]
        for name in against
    }
    rows = ["| case | instructions a call | against the raw call |", "|---|---|---|"]
    for name, raw in against.items():
        ratio = "" if raw is None else f"{per_call[name] / per_call[raw]:.3f}"
        rows.append(f"| {name} | {per_call[name]:,.0f} | {ratio} |")
    block = f"{machine()}, {args.calls} calls\n\n" + "\n".join(rows) + "\n"
    sys.stdout.write(block)
    if args.update_readme:
        kind = (
            "count-tee"
            if args.tee
            else "count-record-histogram"
            if args.histogram_only
            else "count-record"
        )
        update_readme(f"{kind}:{version('opentelemetry-sdk')}", block)


if __name__ == "__main__":
    main()
