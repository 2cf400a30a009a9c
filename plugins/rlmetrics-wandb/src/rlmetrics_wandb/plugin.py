"""The plugin module behind the ``wandb`` entry point: offers the ``wandb`` backend.

Every process that uses rlmetrics loads this module, so it must not import wandb: the
factory imports it when a Logger actually asks for the ``wandb`` backend.
"""

from __future__ import annotations

from typing import Any

import rlmetrics

__all__ = ["make_backend", "register_backends"]


def make_backend(**config: Any) -> Any:
    """``WandbBackend(**config)``, importing wandb only now."""
    from .backend import WandbBackend

    return WandbBackend(**config)


@rlmetrics.hookimpl
def register_backends(register: Any) -> None:
    register("wandb", make_backend)
