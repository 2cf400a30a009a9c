"""Fixtures every core test folder shares: isolated registry and plugin state, started
telemetry with an in-memory reader, and Debian's real Prometheus server on 127.0.0.1.

Test modules carry their folder in their name (``test_tools_*``, ``test_cli_*``) where a bare
name would collide with another folder's, since CI collects every folder in one pytest run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

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


@pytest.fixture
def prometheus_server(tmp_path: Path) -> Iterator[Callable[[tuple[str, int]], PrometheusServer]]:
    """``prometheus_server((host, port))`` starts Debian's prometheus scraping that target
    every second. Skips without the binary unless ``RLMETRICS_REQUIRE_PROMETHEUS=1`` (CI)."""
    # Imported here: _peers needs grpcio, which an env without the exporters (wheels) lacks.
    from exporters._peers import REQUIRE_PROMETHEUS_ENV, PrometheusServer

    binary = shutil.which("prometheus")
    if binary is None:
        reason = (
            "the 'prometheus' server binary is not on PATH (Debian: apt-get install -y "
            "--no-install-recommends prometheus)"
        )
        if os.environ.get(REQUIRE_PROMETHEUS_ENV) == "1":
            pytest.fail(f"{REQUIRE_PROMETHEUS_ENV}=1 but {reason}")
        pytest.skip(reason)
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
