"""Fixtures for the rlmetrics-ray tests: exposition servers on 127.0.0.1, started telemetry
with an in-memory reader, and a clean slate of the plugin's process state for every test.

Test modules are named ``test_ray_*`` and support modules ``ray_support*`` so none collide
with another folder's when CI collects every plugin's tests in one pytest run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

# The family module is imported here, before any test isolates the registry, so its
# declarations live in the default registry that every isolated copy starts from.
import rlmetrics_ray.gpu
import rlmetrics_ray.host_memory  # noqa: F401
from ray_support import ExpositionServer
from rlmetrics_ray import config

from rlmetrics.testing import (
    BlackHole,
    in_memory_telemetry,
    isolated_state,
    load_hypothesis_profile,
)

load_hypothesis_profile()


@pytest.fixture(autouse=True)
def clean_plugin_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test runs in isolated state (the outermost: no settings, worker groups or monitor
    leak from one test into the next, by the plugin's process-state resets), and the
    environment's settings never reach a test that does not set them itself."""
    for name in (config.ENABLED_ENV, config.GPUS_ENV, config.INTERVAL_ENV, config.TIMEOUT_ENV):
        monkeypatch.delenv(name, raising=False)
    with isolated_state():
        yield
        monitor = config.active_monitor()
    assert monitor is None or not monitor.running, (
        "the host memory monitor's thread outlived its test"
    )


@pytest.fixture
def serve() -> Iterator[Callable[..., ExpositionServer]]:
    """Start exposition servers on 127.0.0.1 (``serve(text, mode=...)``); all closed after."""
    servers: list[ExpositionServer] = []

    def start(*args: Any, **kwargs: Any) -> ExpositionServer:
        server = ExpositionServer(*args, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    hole = BlackHole()
    yield hole
    hole.close()


@pytest.fixture
def telemetry() -> Iterator[tuple[Any, Any]]:
    """Started telemetry with an in-memory reader on isolated state: ``(handle, reader)``."""
    with isolated_state(), in_memory_telemetry() as started:
        yield started
