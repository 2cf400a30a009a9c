"""What the Gym server middleware costs a request, as ratios to the same app without it.

    python benchmarks/bench_gym_middleware.py [--rounds 100] [--requests 1000] [--http-rounds 60]

Needs the rlmetrics-gym plugin, starlette and uvicorn installed.

Two measurements, each of the same Starlette app (one route returning a short text response)
with and without ``GymServerMetricsMiddleware``, while telemetry exports to an in-memory reader:

- **ASGI**: the app called in-process the way uvicorn calls it (a receive that answers the
  request body, then waits on an event like uvicorn's; a send that drops the messages). This
  isolates the middleware's own cost: two wrapped callables, an object per request, a few
  integer updates (it no longer polls ``receive``: it reads uvicorn's ``disconnected`` flag
  where the server is uvicorn, which this in-process receive is not).
- **HTTP**: real requests from a keep-alive ``http.client`` connection to two uvicorn servers
  on 127.0.0.1 (one per app), what a client of a Gym server sees.

Times are CPU seconds of this process (the client and both servers run in it), so other load
on a shared machine does not count. Rounds alternate A B then B A (so drift hits both sides
equally); each round gives one ratio (with / without), and the min, median and max of those
ratios are reported with the median per-request CPU times. Read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from _harness import printed_into_readme
from rlmetrics_gym.server import GymServerMetricsMiddleware
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from rlmetrics.testing import in_memory_telemetry, isolated_state


async def _verify(_: Request) -> Response:
    return PlainTextResponse("ok")


def build_app() -> Starlette:
    return Starlette(routes=[Route("/items/{item_id}", _verify)])


SCOPE: dict[str, Any] = {
    "type": "http",
    "asgi": {"version": "3.0", "spec_version": "2.3"},
    "http_version": "1.1",
    "method": "GET",
    "scheme": "http",
    "path": "/items/42",
    "raw_path": b"/items/42",
    "root_path": "",
    "query_string": b"",
    "headers": [(b"host", b"127.0.0.1")],
    "client": ("127.0.0.1", 50000),
    "server": ("127.0.0.1", 8000),
}


class _Cycle:
    """uvicorn's request cycle, reduced to what the app sees: the body, then a wait."""

    __slots__ = ("body_sent", "event")

    def __init__(self) -> None:
        self.body_sent = False
        self.event = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        if not self.body_sent:
            self.body_sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.event.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        return None


async def _asgi_round(app: Any, requests: int) -> float:
    """Seconds per request of ``requests`` in-process ASGI calls."""
    start = time.process_time()
    for _ in range(requests):
        cycle = _Cycle()
        await app(dict(SCOPE), cycle.receive, cycle.send)
    return (time.process_time() - start) / requests


def _interleaved(
    measure_base: Callable[[], float], measure_ours: Callable[[], float], rounds: int
) -> tuple[list[float], list[float]]:
    base: list[float] = []
    ours: list[float] = []
    for n in range(rounds):
        if n % 2 == 0:
            base.append(measure_base())
            ours.append(measure_ours())
        else:
            ours.append(measure_ours())
            base.append(measure_base())
    return base, ours


@contextlib.contextmanager
def _serve(app: Any) -> Iterator[int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted sockets only then (as when
    # uvicorn binds the address itself); without it every response waits 40 ms for an ACK.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(
            app, log_level="critical", lifespan="off", access_log=False, timeout_keep_alive=60
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _http_round(conn: http.client.HTTPConnection, requests: int) -> float:
    start = time.process_time()
    for _ in range(requests):
        conn.request("GET", "/items/42")
        response = conn.getresponse()
        if response.read() != b"ok":
            raise RuntimeError("unexpected response")
    return (time.process_time() - start) / requests


def _row(name: str, base: list[float], ours: list[float]) -> str:
    ratios = [o / b for o, b in zip(ours, base, strict=True)]
    overhead = statistics.median(o - b for o, b in zip(ours, base, strict=True))
    return (
        f"{name:<6} {statistics.median(base) * 1e6:>12.1f} {statistics.median(ours) * 1e6:>12.1f}"
        f" {overhead * 1e6:>10.2f} {min(ratios):>7.3f} {statistics.median(ratios):>7.3f}"
        f" {max(ratios):>7.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=100, help="ASGI rounds")
    parser.add_argument("--requests", type=int, default=1000, help="ASGI requests per round")
    parser.add_argument("--http-rounds", type=int, default=60)
    parser.add_argument("--http-requests", type=int, default=200)
    parser.add_argument(
        "--update-readme", action="store_true", help="put the output into benchmarks/README.md"
    )
    args = parser.parse_args()
    with printed_into_readme("bench-gym-middleware" if args.update_readme else None):
        _report(args)


def _report(args: argparse.Namespace) -> None:

    rows: list[str] = []
    with isolated_state(), in_memory_telemetry():
        bare = build_app()
        wrapped = GymServerMetricsMiddleware(build_app())

        loop = asyncio.new_event_loop()
        try:
            for app in (bare, wrapped):  # warm up both
                loop.run_until_complete(_asgi_round(app, 200))
            base, ours = _interleaved(
                lambda: loop.run_until_complete(_asgi_round(bare, args.requests)),
                lambda: loop.run_until_complete(_asgi_round(wrapped, args.requests)),
                args.rounds,
            )
        finally:
            loop.close()
        rows.append(_row("ASGI", base, ours))

        with (
            _serve(build_app()) as bare_port,
            _serve(GymServerMetricsMiddleware(build_app())) as port,
        ):
            bare_conn = http.client.HTTPConnection("127.0.0.1", bare_port, timeout=10)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                _http_round(bare_conn, 50)
                _http_round(conn, 50)
                base, ours = _interleaved(
                    lambda: _http_round(bare_conn, args.http_requests),
                    lambda: _http_round(conn, args.http_requests),
                    args.http_rounds,
                )
            finally:
                bare_conn.close()
                conn.close()
        rows.append(_row("HTTP", base, ours))

    print(
        f"{'path':<6} {'without us':>12} {'with us':>12} {'+us/req':>10} "
        f"{'min':>7} {'median':>7} {'max':>7}"
    )
    print("\n".join(rows))
    print(
        "\nus: median CPU microseconds per request; ratios: with the middleware / without it, "
        "one per round,\nrounds alternating A B / B A; '+us/req' is the median per-round "
        "difference"
    )


if __name__ == "__main__":
    main()
