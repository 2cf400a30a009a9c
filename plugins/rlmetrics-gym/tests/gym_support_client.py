"""Test support for the part-1 Gym families (rollouts, health, resources, driver, startup,
HTTP client): reading points back, bounded async waits, a real aiohttp server on 127.0.0.1
whose requests can be held, a process-pool worker that crashes, and a real installed
distribution (a ``.dist-info`` on ``sys.path``) offering health checks through the entry point.

Named ``gym_support_client*`` so it cannot collide with another plugin's (or gym part 2's) test
modules.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiohttp import web

from rlmetrics.testing import Point, points

__all__ = [
    "DEADLINE_S",
    "HeldServer",
    "eventually",
    "find",
    "held_server",
    "install_distribution",
    "run",
    "total",
    "value_of",
]

DEADLINE_S = 10.0
T = TypeVar("T")


def run(coroutine: Awaitable[T], timeout_s: float = DEADLINE_S) -> T:
    """Run ``coroutine`` on a fresh event loop, failing the test if it takes longer than
    ``timeout_s`` (so a broken test cannot hang the suite)."""

    async def bounded() -> T:
        return await asyncio.wait_for(coroutine, timeout_s)

    return asyncio.run(bounded())


async def eventually(
    condition: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S
) -> None:
    """Yield to the loop until ``condition()`` holds, failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.002)


def find(found: list[Point], name: str, **attributes: Any) -> list[Point]:
    """Every point named ``name`` whose attributes include ``attributes``."""
    return [
        p
        for p in found
        if p.name == name and all(p.attributes.get(k) == v for k, v in attributes.items())
    ]


def value_of(reader: Any, name: str, **attributes: Any) -> float | None:
    """The summed value of the matching sum/gauge points in a fresh collection (None: none)."""
    matches = find(points(reader), name, **attributes)
    return None if not matches else sum(p.value or 0 for p in matches)


def total(found: list[Point], name: str, **attributes: Any) -> tuple[int, float]:
    """(count, sum) over the matching histogram points."""
    matches = find(found, name, **attributes)
    return sum(p.count or 0 for p in matches), sum(p.sum or 0.0 for p in matches)


# -- a real aiohttp server on 127.0.0.1 ----------------------------------------------------------


class HeldServer:
    """An aiohttp.web server: ``/hold`` answers only once :meth:`release` is called (each
    arrival is counted first), ``/fast`` answers at once, ``/redirect`` sends to ``/fast``."""

    def __init__(self) -> None:
        self.arrived = 0
        self._release = asyncio.Event()
        self.url = ""

    def release(self) -> None:
        self._release.set()

    async def _hold(self, _request: web.Request) -> web.Response:
        self.arrived += 1
        await self._release.wait()
        return web.Response(text="held")

    async def _fast(self, _request: web.Request) -> web.Response:
        return web.Response(text="fast")

    async def _redirect(self, _request: web.Request) -> web.Response:
        raise web.HTTPFound("/fast")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/hold", self._hold)
        app.router.add_get("/fast", self._fast)
        app.router.add_get("/redirect", self._redirect)
        return app


@asynccontextmanager
async def held_server() -> AsyncIterator[HeldServer]:
    """Serve a :class:`HeldServer` on 127.0.0.1 (a free port) for the block."""
    server = HeldServer()
    runner = web.AppRunner(server.app(), handle_signals=False)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    site = web.SockSite(runner, sock)
    await site.start()
    server.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        yield server
    finally:
        server.release()
        await runner.cleanup()


# -- a real installed distribution offering health checks ----------------------------------------


def install_distribution(
    root: Path, name: str, modules: dict[str, str], entry_points: dict[str, str]
) -> None:
    """Write ``modules`` and a ``<name>-1.0.dist-info`` with ``entry_points`` (in the
    ``rlmetrics_gym`` group) under ``root``, which the caller puts on ``sys.path``:
    ``importlib.metadata`` then finds it exactly as it finds a pip-installed distribution."""
    for module, source in modules.items():
        (root / f"{module}.py").write_text(source)
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = "".join(f"{ep} = {target}\n" for ep, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[rlmetrics_gym]\n{lines}")


@pytest.fixture
def distribution_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on ``sys.path`` for :func:`install_distribution`; its modules are unloaded
    afterwards."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    before = set(sys.modules)
    yield root
    for module in set(sys.modules) - before:
        if getattr(sys.modules[module], "__file__", "") and str(root) in str(
            sys.modules[module].__file__
        ):
            del sys.modules[module]
