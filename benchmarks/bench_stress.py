"""Stress: P processes x T threads recording as fast as they can, every process exporting over
OTLP gRPC to one real receiver on 127.0.0.1, the totals received checked against those sent.

    python benchmarks/bench_stress.py [--seconds 5] [--sizes 1x1,4x4,16x10,64x10] [--update-readme]

Run it in each SDK's bench env under the bench lock. The run itself is
``rlmetrics.testing.stress`` (the test suite runs it small, so a lost event fails a test); this
runs it at every size and path and reports, for each: the events sent, the events lost (sent
minus received: must be 0), events per second of wall time over the window every thread ran,
and events per CPU-second (the worker processes' user + system time over that window: what one
event costs, whatever else the machine is doing). The goal is RL-Insight's published 135k
events/s at 64 x 10 (0 lost over 2M events), five times over, on this 2-core machine.

A second table measures what one export costs on the wire as series and events grow: one
process, a labelled counter recorded over N attribute sets, E events between two collections,
the size of the ExportMetricsServiceRequest the receiver got. It must grow linearly in N and
stay flat in E.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import version

from _harness import machine, update_readme

from rlmetrics.testing import stress
from rlmetrics.testing.peers import OtlpReceiver

#: The rate to beat: five times RL-Insight's 135k events/s.
GOAL = 5 * 135_000


def _sizes(text: str) -> list[tuple[int, int]]:
    return [(int(p), int(t)) for p, t in (size.split("x") for size in text.split(","))]


def stress_table(paths: list[str], sizes: list[tuple[int, int]], seconds: float) -> str:
    lines = [
        "| path | processes x threads | events | lost | events/s | per CPU-second "
        "| µs CPU an event |",
        "|---|---|---|---|---|---|---|",
    ]
    for path in paths:
        for processes, threads in sizes:
            outcome = stress.run(path, processes, threads, seconds)
            lines.append(
                f"| {path} | {processes} x {threads} | {outcome.events:,} | {outcome.lost} "
                f"| {outcome.per_second:,.0f} | {outcome.per_cpu_second:,.0f} "
                f"| {1e6 / outcome.per_cpu_second:.2f} |"
            )
            print(lines[-1], file=sys.stderr, flush=True)
            if not outcome.exact:
                raise SystemExit(f"{path} {processes}x{threads}: totals differ: {outcome}")
    return "\n".join(lines) + "\n"


def bytes_table(series: list[int], events: list[int]) -> str:
    """Bytes of one export by series count (rows) and events per collection (columns)."""
    import rlmetrics
    from rlmetrics import Kind, MetricSpec
    from rlmetrics.testing import isolated_state

    lines = [
        "| series | " + " | ".join(f"{e:,} events" for e in events) + " |",
        "|---|" + "---|" * len(events),
    ]
    receiver = OtlpReceiver().start()
    with isolated_state():
        rlmetrics.declare(
            "bytes",
            [
                MetricSpec(
                    "stress.bytes",
                    Kind.COUNTER,
                    key="n",
                    attributes={"stress.series": None},
                    max_series=max(series) + 1,
                )
            ],
        )
        for count in series:
            attributes = [{"stress.series": str(i)} for i in range(count)]
            row = []
            with rlmetrics.start(
                "rlmetrics-bytes",
                exporters={"otlp": {"endpoint": receiver.endpoint}},
                export_interval_s=3600,
                traces=False,
            ) as telemetry:
                for number in events:
                    for index in range(number):
                        rlmetrics.record("bytes", {"n": 1}, attributes[index % count])
                    before = len(receiver.requests)
                    telemetry.force_flush(30)
                    row.append(sum(r.ByteSize() for r in receiver.requests[before:]))
            lines.append(f"| {count:,} | " + " | ".join(f"{b:,} B" for b in row) + " |")
    receiver.stop()
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="how long every thread runs")
    parser.add_argument("--sizes", default="1x1,4x4,16x10,64x10", help="PxT,PxT,...")
    parser.add_argument("--paths", default=",".join(stress.PATHS))
    parser.add_argument("--no-bytes", action="store_true", help="skip the bytes table")
    parser.add_argument("--update-readme", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()
    block = (
        f"{machine()}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the start, "
        f"{args.seconds:g} s per run\n\n"
        + stress_table(args.paths.split(","), _sizes(args.sizes), args.seconds)
    )
    if not args.no_bytes:
        block += "\nBytes of one OTLP export (one process, a labelled counter):\n\n" + bytes_table(
            [1, 10, 100, 1000], [1_000, 10_000, 100_000]
        )
    print(block)
    if args.update_readme:
        update_readme(f"bench-stress:{version('opentelemetry-sdk')}", block)


if __name__ == "__main__":
    main()
