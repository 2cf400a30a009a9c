"""SwanLab backend for rlmetrics: ``Logger(backends={"swanlab": {...}})``.

Scalars at the trainer step, the configuration as the run's config, sample rows as text, in a
SwanLab run online, or offline in a local folder for ``swanlab sync`` later (for users who
cannot reach W&B).

``SwanLabBackend`` loads lazily: the entry point imports this package in every rlmetrics
process, and importing swanlab costs most of a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import SwanLabBackend

__all__ = ["SwanLabBackend", "__version__"]

__version__ = "0.2.0"


def __getattr__(name: str) -> Any:
    if name == "SwanLabBackend":
        from .backend import SwanLabBackend

        return SwanLabBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
