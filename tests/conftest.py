"""Fixtures every core test folder shares: isolated registry and plugin state, started
telemetry with an in-memory reader, Debian's real Prometheus server on 127.0.0.1 (and its
binaries), the liveness clock moved by hand, a backend that hangs until released.

Test modules carry their folder in their name (``test_tools_*``, ``test_cli_*``) where a bare
name would collide with another folder's, since CI collects every folder in one pytest run.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rlmetrics import hookimpl
from rlmetrics.plugins import register
from rlmetrics.registry import MetricRegistry
from rlmetrics.testing import in_memory_telemetry, isolated_state, load_hypothesis_profile

if TYPE_CHECKING:
    from exporters._peers import PrometheusServer

load_hypothesis_profile()


@pytest.fixture(autouse=True)
def isolated() -> Iterator[MetricRegistry]:
    """Every test gets its own copy of the registry, plugin and warn-once state."""
    with isolated_state() as registry:
        yield registry


@pytest.fixture
def telemetry() -> Iterator[tuple[Any, Any]]:
    """Started telemetry with an in-memory reader: ``(handle, reader)``."""
    with in_memory_telemetry() as started:
        yield started


def _prometheus_tool(name: str) -> str:
    """The path of Debian's ``prometheus`` or ``promtool``. Skips the test without it unless
    ``RLMETRICS_REQUIRE_PROMETHEUS=1`` (CI), where it fails instead."""
    binary = shutil.which(name)
    if binary is None:
        reason = (
            f"the {name!r} binary is not on PATH (Debian: apt-get install -y "
            "--no-install-recommends prometheus)"
        )
        if os.environ.get("RLMETRICS_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(f"RLMETRICS_REQUIRE_PROMETHEUS=1 but {reason}")
        pytest.skip(reason)
    return binary


@pytest.fixture
def prometheus_binary() -> str:
    """Debian's ``prometheus`` (skips without it, fails in CI)."""
    return _prometheus_tool("prometheus")


@pytest.fixture
def promtool() -> str:
    """Debian's ``promtool`` (skips without it, fails in CI)."""
    return _prometheus_tool("promtool")


@pytest.fixture
def alertmanager_binary() -> str:
    """Debian's ``prometheus-alertmanager`` (upstream's ``alertmanager`` will do). Skips the
    test without it unless ``RLMETRICS_REQUIRE_ALERTMANAGER=1`` (CI), where it fails."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        reason = (
            "no 'prometheus-alertmanager' on PATH (Debian: apt-get install -y "
            "--no-install-recommends prometheus-alertmanager)"
        )
        if os.environ.get("RLMETRICS_REQUIRE_ALERTMANAGER") == "1":
            pytest.fail(f"RLMETRICS_REQUIRE_ALERTMANAGER=1 but {reason}")
        pytest.skip(reason)
    return binary


@pytest.fixture
def prometheus_server(
    tmp_path: Path, prometheus_binary: str
) -> Iterator[Callable[[tuple[str, int]], PrometheusServer]]:
    """``prometheus_server((host, port))`` starts Debian's prometheus scraping that target
    every second. Skips without the binary unless ``RLMETRICS_REQUIRE_PROMETHEUS=1`` (CI)."""
    # Imported here: _peers needs grpcio, which an env without the exporters (wheels) lacks.
    from exporters._peers import PrometheusServer

    binary = prometheus_binary
    started: list[PrometheusServer] = []

    def start(target: tuple[str, int]) -> PrometheusServer:
        workdir = tmp_path / f"prometheus-{len(started)}"
        workdir.mkdir()
        server = PrometheusServer(binary, workdir)
        started.append(server)
        return server.start(target)

    try:
        yield start
    finally:
        for server in started:
            server.stop()


class FakeClock:
    """Unix time that moves only when the test says so."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The liveness state's clock (step timestamps, the health path's now), moved by hand."""
    from rlmetrics import liveness

    fake = FakeClock()
    monkeypatch.setattr(liveness, "clock", fake)
    return fake


class Blocking:
    """A tracker that hangs on its first row until ``release`` is set; ``entered`` says it
    got there."""

    entered = threading.Event()
    release = threading.Event()

    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        self.entered.set()
        self.release.wait(30)

    def finish(self) -> None:
        pass


class _OffersBlocking:
    @hookimpl
    def register_backends(self, register: Any) -> None:
        register("blocking", Blocking)


@pytest.fixture
def blocking_backend() -> Iterator[type[Blocking]]:
    """The ``blocking`` backend offered to Loggers; released at the end of the test."""
    Blocking.entered.clear()
    Blocking.release.clear()
    register(_OffersBlocking(), "offers-blocking")
    yield Blocking
    Blocking.release.set()
