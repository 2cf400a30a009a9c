"""The plugin module behind the ``tensorboard`` entry point: offers the ``tensorboard`` backend.

Every process that uses rlmetrics loads this module, so it must not import tensorboardX: the
factory imports it when a Logger actually asks for the ``tensorboard`` backend.
"""

from __future__ import annotations

from typing import Any

import rlmetrics
from rlmetrics.identity import RunIdentity

__all__ = ["make_backend", "register_backends"]


def make_backend(identity: RunIdentity | None = None, **config: Any) -> Any:
    """``TensorBoardBackend(identity=identity, **config)``, importing tensorboardX only now."""
    from .backend import TensorBoardBackend

    return TensorBoardBackend(identity=identity, **config)


@rlmetrics.hookimpl
def register_backends(register: Any) -> None:
    register("tensorboard", make_backend)
