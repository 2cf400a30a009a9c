"""Weights & Biases backend for rlmetrics: ``Logger(backends={"wandb": {...}})``.

Every logged dict is one W&B history row carrying its own x-axis value: ``rlmetrics/step``
for trainer-correlated dicts, ``telemetry/wall_time_seconds`` for dicts that carry it (the
rollout-checkpoint streams; :mod:`.axes`). W&B's own ``step=`` is never used, so a repeated
or smaller trainer step is never dropped.

The names below load lazily: the entry point imports this package in every rlmetrics
process, and importing wandb costs about a second.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .axes import StepAxes
    from .backend import WandbBackend

__all__ = ["StepAxes", "WandbBackend", "__version__"]

__version__ = "0.2.0"

_LAZY = {"StepAxes": ".axes", "WandbBackend": ".backend"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
