"""Trackio backend for rlmetrics: ``Logger(backends={"trackio": {...}})``.

Scalars at the trainer step, the configuration as the run's config and sample rows as a
``trackio.Table``, in a local Trackio project (its SQLite store under ``TRACKIO_DIR``), which
``trackio show`` draws.

``TrackioBackend`` loads lazily: the entry point imports this package in every rlmetrics
process, and importing trackio costs most of a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import TrackioBackend

__all__ = ["TrackioBackend", "__version__"]

__version__ = "0.2.0"


def __getattr__(name: str) -> Any:
    if name == "TrackioBackend":
        from .backend import TrackioBackend

        return TrackioBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
