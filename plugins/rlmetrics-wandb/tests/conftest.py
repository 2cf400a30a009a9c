"""W&B runs for the tests: offline, in the test's tmp dir, nothing written elsewhere.

They are read back from the run's own transaction log with ``wandb leet inspect --json``
(the reader W&B ships); see ``wandb_helpers.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from wandb_helpers import offline_wandb

from rlmetrics.registry import MetricRegistry
from rlmetrics.testing import isolated_state, load_hypothesis_profile

load_hypothesis_profile()


@pytest.fixture(autouse=True)
def wandb_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    offline_wandb(monkeypatch, tmp_path / "wandb-home")


@pytest.fixture(autouse=True)
def isolated() -> Iterator[MetricRegistry]:
    """Fresh registry, plugin and warn-once state per test."""
    with isolated_state() as registry:
        yield registry
