"""W&B runs for the tests: offline, in the test's tmp dir, nothing written elsewhere.

They are read back from the run's own transaction log with ``wandb leet inspect --json``
(the reader W&B ships); see ``wandb_helpers.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rlmetrics.registry import MetricRegistry
from rlmetrics.testing import isolated_state

# Offline and quiet: no network, no git or code capture, no console capture, no system
# stats thread, and no config/cache written outside the test's directory.
_WANDB_ENV = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "WANDB_DISABLE_GIT": "true",
    "WANDB_DISABLE_CODE": "true",
    "WANDB_SAVE_CODE": "false",
    "WANDB_CONSOLE": "off",
    "WANDB_X_DISABLE_STATS": "true",
    "WANDB_X_DISABLE_MACHINE_INFO": "true",
}


@pytest.fixture(autouse=True)
def wandb_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in _WANDB_ENV.items():
        monkeypatch.setenv(name, value)
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


@pytest.fixture(autouse=True)
def isolated() -> Iterator[MetricRegistry]:
    """Fresh registry, plugin and warn-once state per test."""
    with isolated_state() as registry:
        yield registry
