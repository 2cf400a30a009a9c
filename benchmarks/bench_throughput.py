"""Calls per CPU-second at 64 processes x 10 threads: ``log_metrics`` beside ``record()``, each
beside the raw SDK calls it replaces, all in the same run.

    python benchmarks/bench_throughput.py [--processes 64] [--threads 10] [--cap-s 30]
                                          [--quick] [--update-readme]

Run it nice'd in each SDK's bench env (``tox run -e bench-otel1452 --notest``, then
``.tox/bench-otel1452/bin/python benchmarks/bench_throughput.py``). P worker processes (spawned:
fresh interpreters, as a launcher starts ranks) each start telemetry with the core's families on
an in-memory reader, declare ``bench_tee.py``'s ``bench`` group, and run phases; in each phase
T threads of the process all make the same call a fixed number of times (or until a wall-clock
cap, whichever comes first) while the process's CPU time (``time.process_time``: every thread
of the process, the SDK's included) is read around the phase. The paths and their baselines
(``bench_tee.py``'s dicts, attributes and hand-written raw SDK calls):

- ``log_metrics`` of the 60-key GRPO step vs its 18 series by ``Gauge.set`` (:class:`RawTee`);
- ``log_metrics`` of the 4-key dict vs its 4 gauges, the step number and its time;
- ``record()`` on the histogram with 3 attributes vs ``Histogram.record``;
- ``record()`` on the counter, no attributes, vs ``Counter.add``.

Each thread logs through a Logger of its own with its own advancing step, as a rank's loop does.
Every process waits for the others at a barrier before each phase; even-numbered processes run
the phases in one order, odd-numbered ones in the reverse order, so every path and its baseline
share the machine with the same mix of work. What is reported, per path: calls per CPU-second
over all processes (the sum of calls over the sum of CPU seconds), the min / median / max of the
processes' own rates, and the path's CPU per call against its baseline's. On a shared 2-core
machine wall time measures the other jobs; CPU seconds measure what a call costs, which is the
figure a throughput claim (events per second per core) rests on.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import queue
import statistics
import threading
import time
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import attrs
from _harness import Load, machine, update_readme

#: (path, its raw-SDK baseline, calls per thread): the pairs, in the order even processes run.
PAIRS = (
    ("log_metrics, 60 keys", "raw: the 18 series by Gauge.set", 100),
    ("log_metrics, 4 keys", "raw: 4 gauges + step number and time", 400),
    ("record() histogram, 3 attributes", "raw: Histogram.record, 3 attributes", 3000),
    ("record() counter", "raw: Counter.add", 3000),
)
#: Calls between two looks at the clock.
_CHECK_EVERY = 16
#: Calls of each path a process makes once before the first phase (instruments, caches).
_WARM_UP = 20


@attrs.frozen
class Phase:
    """One process's phase: the calls its threads made and the process's CPU seconds."""

    calls: int
    cpu_s: float
    capped: int  # threads the wall-clock cap stopped before their count


def _calls(threads: int) -> dict[str, Callable[[int], Callable[[], object]]]:
    """For each path and baseline, a factory of one thread's call (``thread`` -> call): built
    before the phase starts, so a Logger's construction is off the clock."""
    from bench_tee import FOUR, THREE, RawTee
    from grpo_step import GRPO_STEP

    import rlmetrics

    raw = RawTee()
    meter = raw.provider.get_meter("raw-record")
    raw_counter = meter.create_counter("raw.counter")
    raw_histogram = meter.create_histogram("raw.histogram", unit="s")
    step = dict(GRPO_STEP)
    four = dict(FOUR)

    def logged(metrics: dict[str, Any]) -> Callable[[int], Callable[[], object]]:
        def factory(_thread: int) -> Callable[[], object]:
            logger = rlmetrics.Logger(backends={})
            steps = itertools.count(1)
            return lambda: logger.log_metrics(metrics, step=next(steps), prefix="train")

        return factory

    def by_hand(write: Callable[[dict[str, Any], int], None], metrics: dict[str, Any]) -> Any:
        def factory(_thread: int) -> Callable[[], object]:
            steps = itertools.count(1)
            return lambda: write(metrics, next(steps))

        return factory

    record = rlmetrics.record
    histogram_values, counter_values = {"histogram": 0.5}, {"counter": 1}
    (log60, raw60, _), (log4, raw4, _), (hist, raw_hist, _), (count, raw_count, _) = PAIRS
    return {
        log60: logged(step),
        raw60: by_hand(raw.step, step),
        log4: logged(four),
        raw4: by_hand(raw.four, four),
        hist: lambda _t: lambda: record("bench", histogram_values, THREE),
        raw_hist: lambda _t: lambda: raw_histogram.record(0.5, THREE),
        count: lambda _t: lambda: record("bench", counter_values),
        raw_count: lambda _t: lambda: raw_counter.add(1),
    }


def _thread(
    call: Callable[[], object],
    calls: int,
    cap_s: float,
    gate: threading.Event,
    out: list[int],
    index: int,
) -> None:
    gate.wait()
    deadline = time.monotonic() + cap_s
    done = 0
    while done < calls:
        for _ in range(min(_CHECK_EVERY, calls - done)):
            call()
        done = min(calls, done + _CHECK_EVERY)
        if time.monotonic() >= deadline:
            break
    out[index] = done


def _phase(
    factory: Callable[[int], Callable[[], object]], threads: int, calls: int, cap_s: float
) -> Phase:
    """``threads`` threads making ``calls`` calls each (or until ``cap_s``), timed on the
    process's CPU clock from the release of the threads to the last join."""
    gate = threading.Event()
    counts = [0] * threads
    workers = [
        threading.Thread(
            target=_thread, args=(factory(index), calls, cap_s, gate, counts, index), daemon=True
        )
        for index in range(threads)
    ]
    for worker in workers:
        worker.start()
    started = time.process_time()
    gate.set()
    for worker in workers:
        worker.join()
    cpu_s = time.process_time() - started
    return Phase(sum(counts), cpu_s, sum(1 for count in counts if count < calls))


