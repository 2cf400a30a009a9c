"""Pytest support for the test suites of trainer adapters (rlmetrics-transformers, -lightning,
-accelerate, Ray Train): each needs its trainer installed, which only one tox env does.

- :func:`ignore_unless_installed`: leave a folder's tests uncollected where its trainer is
  missing, or fail where the environment says it must be there
  (``RLMETRICS_REQUIRE_TRAINERS=1``, the ``integrations`` env), so a broken install cannot
  pass for a missing one.
- :func:`isolated` and :func:`telemetry`: the fixtures every such suite uses, imported into its
  ``conftest.py`` (``from rlmetrics.testing.trainers import isolated, telemetry``).
- :class:`Recorder` and the :func:`recorder` fixture: a queued backend (it writes on a thread
  of its own, as W&B, MLflow and TensorBoard do) offered as ``"recorder"``; each instance is
  one tracker run, holding its rows and how often it was finished, to hold an adapter's
  lifecycle to "one run per trainer, finished once".
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import pytest

from ..hookspecs import hookimpl
from ..plugins import register
from . import in_memory_telemetry, isolated_state

__all__ = [
    "REQUIRE_TRAINERS_ENV",
    "Recorder",
    "ignore_unless_installed",
    "isolated",
    "recorder",
    "telemetry",
]

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


class Recorder:
    """A queued tracker: each instance is one run (``Recorder.made`` lists them in order),
    holding ``rows`` (``(step, prefix, metrics)``), ``hyperparams``, how often it was
    ``finished`` and the ``threads`` it wrote on."""

    made: ClassVar[list[Recorder]] = []

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, dict[str, Any]]] = []
        self.hyperparams: list[dict[str, Any]] = []
        self.finished = 0
        self.threads: set[str] = set()
        Recorder.made.append(self)

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        self.threads.add(threading.current_thread().name)
        self.rows.append((step, prefix, dict(metrics)))

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        self.hyperparams.append(dict(params))

    def finish(self) -> None:
        self.finished += 1


class _OffersRecorder:
    @hookimpl
    def register_backends(self, register: Any) -> None:
        register("recorder", Recorder)


@pytest.fixture
def recorder() -> Iterator[type[Recorder]]:
    """The ``recorder`` backend offered to Loggers (inside :func:`isolated`'s state); yields
    :class:`Recorder`, whose ``made`` starts empty."""
    Recorder.made.clear()
    register(_OffersRecorder(), "offers-recorder")
    yield Recorder
    Recorder.made.clear()
