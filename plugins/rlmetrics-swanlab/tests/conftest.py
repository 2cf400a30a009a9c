"""SwanLab runs for the tests: offline, in the test's tmp dir, no terminal capture, no
hardware monitor, nothing written outside the test's directory.

They are read back from the run folder: its plain files (``files/config.yaml``, the text media)
and its record log, through SwanLab's own reader (``swanlab_helpers.py``; an internal module,
hence the plugin's pin to SwanLab 0.10).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlmetrics.registry import MetricRegistry
from rlmetrics.testing import isolated_state, load_hypothesis_profile

load_hypothesis_profile()


@pytest.fixture(autouse=True)
def swanlab_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SWANLAB_MODE", "offline")
    monkeypatch.setenv("SWANLAB_ROOT", str(tmp_path / "swanlab-home"))
    monkeypatch.setenv("DO_NOT_TRACK", "1")
    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)


@pytest.fixture
def swanlab_config(tmp_path: Path) -> dict[str, Any]:
    """The backend's config for an offline run in ``tmp_path / "swanlog"``."""
    import swanlab

    settings = swanlab.Settings(
        terminal={"proxy_type": "none"},
        probe={"monitor": False, "hardware": False, "git": False, "requirements": False},
    )
    return {
        "project": "rlmetrics-test",
        "mode": "offline",
        "log_dir": tmp_path / "swanlog",
        "init_kwargs": {"settings": settings},
    }


@pytest.fixture(autouse=True)
def isolated() -> Iterator[MetricRegistry]:
    with isolated_state() as registry:
        yield registry
