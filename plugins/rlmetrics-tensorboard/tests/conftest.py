"""Fresh registry, plugin and warn-once state per test; event files in the test's tmp dir."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rlmetrics.registry import MetricRegistry
from rlmetrics.testing import isolated_state, load_hypothesis_profile

load_hypothesis_profile()


@pytest.fixture(autouse=True)
def isolated() -> Iterator[MetricRegistry]:
    with isolated_state() as registry:
        yield registry
