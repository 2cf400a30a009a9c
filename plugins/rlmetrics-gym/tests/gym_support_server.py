"""Test support for the Gym server, runtime and memory families: a real uvicorn server on
127.0.0.1 in a thread, a Starlette app whose requests can be held before routing (so a client
can leave at a known moment), raw-socket and ``http.client`` clients, and counters read back
from the in-memory reader.

A module of its own (named ``gym_support_*`` so it cannot collide with another plugin's test
modules); the fixtures built on it are defined here and imported by the test modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from rlmetrics_gym.server import GymServerMetricsMiddleware
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route

from rlmetrics import testing
from rlmetrics.testing import Point, points

__all__ = [
    "HOLD_HEADER",
    "ROLLOUT_PREFIX",
    "Holds",
    "Served",
    "build_app",
    "counter_values",
    "delta",
    "get",
    "hold_and_leave",
    "serve",
    "serve_test_app",
    "wait_equal",
    "wait_until",
]

HOLD_HEADER = "x-hold"
ROLLOUT_PREFIX = r"/rollouts/[^/]+"
DEADLINE_S = 10.0


def wait_until(
    condition: Callable[[], bool], timeout_s: float = DEADLINE_S, what: str = ""
) -> None:
    """:func:`rlmetrics.testing.wait_until` with these tests' bound."""
    testing.wait_until(condition, timeout_s, what)


def wait_equal(read: Callable[[], Any], expected: Any, timeout_s: float = DEADLINE_S) -> None:
    """Poll ``read()`` until it equals ``expected``; the failure shows the last value read."""
    last: list[Any] = [None]

    def matches() -> bool:
        last[0] = read()
        return bool(last[0] == expected)

    try:
        wait_until(matches, timeout_s)
    except AssertionError:
        raise AssertionError(f"expected {expected!r}, last read {last[0]!r}") from None


# -- holding requests before routing -------------------------------------------------------------


@dataclass
class _Hold:
    entered: threading.Event = field(default_factory=threading.Event)
    release: asyncio.Event | None = None
    loop: asyncio.AbstractEventLoop | None = None


