from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import rlmetrics
from rlmetrics.testing import in_memory_telemetry


@pytest.fixture
def exporting() -> Iterator[tuple[rlmetrics.Logger, Any]]:
    """A Logger with no backends and telemetry exporting to an in-memory reader."""
    with in_memory_telemetry() as (_handle, reader):
        yield rlmetrics.Logger(backends={}), reader
