"""MLflow backend for rlmetrics: ``Logger(backends={"mlflow": {...}})``.

Metrics go to one MLflow run with the trainer step, one ``log_batch`` per logged dict; keys
are mapped to names MLflow accepts without two keys sharing one (:mod:`.keys`); values MLflow
cannot store are summarised or skipped as :mod:`.values` documents.

``MlflowBackend`` loads lazily: the entry point imports this package in every rlmetrics
process, and importing mlflow costs over a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .keys import KeyMap, is_valid_key, mlflow_key

if TYPE_CHECKING:
    from .backend import MlflowBackend

__all__ = ["KeyMap", "MlflowBackend", "__version__", "is_valid_key", "mlflow_key"]

__version__ = "0.2.0"


def __getattr__(name: str) -> Any:
    if name == "MlflowBackend":
        from .backend import MlflowBackend

        return MlflowBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