def _counter_total(reader: Any) -> float:
    """The ``bench.counter`` total (no attributes) the in-memory reader collects."""
    data = reader.get_metrics_data()
    total = 0.0
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name == "bench.counter":
                    total += sum(p.value for p in metric.data.data_points if not p.attributes)
    return total


def worker(
    index: int,
    threads: int,
    cap_s: float,
    scale: float,
    barrier: Any,
    results: Any,
) -> None:
    """One worker process: telemetry on an in-memory reader, every phase between barriers,
    then its phases (and whether the counter's total matched the calls) into ``results``."""
    try:
        from bench_tee import declare_bench_group

        from rlmetrics.testing import in_memory_telemetry

        declare_bench_group()
        with in_memory_telemetry(service_name="rlmetrics-throughput") as (_handle, reader):
            factories = _calls(threads)
            for factory in factories.values():
                call = factory(-1)
                for _ in range(_WARM_UP):
                    call()
            plan = [
                (name, max(_CHECK_EVERY, int(calls * scale)))
                for case, base, calls in PAIRS
                for name in (case, base)
            ]
            if index % 2:
                plan.reverse()
            phases: dict[str, Phase] = {}
            for name, calls in plan:
                barrier.wait(timeout=600)
                phases[name] = _phase(factories[name], threads, calls, cap_s)
            counted = _WARM_UP + phases[PAIRS[3][0]].calls
            exact = _counter_total(reader) == counted
        results.put((index, {name: attrs.asdict(phase) for name, phase in phases.items()}, exact))
    except BaseException as error:  # the parent must hear of it rather than wait out its timeout
        barrier.abort()
        results.put((index, repr(error), False))
        raise


def run(processes: int, threads: int, cap_s: float, scale: float) -> dict[str, list[Phase]]:
    """Spawn the workers, gather each path's phases (one per process)."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results = context.Queue()
    workers = [
        context.Process(target=worker, args=(i, threads, cap_s, scale, barrier, results))
        for i in range(processes)
    ]
    for process in workers:
        process.start()
    gathered: dict[str, list[Phase]] = {}
    inexact = []
    try:
        for _ in range(processes):
            index, phases, exact = results.get(timeout=1800)
            if isinstance(phases, str):
                raise RuntimeError(f"worker {index} failed: {phases}")
            if not exact:
                inexact.append(index)
            for name, phase in phases.items():
                gathered.setdefault(name, []).append(Phase(**phase))
    except queue.Empty:
        raise RuntimeError("the workers did not report within 30 minutes") from None
    finally:
        for process in workers:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
                process.join()
    if inexact:
        raise RuntimeError(f"the counter's total differs from the calls in workers {inexact}")
    return gathered


def _per_call(phase: Phase) -> float:
    return max(phase.cpu_s, 1e-9) / max(phase.calls, 1)


def table(gathered: dict[str, list[Phase]], processes: int, threads: int, load: Load) -> str:
    def rate(phases: list[Phase]) -> float:
        return sum(p.calls for p in phases) / sum(p.cpu_s for p in phases)

    lines = [
        f"{processes} processes x {threads} threads, the core's families, an in-memory reader; "
        f"process CPU time; {load}.",
        "",
        "| path | calls | CPU s | calls per CPU-second | per process min | median | max "
        "| µs CPU a call | CPU a call vs raw | ratio per process min | median | max "
        "| threads capped |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for case, base, _calls_per_thread in PAIRS:
        for name in (case, base):
            phases = gathered[name]
            own = [p.calls / p.cpu_s for p in phases if p.cpu_s > 0]
            ratio = rate(gathered[base]) / rate(phases)
            # Each process's own ratio: its phase of this path against its phase of the baseline
            # (the lists are in the same process order for every path).
            ratios = [
                _per_call(mine) / _per_call(raw)
                for mine, raw in zip(phases, gathered[base], strict=True)
            ]
            lines.append(
                f"| {name} | {sum(p.calls for p in phases):,} "
                f"| {sum(p.cpu_s for p in phases):.2f} | **{rate(phases):,.0f}** "
                f"| {min(own):,.0f} | {statistics.median(own):,.0f} | {max(own):,.0f} "
                f"| {1e6 / rate(phases):.1f} | **{ratio:.2f}** | {min(ratios):.2f} "
                f"| {statistics.median(ratios):.2f} | {max(ratios):.2f} "
                f"| {sum(p.capped for p in phases)} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--cap-s", type=float, default=30.0, help="wall-clock cap of a phase")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply every path's calls per thread"
    )
    parser.add_argument("--quick", action="store_true", help="4 x 2, a tenth of the calls")
    parser.add_argument("--update-readme", action="store_true", help="rewrite this SDK's table")
    args = parser.parse_args()
    # An empty allow-list: the core's built-in families only, as bench_tee.py's default.
    os.environ["RLMETRICS_PLUGINS"] = ""
    processes, threads, scale = (
        (4, 2, 0.1) if args.quick else (args.processes, args.threads, args.scale)
    )
    load = Load()
    gathered = run(processes, threads, args.cap_s, scale)
    block = f"{machine()}\n\n" + table(gathered, processes, threads, load.stop())
    print(block)
    if args.update_readme:
        update_readme(f"bench-throughput:{version('opentelemetry-sdk')}", block)


if __name__ == "__main__":
    main()
