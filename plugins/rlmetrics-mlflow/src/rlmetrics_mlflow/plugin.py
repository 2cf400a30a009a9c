"""The plugin module behind the ``mlflow`` entry point: offers the ``mlflow`` backend.

Every process that uses rlmetrics loads this module, so it must not import mlflow: the
factory imports it when a Logger actually asks for the ``mlflow`` backend.
"""

from __future__ import annotations

from typing import Any

import rlmetrics
from rlmetrics.identity import RunIdentity

__all__ = ["make_backend", "register_backends"]


def make_backend(identity: RunIdentity | None = None, **config: Any) -> Any:
    """``MlflowBackend(identity=identity, **config)``, importing mlflow only now."""
    from .backend import MlflowBackend

    return MlflowBackend(identity=identity, **config)


@rlmetrics.hookimpl
def register_backends(register: Any) -> None:
    register("mlflow", make_backend)