class Holds:
    """Requests carrying ``x-hold: <token>`` wait (before routing) until the test releases
    them, so a client can disconnect while its request is known to be in the server."""

    def __init__(self) -> None:
        self._holds: dict[str, _Hold] = {}
        self._lock = threading.Lock()

    def _get(self, token: str) -> _Hold:
        with self._lock:
            return self._holds.setdefault(token, _Hold())

    def entered(self, token: str) -> threading.Event:
        return self._get(token).entered

    def release(self, token: str) -> None:
        hold = self._get(token)
        wait_until(lambda: hold.loop is not None, what=f"hold {token} entered")
        assert hold.loop is not None and hold.release is not None
        hold.loop.call_soon_threadsafe(hold.release.set)

    def middleware(self, app: Any) -> Any:
        async def holding(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                token = dict(scope["headers"]).get(HOLD_HEADER.encode())
                if token is not None:
                    hold = self._get(token.decode())
                    hold.release = asyncio.Event()
                    hold.loop = asyncio.get_running_loop()
                    hold.entered.set()
                    await asyncio.wait_for(hold.release.wait(), DEADLINE_S)
            await app(scope, receive, send)

        return holding


def _strip_rollout_prefix(app: Any) -> Any:
    """What a Gym server's rollout middleware does: route ``/rollouts/<id>/x`` as ``/x`` (on a
    copy of the scope, so the outer middleware still sees the raw path)."""

    async def stripping(scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path.startswith("/rollouts/"):
            rest = path.split("/", 3)[3] if path.count("/") >= 3 else ""
            scope = {**scope, "path": "/" + rest, "raw_path": ("/" + rest).encode()}
        await app(scope, receive, send)

    return stripping


# -- the app ---------------------------------------------------------------------------------------


async def _ok(_: Request) -> Response:
    return PlainTextResponse("ok")


async def _item(request: Request) -> Response:
    return JSONResponse({"item_id": request.path_params["item_id"]})


async def _thing(request: Request) -> Response:
    return JSONResponse({"thing_id": request.path_params["thing_id"]})


async def _teapot(_: Request) -> Response:
    raise HTTPException(status_code=418, detail="handled")


class HandlerFailed(RuntimeError):
    """What the /boom handler raises."""


async def _boom(_: Request) -> Response:
    raise HandlerFailed("unhandled on purpose")


SSE_EVENTS = 2000  # bounds the stream: at 5 ms per event, 10 s if the client never leaves


async def _events(_: Request) -> Response:
    async def stream() -> AsyncIterator[str]:
        for n in range(SSE_EVENTS):
            yield f"data: {n}\n\n"
            await asyncio.sleep(0.005)

    return StreamingResponse(stream(), media_type="text/event-stream")


def build_app(holds: Holds, *, rollout_prefix: str | None = ROLLOUT_PREFIX) -> Any:
    """Starlette app (held requests wait before routing) wrapped in the Gym middleware."""
    starlette = Starlette(
        routes=[
            Route("/ok", _ok),
            Route("/items/{item_id}", _item),
            Route("/teapot", _teapot),
            Route("/boom", _boom),
            Route("/events", _events),
            Mount("/api", routes=[Route("/things/{thing_id:int}", _thing)]),
        ]
    )
    inner = _strip_rollout_prefix(holds.middleware(starlette))
    return GymServerMetricsMiddleware(inner, rollout_prefix=rollout_prefix, routes=starlette.routes)


# -- a real uvicorn server -----------------------------------------------------------------------


@dataclass
class Served:
    port: int
    server: uvicorn.Server

    def connections(self) -> int:
        """Open client connections, as uvicorn sees them (a dropped client leaves the set when
        uvicorn has processed its disconnect)."""
        return len(self.server.server_state.connections)


@contextlib.contextmanager
def serve(app: Any) -> Iterator[Served]:
    """Run ``app`` under uvicorn on 127.0.0.1 (a free port) in a thread."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY on accepted sockets only then (as when
    # uvicorn binds the address itself); without it every response waits 40 ms for an ACK.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="critical", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), what="uvicorn start")
        assert server.started, "uvicorn did not start"
        yield Served(port, server)
    finally:
        server.should_exit = True
        thread.join(DEADLINE_S)
        sock.close()
        assert not thread.is_alive(), "uvicorn did not stop"


@contextlib.contextmanager
def serve_test_app() -> Iterator[tuple[Served, Holds]]:
    """The test app (:func:`build_app`) under a real uvicorn on 127.0.0.1: ``(served, holds)``."""
    holds = Holds()
    with serve(build_app(holds)) as running:
        yield running, holds


# -- clients ---------------------------------------------------------------------------------------


def get(port: int, path: str) -> tuple[int, bytes]:
    """One GET with http.client; ``(status, body)``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE_S)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def hold_and_leave(served: Served, holds: Holds, paths: list[str]) -> None:
    """Send each GET (held before routing), close every client once all are in the server,
    wait until uvicorn has seen the disconnects, then let the requests go on."""
    clients: list[tuple[str, socket.socket]] = []
    try:
        for n, path in enumerate(paths):
            token = f"{path}#{n}#{time.monotonic_ns()}"
            client = socket.create_connection(("127.0.0.1", served.port), timeout=DEADLINE_S)
            client.sendall(
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{HOLD_HEADER}: {token}\r\n\r\n".encode()
            )
            clients.append((token, client))
        for token, _ in clients:
            assert holds.entered(token).wait(DEADLINE_S), f"request {token} never reached the app"
    finally:
        for _, client in clients:
            client.close()
    wait_until(lambda: served.connections() == 0, what="uvicorn to see the clients leave")
    for token, _ in clients:
        holds.release(token)


# -- reading back ----------------------------------------------------------------------------------

Key = tuple[str, tuple[tuple[str, Any], ...]]


def counter_values(reader: Any, prefix: str = "gym.server.") -> dict[Key, float]:
    """Every sum point whose name starts with ``prefix``: {(name, sorted attributes): value}."""
    found: list[Point] = points(reader)
    return {
        (p.name, tuple(sorted(p.attributes.items()))): float(p.value)
        for p in found
        if p.name.startswith(prefix) and p.kind == "sum" and p.value is not None
    }


def delta(before: Mapping[Key, float], after: Mapping[Key, float]) -> dict[Key, float]:
    """What changed between two readings (the observables are process-wide cumulative totals,
    so every test reads its own effect as a difference)."""
    return {
        key: value - before.get(key, 0.0)
        for key, value in after.items()
        if value != before.get(key, 0.0)
    }
