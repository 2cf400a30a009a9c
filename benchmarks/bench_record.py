"""What recording through rlmetrics costs, as ratios to raw OpenTelemetry calls in the same run.

    python benchmarks/bench_record.py [--rounds 15] [--number 5000]

Absolute times on a shared 2-core machine are noise; the ratios are what to read. Each case
and its baseline are timed in alternating rounds (so a slow patch of the machine hits both)
and the fastest round of each is kept: the least disturbed one.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec
from rlmetrics.testing import in_memory_telemetry, isolated_state

TRAIN_DICT = {
    "reward": 0.5,
    "loss": 0.1,
    "kl_penalty": 0.01,
    "grad_norm": 1.2,
    "lr": 1e-6,
    "approx_entropy": 2.3,
    "mean_gen_tokens_per_sample": 512.0,
    **{f"advantages/{s}": 0.1 for s in ("mean", "max", "min")},
    **{f"probs_ratio{s}": 1.0 for s in ("", "_clamped", "_min", "_max")},
    **{f"extra/{i}": float(i) for i in range(15)},
}
TEED = 7  # the training family's keys among them


def compare(
    ours: Callable[[], object], base: Callable[[], object], number: int, rounds: int
) -> tuple[float, float]:
    """Seconds per call of ours and of the baseline, fastest of interleaved rounds."""
    best_ours = best_base = float("inf")
    for _ in range(rounds):
        best_base = min(best_base, timeit.timeit(base, number=number) / number)
        best_ours = min(best_ours, timeit.timeit(ours, number=number) / number)
    return best_ours, best_base


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--number", type=int, default=5000)
    args = parser.parse_args()
    n, r = args.number, args.rounds

    provider = MeterProvider(metric_readers=[InMemoryMetricReader()], shutdown_on_exit=False)
    meter = provider.get_meter("baseline")
    raw_counter = meter.create_counter("raw.counter")
    raw_histogram = meter.create_histogram("raw.histogram", unit="s")
    raw_gauge = meter.create_gauge("raw.gauge", unit="s")
    attrs = {"phase": "load"}
    teed = list(TRAIN_DICT.values())[:TEED]

    def raw_train_step() -> None:
        for value in teed:
            raw_gauge.set(value)

    rows: list[tuple[str, tuple[float, float]]] = []
    with isolated_state():
        rlmetrics.declare(
            "bench",
            [
                MetricSpec("b.counter", Kind.COUNTER, key="counter"),
                MetricSpec(
                    "b.histogram", Kind.HISTOGRAM, unit="s", key="histogram", buckets=[0.1, 1]
                ),
                MetricSpec(
                    "b.gauge", Kind.GAUGE, unit="s", key="gauge", attributes={"phase": OPEN}
                ),
            ],
        )
        logger = rlmetrics.Logger(backends={})

        def log_step() -> None:
            logger.log_metrics(TRAIN_DICT, step=1, prefix="train")

        def record_counter() -> None:
            rlmetrics.record("bench", {"counter": 1})

        rows.append(
            (
                "record, telemetry not started",
                compare(record_counter, lambda: raw_counter.add(1), n, r),
            )
        )
        rows.append(
            (
                "Logger.log_metrics, telemetry not started",
                compare(log_step, raw_train_step, n // 10, r),
            )
        )
        with in_memory_telemetry():
            rows.append(
                ("record counter", compare(record_counter, lambda: raw_counter.add(1), n, r))
            )
            rows.append(
                (
                    "record histogram",
                    compare(
                        lambda: rlmetrics.record("bench", {"histogram": 0.5}),
                        lambda: raw_histogram.record(0.5),
                        n,
                        r,
                    ),
                )
            )
            rows.append(
                (
                    "record gauge + attribute",
                    compare(
                        lambda: rlmetrics.record("bench", {"gauge": 1.0}, attrs),
                        lambda: raw_gauge.set(1.0, attrs),
                        n,
                        r,
                    ),
                )
            )
            rows.append(
                (
                    "Logger.log_metrics (30 keys, 7 teed)",
                    compare(log_step, raw_train_step, n // 10, r),
                )
            )

    print(f"{'case':<44} {'us/call':>9} {'baseline us':>12} {'ratio':>7}")
    for name, (ours, base) in rows:
        print(f"{name:<44} {ours * 1e6:>9.2f} {base * 1e6:>12.2f} {ours / base:>7.2f}")
    print(
        "\nbaselines: raw Counter.add, Histogram.record, synchronous Gauge.set with one "
        "attribute;\nfor log_metrics, 7 raw Gauge.set calls (the teed keys) per dict"
    )


if __name__ == "__main__":
    main()
