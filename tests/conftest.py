from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rlmetrics.registry import MetricRegistry
from rlmetrics.testing import in_memory_telemetry, isolated_state, load_hypothesis_profile

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
