"""A real sqlite tracking store per test, copied from one migrated template.

Creating an MLflow sqlite store runs its migrations (about 3 s); every test gets its own
copy of one store migrated once per session, so tests stay independent and fast.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlmetrics.registry import MetricRegistry
from rlmetrics.testing import isolated_state, load_hypothesis_profile

load_hypothesis_profile()

_MLFLOW_ENV = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_EXPERIMENT_NAME",
    "MLFLOW_EXPERIMENT_ID",
    "MLFLOW_RUN_ID",
    "MLFLOW_RUN_NAME",
)


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow-template") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def tracking_uri(migrated_store: Path, tmp_path: Path) -> str:
    """``sqlite:///<tmp>/mlflow.db``, a fresh migrated store for this test."""
    db = tmp_path / "mlflow.db"
    shutil.copyfile(migrated_store, db)
    return f"sqlite:///{db}"


@pytest.fixture(autouse=True)
def clean_mlflow_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _MLFLOW_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def isolated() -> Iterator[MetricRegistry]:
    """Fresh registry, plugin and warn-once state per test."""
    with isolated_state() as registry:
        yield registry
