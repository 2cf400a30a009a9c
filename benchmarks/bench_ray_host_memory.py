"""The host memory monitor at cluster scale: 1,024 node endpoints on 127.0.0.1.

    python benchmarks/bench_ray_host_memory.py [--hosts 1024] [--black-holed 0.1]
        [--rounds 4] [--timeout 5] [--interval 10]

Needs the core and ``plugins/rlmetrics-ray`` installed (aiohttp comes with the plugin).

1. **One cycle** (list the nodes, scrape every endpoint at once, parse, replace the snapshot)
   with a tenth of the endpoints black-holed (they accept the connection and never answer),
   against the same cycle with every endpoint answering. Requirement: the black-holed cycle
   ends within one interval (10 s by default, with the default 5 s timeout). Each healthy
   endpoint serves Ray 2.60's real node exposition (~215 KB, ~800 lines).
2. **One collection** at every host, from the snapshot of a real cycle: the plugin's callback
   alone, and a whole collection of the in-memory reader (both host series through rlmetrics'
   observable instruments and the SDK), against a raw SDK observable gauge pair returning the
   same observations (two per host). Requirement: a collection callback costs at most 1 ms.

The endpoints run in a child process (one event loop; aiohttp serves the healthy ones, plain
asyncio servers hold the black-holed ones), so the monitor under test has the other core to
itself, as a driver scraping remote nodes would. Everything listens on 127.0.0.1, every loop is
bounded, and the child stops when this process closes its stdin (or after 15 minutes).
Each case and its baseline run in alternating rounds (A B, then B A, ...); min / median / max
are reported, and for the cycle the per-round ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _harness import printed_into_readme

FIXTURE = (
    Path(__file__).resolve().parent.parent
    / "plugins/rlmetrics-ray/tests/fixtures/ray-2.60.0-node-metrics.txt"
)
SERVER_LIFETIME_S = 900.0


# -- the endpoints (child process) ----------------------------------------------------------------


def serve(healthy: int, black_holed: int) -> None:
    """Child: serve ``healthy`` exposition endpoints and ``black_holed`` silent ones on
    127.0.0.1; print their ports as JSON; stop when stdin closes."""
    from aiohttp import web

    body = FIXTURE.read_bytes()

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.read(65536):  # read the request, never answer
                pass
        finally:
            writer.close()

    def bound() -> socket.socket:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        return sock

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        ok_ports, hole_ports, holes = [], [], []
        for _ in range(healthy):
            sock = bound()
            await web.SockSite(runner, sock).start()
            ok_ports.append(sock.getsockname()[1])
        for _ in range(black_holed):
            sock = bound()
            holes.append(await asyncio.start_server(hold, sock=sock))
            hole_ports.append(sock.getsockname()[1])
        print(json.dumps({"ok": ok_ports, "black_holed": hole_ports}), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(
            target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True
        ).start()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), SERVER_LIFETIME_S)
        for server in holes:
            server.close()
        await runner.cleanup()

    asyncio.run(main())


class Endpoints:
    """The child process serving the endpoints."""

    def __init__(self, healthy: int, black_holed: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(healthy), str(black_holed)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        ports = json.loads(self.process.stdout.readline())
        self.ok: list[int] = ports["ok"]
        self.black_holed: list[int] = ports["black_holed"]

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def nodes(ports: list[int]) -> list[dict[str, Any]]:
    """``ray.nodes()`` entries for one node per host, each at its own port on 127.0.0.1."""
    return [
        {
            "NodeID": f"{index:056x}",
            "Alive": True,
            "NodeManagerAddress": "127.0.0.1",
            "NodeManagerHostname": f"gpu-node-{index:04d}",
            "MetricsExportPort": port,
        }
        for index, port in enumerate(ports)
    ]


# -- measurements ---------------------------------------------------------------------------------


def summary(values: list[float], unit: float, suffix: str) -> str:
    scaled = [v / unit for v in values]
    return (
        f"min {min(scaled):.3g} / median {statistics.median(scaled):.3g} / "
        f"max {max(scaled):.3g} {suffix}"
    )


def bench_cycles(args: argparse.Namespace, endpoints: Endpoints, holes: int) -> None:
    from rlmetrics_ray.monitor import HostMemoryMonitor
    from rlmetrics_ray.worker_groups import WorkerGroups

    # The same host names in both cases; the case swaps a tenth of the ports for silent ones.
    healthy_nodes = nodes(endpoints.ok[: args.hosts])
    case_nodes = nodes(endpoints.ok[: args.hosts - holes] + endpoints.black_holed)

    def monitor(listed: list[dict[str, Any]]) -> HostMemoryMonitor:
        return HostMemoryMonitor(
            nodes=lambda: listed,
            timeout_s=args.timeout,
            interval_s=args.interval,
            worker_groups=WorkerGroups(),
        )

    case, base = monitor(case_nodes), monitor(healthy_nodes)
    case_times: list[float] = []
    base_times: list[float] = []

    def timed(subject: HostMemoryMonitor, into: list[float]) -> int:
        started = time.perf_counter()
        snapshot = subject.refresh()
        into.append(time.perf_counter() - started)
        return len(snapshot.hosts)

    timed(base, [])  # warm-up: imports, first connections
    for round_index in range(args.rounds):
        order = [(case, case_times), (base, base_times)]
        for subject, into in order if round_index % 2 == 0 else order[::-1]:
            reported = timed(subject, into)
            expected = args.hosts - holes if subject is case else args.hosts
            assert reported == expected, f"{reported} hosts reported, {expected} expected"
    ratios = [c / b for c, b in zip(case_times, base_times, strict=True)]
    print(f"cycle, {args.hosts} hosts, {holes} black-holed (timeout {args.timeout:g} s):")
    print(f"  case      {summary(case_times, 1.0, 's')}")
    print(f"  baseline  {summary(base_times, 1.0, 's')}  (all {args.hosts} answering)")
    print(f"  ratio     {summary(ratios, 1.0, '')}")
    verdict = "within" if max(case_times) < args.interval else "OVER"
    print(
        f"  slowest black-holed cycle {max(case_times):.2f} s: {verdict} one "
        f"{args.interval:g} s interval"
    )


class CallbackCapture:
    """An SDK Meter that hands out what it is given: the callbacks rlmetrics registers for its
    observable instruments are kept, so the one the SDK calls at collection can be timed."""

    def __init__(self, meter: Any) -> None:
        self._meter = meter
        self.callbacks: dict[str, Callable[[Any], list[Any]]] = {}

    def create_observable_gauge(self, name: str, callbacks: Any = None, **kwargs: Any) -> Any:
        self.callbacks[name] = callbacks[0]
        return self._meter.create_observable_gauge(name, callbacks=callbacks, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._meter, name)


def bench_collection(args: argparse.Namespace, endpoints: Endpoints) -> None:
    from rlmetrics_ray import configure

    from rlmetrics.testing import isolated_state

    healthy_nodes = nodes(endpoints.ok[: args.hosts])
    # The monitor telemetry starts, as a driver gets it; its first cycle scrapes every endpoint
    # and its timer is an hour out, so the snapshot measured is that real one, fresh throughout.
    # (Chosen inside an outer isolated state: the outermost one resets process settings.)
    with isolated_state():
        configure(nodes=lambda: healthy_nodes, interval_s=3600.0, timeout_s=args.timeout)
        return _collection(args, snapshot_hosts=args.hosts)


def _collection(args: argparse.Namespace, snapshot_hosts: int) -> None:
    import attrs
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from rlmetrics_ray import active_monitor
    from rlmetrics_ray.host_memory import GROUP, USED, observe_used

    import rlmetrics
    from rlmetrics.testing import in_memory_telemetry, isolated_state

    with isolated_state(), in_memory_telemetry() as (_handle, reader):
        monitor = active_monitor()
        assert monitor is not None and monitor.wait_for_cycles(1, 60.0)
        snapshot = monitor.snapshot
        assert len(snapshot.hosts) == snapshot_hosts, (len(snapshot.hosts), snapshot.failures[:3])

        # The family's specs bound on a meter of their own, to reach the callback the SDK calls.
        bench_provider = MeterProvider(shutdown_on_exit=False)
        capture = CallbackCapture(bench_provider.get_meter("rlmetrics-bench"))
        registry = rlmetrics.MetricRegistry()
        registry.declare(
            GROUP, [d.spec for d in rlmetrics.default_registry().declared() if d.group == GROUP]
        )
        registry.bind(capture)
        sdk_callback = capture.callbacks[USED]
        options = CallbackOptions()
        assert len(sdk_callback(options)) == args.hosts

        # Baselines: the least any observable callback does (an Observation per host from
        # (value, attribute dict) pairs made beforehand), and a raw SDK observable gauge pair
        # returning the same observations.
        used_pairs = [(v, dict(a)) for v, a in snapshot.used]

        def minimal() -> list[Any]:
            return [Observation(v, a) for v, a in used_pairs]

        raw_reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[raw_reader], shutdown_on_exit=False)
        raw_meter = provider.get_meter("baseline")
        raw_used, raw_total = minimal(), [Observation(v, dict(a)) for v, a in snapshot.total]
        raw_meter.create_observable_gauge("raw.used", [lambda _o: raw_used], unit="By")
        raw_meter.create_observable_gauge("raw.total", [lambda _o: raw_total], unit="By")

        number = 100

        def per_call(action: Callable[[], object]) -> float:
            return timeit.timeit(action, number=number) / number

        def alternate(
            case: Callable[[], object], base: Callable[[], object]
        ) -> tuple[list[float], list[float]]:
            ours: list[float] = []
            theirs: list[float] = []
            for round_index in range(args.rounds * 3):
                order = [(case, ours), (base, theirs)]
                for action, into in order if round_index % 2 == 0 else order[::-1]:
                    into.append(per_call(action))
            return ours, theirs

        plugin = [per_call(observe_used) for _ in range(args.rounds * 3)]
        wrapped, bare = alternate(lambda: sdk_callback(options), minimal)

        def after_a_cycle() -> object:
            # A new snapshot (as each cycle makes), so its observations are checked afresh.
            monitor._snapshot = attrs.evolve(snapshot, used=tuple([*snapshot.used]))  # a new tuple
            return sdk_callback(options)

        fresh, fresh_bare = alternate(after_a_cycle, minimal)
        monitor._snapshot = snapshot
        whole, raw = alternate(reader.get_metrics_data, raw_reader.get_metrics_data)
        provider.shutdown()
        bench_provider.shutdown()
        registry.release()

    def row(label: str, values: list[float], unit: float, suffix: str) -> None:
        print(f"  {label:<46} {summary(values, unit, suffix)}")

    print(f"collection at {args.hosts} hosts:")
    row("plugin callback (rl.host.memory.used)", plugin, 1e-6, "us")
    row("callback the SDK calls, first after a cycle", fresh, 1e-3, "ms")
    row("  baseline: building the Observations", fresh_bare, 1e-3, "ms")
    row("  ratio", [w / b for w, b in zip(fresh, fresh_bare, strict=True)], 1.0, "")
    row("callback the SDK calls, later in the cycle", wrapped, 1e-3, "ms")
    row("  baseline: building the Observations", bare, 1e-3, "ms")
    row("  ratio", [w / b for w, b in zip(wrapped, bare, strict=True)], 1.0, "")
    row(f"whole collection, {2 * args.hosts} points, rlmetrics", whole, 1e-3, "ms")
    row("  baseline: raw SDK observable gauges", raw, 1e-3, "ms")
    row("  ratio", [w / b for w, b in zip(whole, raw, strict=True)], 1.0, "")


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=1024)
    parser.add_argument("--black-holed", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument(
        "--update-readme", action="store_true", help="put the output into benchmarks/README.md"
    )
    args = parser.parse_args()
    with printed_into_readme("bench-ray" if args.update_readme else None):
        _report(args)


def _report(args: argparse.Namespace) -> None:
    holes = round(args.hosts * args.black_holed)
    endpoints = Endpoints(args.hosts, holes)
    try:
        bench_collection(args, endpoints)
        bench_cycles(args, endpoints, holes)
    finally:
        endpoints.close()


if __name__ == "__main__":
    main()
