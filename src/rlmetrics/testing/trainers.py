"""Pytest support for the test suites of trainer adapters (rlmetrics-transformers, -lightning,
-accelerate, Ray Train): each needs its trainer installed, which only one tox env does.

- :func:`ignore_unless_installed`: leave a folder's tests uncollected where its trainer is
  missing, or fail where the environment says it must be there
  (``RLMETRICS_REQUIRE_TRAINERS=1``, the ``integrations`` env), so a broken install cannot
  pass for a missing one.
- :func:`isolated` and :func:`telemetry`: the fixtures every such suite uses, imported into its
  ``conftest.py`` (``from rlmetrics.testing.trainers import isolated, telemetry``).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from typing import Any

import pytest

from . import in_memory_telemetry, isolated_state

__all__ = ["REQUIRE_TRAINERS_ENV", "ignore_unless_installed", "isolated", "telemetry"]

#: Set to 1 where the trainers must be installed: a missing one fails instead of skipping.
REQUIRE_TRAINERS_ENV = "RLMETRICS_REQUIRE_TRAINERS"


def ignore_unless_installed(*modules: str, why: str) -> list[str]:
    """What a ``conftest.py`` assigns to ``collect_ignore_glob``: its folder's test modules
    when one of ``modules`` is not installed (``why`` says what installs them), else nothing;
    with ``RLMETRICS_REQUIRE_TRAINERS=1``, a missing module raises instead.

    A folder-level ignore rather than a skip raised in the conftest, which pytest cannot take
    when the folder is named on its command line.
    """
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if not missing:
        return []
    if os.environ.get(REQUIRE_TRAINERS_ENV) == "1":
        raise ImportError(f"{REQUIRE_TRAINERS_ENV}=1 but {missing} are not installed ({why})")
    return ["test_*.py"]


@pytest.fixture(autouse=True)
def isolated() -> Iterator[None]:
    """Every test gets its own copy of the registry, plugin and warn-once state."""
    with isolated_state():
        yield


@pytest.fixture
def telemetry() -> Iterator[tuple[Any, Any]]:
    """Started telemetry with an in-memory reader: ``(handle, reader)``."""
    with in_memory_telemetry() as started:
        yield started
