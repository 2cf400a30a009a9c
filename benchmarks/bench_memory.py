"""Memory over a long run: the RSS of a trainer process with every installed family started,
sampled while it logs 10**6 steps.

    python benchmarks/bench_memory.py [--steps 1000000] [--every 100000] [--update-readme]

The process starts telemetry with every installed plugin (the Gym server middleware built, the
Gym runtime series enabled, so their families are active too), one in-memory reader collected
every 1000 steps (a run exporting every few seconds), and a Logger without backends. Each step
logs the realistic 60-key GRPO dict of ``grpo_step.py`` with its numbers changing, and records
a counter and a labelled histogram. The RSS (``/proc/self/statm``) is sampled every ``--every``
steps after a garbage collection; what is reported is each sample and the growth from the first
sample to the last. Not a unit test: a run takes minutes, and a sampled RSS is what it is.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import time

from _harness import printed_into_readme
from grpo_step import GRPO_STEP

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec
from rlmetrics.testing import in_memory_telemetry

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * _PAGE


def _use_every_family() -> None:
    """What a process that uses the Gym families does, so their instruments exist too."""
    try:
        from rlmetrics_gym.runtime import enable_runtime_metrics
        from rlmetrics_gym.server import GymServerMetricsMiddleware
    except ImportError:
        return
    enable_runtime_metrics()
    GymServerMetricsMiddleware(lambda scope, receive, send: None)  # type: ignore[arg-type,return-value]


def run(steps: int, every: int) -> list[tuple[int, int]]:
    rlmetrics.declare(
        "bench.memory",
        [
            MetricSpec("bench.memory.count", Kind.COUNTER, key="count"),
            MetricSpec(
                "bench.memory.seconds",
                Kind.HISTOGRAM,
                unit="s",
                key="seconds",
                attributes={"phase": OPEN},
                buckets=[0.01, 0.1, 1, 10],
            ),
        ],
    )
    _use_every_family()
    rng = random.Random(0)
    samples: list[tuple[int, int]] = []
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={})
        step_dict = dict(GRPO_STEP)
        phases = [{"phase": name} for name in ("generate", "train", "refit")]
        for step in range(1, steps + 1):
            step_dict["reward"] = rng.random()
            step_dict["loss"] = rng.random()
            logger.log_metrics(step_dict, step=step, prefix="train")
            rlmetrics.record("bench.memory", {"count": 1})
            rlmetrics.record("bench.memory", {"seconds": rng.random()}, phases[step % 3])
            if step % 1000 == 0:
                reader.get_metrics_data()
            if step % every == 0:
                gc.collect()
                samples.append((step, rss_bytes()))
        logger.finish()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--update-readme", action="store_true")
    args = parser.parse_args()
    with printed_into_readme("bench-memory" if args.update_readme else None):
        started = time.monotonic()
        samples = run(args.steps, args.every)
        took = time.monotonic() - started
        print(f"{'steps':>10} {'RSS MB':>8}")
        for step, rss in samples:
            print(f"{step:>10,} {rss / 2**20:>8.1f}")
        first, last = samples[0][1], samples[-1][1]
        print(
            f"\n{args.steps:,} steps in {took:.0f} s; RSS from the first sample to the last: "
            f"{(last - first) / 2**20:+.1f} MB ({(last - first) / first * 100:+.1f}%)"
        )


if __name__ == "__main__":
    main()
