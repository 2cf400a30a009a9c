"""Fixtures shared by the rlmetrics-gym tests.

Test modules are named ``test_gym_*`` (and support modules ``gym_support_*``) so none collide
with the core's or another plugin's modules when CI collects every folder in one pytest run.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest

from rlmetrics.registry import MetricRegistry
from rlmetrics.testing import in_memory_telemetry, isolated_state, load_hypothesis_profile

load_hypothesis_profile()

# Every family module is imported here, before any test isolates the registry, so their
# declarations live in the default registry that every isolated copy starts from.
for _module in (
    "rollouts",
    "health",
    "resources",
    "driver",
    "startup",
    "http_client",
    "runtime",
    "server",
    "memory",
    "agent",
):
    importlib.import_module(f"rlmetrics_gym.{_module}")


@pytest.fixture(autouse=True)
def isolated() -> Iterator[MetricRegistry]:
    """Fresh registry, plugin, warn-once and process state (counts in flight, server totals,
    samplers, the process's choices) per test."""
    with isolated_state() as registry:
        yield registry


@pytest.fixture
def telemetry() -> Iterator[tuple[Any, Any]]:
    """Started telemetry with an in-memory reader on isolated state: ``(handle, reader)``."""
    with isolated_state(), in_memory_telemetry() as started:
        yield started
