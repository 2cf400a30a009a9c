"""The trace UIs, each started once for its module on 127.0.0.1: skipped when the package is
not installed, unless ``RLMETRICS_REQUIRE_TRACEUI=1`` (the ``traceui`` tox env) makes that a
failure."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ._servers import PHOENIX_LAUNCHER, ServerProcess, free_port

REQUIRED = os.environ.get("RLMETRICS_REQUIRE_TRACEUI") == "1"


def _installed(module: str) -> bool:
    try:  # find_spec of a submodule imports its parent, which may be missing itself
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _need(module: str, install: str) -> None:
    if not _installed(module):
        if REQUIRED:
            pytest.fail(f"RLMETRICS_REQUIRE_TRACEUI=1 but {module} is missing ({install})")
        pytest.skip(f"{module} is not installed ({install})")


@pytest.fixture(scope="module")
def phoenix_url(phoenix: ServerProcess) -> str:
    return phoenix.url


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A Phoenix server (``phoenix serve``, sqlite in its working folder)."""
    _need("phoenix.server", "pip install arize-phoenix")
    folder = tmp_path_factory.mktemp("phoenix")
    port, grpc_port = free_port(), free_port()
    server = ServerProcess(
        "phoenix",
        [sys.executable, "-c", PHOENIX_LAUNCHER],
        folder,
        {
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(port),
            "PHOENIX_GRPC_PORT": str(grpc_port),
            "PHOENIX_WORKING_DIR": str(folder),
        },
        health=f"http://127.0.0.1:{port}/healthz",
        ports=(port, grpc_port),
    )
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def mlflow_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An MLflow tracking server on a sqlite store (MLflow 3 takes OTLP/HTTP traces at
    ``/v1/traces`` with the experiment in the ``x-mlflow-experiment-id`` header)."""
    _need("mlflow.server", "pip install mlflow")
    _need(
        "flask",
        "pip install mlflow: mlflow-skinny, which the trackers' tests install, has no server",
    )
    folder = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    server = ServerProcess(
        "mlflow",
        [
            str(Path(sys.executable).with_name("mlflow")),
            "server",
            "--backend-store-uri",
            f"sqlite:///{folder / 'mlflow.db'}",
            "--default-artifact-root",
            str(folder / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        folder,
        {},
        health=f"http://127.0.0.1:{port}/health",
        ports=(port,),
    )
    try:
        server.wait_healthy()
        yield server.url
    finally:
        server.stop()
