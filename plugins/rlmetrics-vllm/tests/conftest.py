"""Fixtures for the rlmetrics-vllm tests: vLLM 0.32.0's real exposition and readings derived
from it, a real prometheus_client registry holding vLLM's families, real HTTP servers on
127.0.0.1, and started telemetry with an in-memory reader.

Test modules are named ``test_vllm_*`` and the support module ``vllm_support`` so none can
collide with the core's modules when CI collects ``tests`` and this folder in one pytest run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# The family modules are imported here, before any test isolates the registry, so their
# declarations live in the default registry that every isolated copy starts from.
import rlmetrics_vllm.family
import rlmetrics_vllm.gen_ai  # noqa: F401
from prometheus_client import CollectorRegistry, start_http_server
from vllm_support import FIXTURE, TextServer, VllmRegistry, render_exposition

from rlmetrics.registry import MetricRegistry
from rlmetrics.testing import in_memory_telemetry, isolated_state, load_hypothesis_profile

load_hypothesis_profile()


@pytest.fixture(autouse=True)
def isolated() -> Iterator[MetricRegistry]:
    """Fresh registry, plugin, warn-once and process state (the mean gauges' steps) per test."""
    with isolated_state() as registry:
        yield registry


@pytest.fixture(scope="session")
def render() -> Callable[..., str]:
    """:func:`render_exposition`, for tests (session-scoped, so hypothesis can use it)."""
    return render_exposition


@pytest.fixture(scope="session")
def fixture_text() -> str:
    return FIXTURE.read_text()


@pytest.fixture
def vllm_registry() -> VllmRegistry:
    return VllmRegistry()


# -- real HTTP servers on 127.0.0.1 ------------------------------------------------------------


@pytest.fixture
def serve_registry() -> Iterator[Callable[[CollectorRegistry], str]]:
    """Serve a registry with prometheus_client's own server; returns its /metrics URL."""
    servers: list[tuple[Any, threading.Thread]] = []

    def serve(registry: CollectorRegistry) -> str:
        server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.server_port}/metrics"

    yield serve
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def text_server(fixture_text: str) -> Iterator[TextServer]:
    server = TextServer(fixture_text)
    yield server
    server.close()


# -- telemetry -----------------------------------------------------------------------------------


@pytest.fixture
def telemetry() -> Iterator[tuple[Any, Any]]:
    """Started telemetry with an in-memory reader on isolated state: ``(handle, reader)``."""
    with isolated_state(), in_memory_telemetry() as started:
        yield started
