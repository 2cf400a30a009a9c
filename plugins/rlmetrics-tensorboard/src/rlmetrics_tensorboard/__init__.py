"""TensorBoard backend for rlmetrics: ``Logger(backends={"tensorboard": {...}})``.

Scalars at the trainer step with their wall time, hyperparameters for TensorBoard's HParams
dashboard, sample rows as Markdown text, written by tensorboardX (no TensorFlow needed) into
one log folder per run: ``runs/<run id>`` unless told otherwise, so a resumed run continues
its folder.

``TensorBoardBackend`` loads lazily: the entry point imports this package in every rlmetrics
process, and importing tensorboardX costs most of a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import TensorBoardBackend

__all__ = ["TensorBoardBackend", "__version__"]

__version__ = "0.2.0"


def __getattr__(name: str) -> Any:
    if name == "TensorBoardBackend":
        from .backend import TensorBoardBackend

        return TensorBoardBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
