"""What recording through rlmetrics costs, as ratios to raw OpenTelemetry calls in the same run.

    python benchmarks/bench_record.py [--repeat 5] [--number 20000]

Absolute times on a shared 2-core machine are noise; the ratios are what to read. Each case is
timed `repeat` times over `number` calls and the best run is kept (the least disturbed one).
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


def best(stmt: Callable[[], object], number: int, repeat: int) -> float:
    """Seconds per call of the fastest of `repeat` runs."""
    return min(timeit.repeat(stmt, number=number, repeat=repeat)) / number


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args()
    n, r = args.number, args.repeat

    provider = MeterProvider(metric_readers=[InMemoryMetricReader()], shutdown_on_exit=False)
    meter = provider.get_meter("baseline")
    raw_counter = meter.create_counter("raw.counter")
    raw_histogram = meter.create_histogram("raw.histogram", unit="s")
    raw_gauge = meter.create_gauge("raw.gauge", unit="s")
    attrs = {"phase": "load"}
    baseline = {
        "counter": best(lambda: raw_counter.add(1), n, r),
        "histogram": best(lambda: raw_histogram.record(0.5), n, r),
        "gauge+attrs": best(lambda: raw_gauge.set(1.0, attrs), n, r),
    }
    raw_train = best(lambda: [raw_gauge.set(v) for v in list(TRAIN_DICT.values())[:7]], n // 10, r)

    rows: list[tuple[str, float, float]] = []
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
        idle = best(lambda: rlmetrics.record("bench", {"counter": 1}), n, r)
        logger = rlmetrics.Logger(backends={})
        idle_logger = best(
            lambda: logger.log_metrics(TRAIN_DICT, step=1, prefix="train"), n // 10, r
        )
        with in_memory_telemetry():
            rows.append(
                (
                    "record counter",
                    best(lambda: rlmetrics.record("bench", {"counter": 1}), n, r),
                    baseline["counter"],
                )
            )
            rows.append(
                (
                    "record histogram",
                    best(lambda: rlmetrics.record("bench", {"histogram": 0.5}), n, r),
                    baseline["histogram"],
                )
            )
            rows.append(
                (
                    "record gauge+attrs",
                    best(lambda: rlmetrics.record("bench", {"gauge": 1.0}, attrs), n, r),
                    baseline["gauge+attrs"],
                )
            )
            rows.append(
                (
                    "Logger.log_metrics (30 keys, 7 teed)",
                    best(
                        lambda: logger.log_metrics(TRAIN_DICT, step=1, prefix="train"), n // 10, r
                    ),
                    raw_train,
                )
            )
    rows.append(("record, telemetry not started", idle, baseline["counter"]))
    rows.append(("Logger.log_metrics, telemetry not started", idle_logger, raw_train))

    print(f"{'case':<44} {'us/call':>9} {'baseline us':>12} {'ratio':>7}")
    for name, ours, base in rows:
        print(f"{name:<44} {ours * 1e6:>9.2f} {base * 1e6:>12.2f} {ours / base:>7.2f}")
    print(
        "\nbaselines: raw Counter.add, Histogram.record, sync Gauge.set with one attribute; "
        "for log_metrics, 7 raw Gauge.set calls (the teed keys) per dict"
    )


if __name__ == "__main__":
    main()
