"""The plugin module behind the ``mlflow`` entry point: offers the ``mlflow`` backend.

Every process that uses rlmetrics loads this module, so it must not import mlflow: the
factory imports it when a Logger actually asks for the ``mlflow`` backend.
"""

from __future__ import annotations

from typing import Any

import rlmetrics
from rlmetrics.configuration import POSITIVE_NUMBER, TABLE, TEXT, declare_options
from rlmetrics.identity import RunIdentity

__all__ = ["make_backend", "register_backends"]


# What each option must be, checked where a configuration is read (the call, a variable, the
# file), the wrong one's source named; the tracker's own errors stay its own.
@declare_options(
    tracking_uri=TEXT,
    experiment_name=TEXT,
    run_name=TEXT,
    run_id=TEXT,
    tags=TABLE,
    params=TABLE,
    artifact_location=TEXT,
    connect_timeout_s=POSITIVE_NUMBER,
)
def make_backend(identity: RunIdentity | None = None, **config: Any) -> Any:
    """``MlflowBackend(identity=identity, **config)``, importing mlflow only now."""
    from .backend import MlflowBackend

    return MlflowBackend(identity=identity, **config)


@rlmetrics.hookimpl
def register_backends(register: Any) -> None:
    register("mlflow", make_backend)
