"""Every tracker at once (JSONL, W&B offline, MLflow on sqlite, TensorBoard, SwanLab offline),
read back from each real store. Runs in the tox env ``trackers``, where all four tracker
distributions are installed; elsewhere the folder is not collected.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

_NEEDED = ("rlmetrics_wandb", "rlmetrics_mlflow", "rlmetrics_tensorboard", "rlmetrics_swanlab")
if not all(importlib.util.find_spec(name) for name in _NEEDED):
    collect_ignore_glob = ["test_*.py"]
else:
    # The plugins' own read-back helpers (each tracker's reader), imported by module name.
    root = Path(__file__).resolve().parents[2] / "plugins"
    for plugin in ("wandb", "mlflow", "tensorboard", "swanlab"):
        sys.path.insert(0, str(root / f"rlmetrics-{plugin}" / "tests"))


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No tracker reaches the network or writes outside the test's directory."""
    from wandb_helpers import offline_wandb

    offline_wandb(monkeypatch, tmp_path / "wandb-home")
    monkeypatch.setenv("SWANLAB_MODE", "offline")
    monkeypatch.setenv("SWANLAB_ROOT", str(tmp_path / "swanlab-home"))
    monkeypatch.setenv("DO_NOT_TRACK", "1")
    for name in ("SWANLAB_API_KEY", "MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def every_backend(migrated_store: Path, tmp_path: Path) -> dict[str, Any]:
    """``Logger(backends=...)`` with every tracker, all writing under ``tmp_path``."""
    import shutil

    import swanlab

    db = tmp_path / "mlflow.db"
    if not db.exists():
        shutil.copyfile(migrated_store, db)
    settings = swanlab.Settings(
        terminal={"proxy_type": "none"},
        probe={"monitor": False, "hardware": False, "git": False, "requirements": False},
    )
    return {
        "jsonl": {"path": tmp_path / "metrics.jsonl"},
        "wandb": {"project": "rlmetrics-test", "dir": tmp_path / "wandb"},
        "mlflow": {
            "tracking_uri": f"sqlite:///{db}",
            "experiment_name": "grpo",
            "artifact_location": (tmp_path / "artifacts").as_uri(),
        },
        "tensorboard": {"root_dir": tmp_path / "runs"},
        "swanlab": {
            "project": "rlmetrics-test",
            "mode": "offline",
            "log_dir": tmp_path / "swanlog",
            "init_kwargs": {"settings": settings},
        },
    }
