"""What the Gym request path costs, as ratios to one raw OpenTelemetry ``Counter.add``.

    python benchmarks/bench_gym_request_path.py [--rounds 41] [--number 20000]

The Gym families count per-request events (a request in flight, a connection acquisition, a
resources operation queued and running) as plain integer updates that the exporter reads at
collection, never as an OpenTelemetry call per request. This measures them against the call
they replace: one raw ``Counter.add(1, {destination})`` on the SDK with an in-memory reader.

Cases:

- ``request counts``: what one outbound request counts — in-flight +1, connect_total +1,
  in-flight -1 (the target: at most 0.25 of one ``Counter.add``);
- ``request hooks``: the whole per-request bookkeeping of the trace config and the pool
  connector for a request that gets a pooled connection at once: both trace callbacks, the
  acquisition object, its context variable, the held-connection count;
- ``resources operation counts``: queued +1/-1 and active +1/-1 of one resources operation.

Each round times the case and the baseline back to back, alternating which goes first (A B,
then B A), and keeps the ratio of the two; the min, median and max of the per-round ratios are
reported. Absolute times on a shared 2-core machine are noise; read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import timeit
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any

from _harness import printed_into_readme
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from rlmetrics_gym import _client_aiohttp, http_client, resources

DESTINATION_ATTR = "nemo.gym.http.destination.server.name"
TARGET = 0.25


def ratios(
    case: Callable[[int], float], base: Callable[[int], float], number: int, rounds: int
) -> list[float]:
    """Per-round ratios case/base, alternating the order of the two within a round. Each
    callable runs its body ``number`` times and returns the seconds it took."""
    out = []
    for index in range(rounds):
        if index % 2 == 0:
            ours = case(number)
            theirs = base(number)
        else:
            theirs = base(number)
            ours = case(number)
        out.append(ours / theirs)
    return out


def timed(body: Callable[[], object]) -> Callable[[int], float]:
    """A synchronous body, repeated."""
    return lambda number: timeit.timeit(body, number=number)


def timed_async(
    loop: asyncio.AbstractEventLoop, body: Callable[[], Coroutine[Any, Any, None]]
) -> Callable[[int], float]:
    """An async body awaited ``number`` times inside one coroutine on ``loop``: the way
    aiohttp awaits its trace callbacks."""

    async def batch(number: int) -> None:
        for _ in range(number):
            await body()

    def run(number: int) -> float:
        started = time.perf_counter()
        loop.run_until_complete(batch(number))
        return time.perf_counter() - started

    return run


def measure(number: int, rounds: int) -> list[tuple[str, list[float]]]:
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()], shutdown_on_exit=False)
    raw_counter = provider.get_meter("baseline").create_counter("raw.counter")
    attributes = {DESTINATION_ATTR: "policy_model"}

    def add() -> None:
        raw_counter.add(1, attributes)

    async def add_async() -> None:
        raw_counter.add(1, attributes)

    in_flight, connects = http_client._in_flight, http_client._connects
    destination = http_client.destination_value("policy_model")

    def request_counts() -> None:
        in_flight.add(destination)
        connects.add(destination)
        in_flight.add(destination, -1)

    queued, active = resources._queued, resources._active
    operation = ("verify", "subprocess")

    def operation_counts() -> None:
        queued.add(operation)
        queued.add(operation, -1)
        active.add(operation)
        active.add(operation, -1)

    loop = asyncio.new_event_loop()
    # One pooled connector and connection key, as a real request would have.
    connector = loop.run_until_complete(_connector())
    key = _connection_key()
    on_start, on_done = _client_aiohttp._on_request_start, _client_aiohttp._on_request_done
    current = _client_aiohttp._current
    context = SimpleNamespace()

    async def request_hooks() -> None:
        # What one request that gets a pooled connection at once runs in rlmetrics-gym code:
        # the caller's destination label, both trace callbacks, and the connector's
        # bookkeeping around aiohttp's own connect().
        with http_client.http_destination("policy_model"):
            await on_start(None, context, None)
            acquisition = _client_aiohttp._Acquisition(
                connector, key, http_client.current_destination()
            )
            connects.add(acquisition.destination)
            token = current.set(acquisition)
            current.reset(token)
            connector._rlmetrics_hold(key, 1)  # handed out...
            acquisition.settle()
            connector._rlmetrics_hold(key, -1)  # ...and released
            await on_done(None, context, None)

    try:
        return [
            ("request counts", ratios(timed(request_counts), timed(add), number, rounds)),
            (
                "request hooks",
                ratios(
                    timed_async(loop, request_hooks), timed_async(loop, add_async), number, rounds
                ),
            ),
            (
                "resources operation counts",
                ratios(timed(operation_counts), timed(add), number, rounds),
            ),
        ]
    finally:
        loop.run_until_complete(connector.close())
        loop.close()
        provider.shutdown()


async def _connector() -> Any:
    return _client_aiohttp.PoolMetricsConnector(limit=8)


def _connection_key() -> Any:
    from aiohttp.client_reqrep import ConnectionKey

    # host, port, is_ssl, ssl, proxy, proxy_auth, proxy_headers_hash
    return ConnectionKey("127.0.0.1", 8000, False, True, None, None, None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument(
        "--update-readme", action="store_true", help="put the output into benchmarks/README.md"
    )
    args = parser.parse_args()
    with printed_into_readme("bench-gym-request" if args.update_readme else None):
        _report(args)


def _report(args: argparse.Namespace) -> None:
    rows = measure(args.number, args.rounds)
    print(f"{'case':<30} {'min':>6} {'median':>7} {'max':>6}   (ratio to one raw Counter.add)")
    for name, values in rows:
        print(
            f"{name:<30} {min(values):>6.3f} {statistics.median(values):>7.3f} {max(values):>6.3f}"
        )
    counts = statistics.median(rows[0][1])
    verdict = "meets" if counts <= TARGET else "MISSES"
    print(f"\nrequest counts: median {counts:.3f} {verdict} the {TARGET}x target")


if __name__ == "__main__":
    main()
