"""The plugin module behind the ``tensorboard`` entry point: offers the ``tensorboard`` backend.

Every process that uses rlmetrics loads this module, so it must not import tensorboardX: the
factory imports it when a Logger actually asks for the ``tensorboard`` backend.
"""

from __future__ import annotations

from typing import Any

import rlmetrics
from rlmetrics.configuration import PATH, POSITIVE_NUMBER, declare_options
from rlmetrics.identity import RunIdentity

__all__ = ["make_backend", "register_backends"]


# What each option must be, checked where a configuration is read (the call, a variable, the
# file), the wrong one's source named; the tracker's own errors stay its own.
@declare_options(
    log_dir=PATH,
    root_dir=PATH,
    flush_secs=POSITIVE_NUMBER,
)
def make_backend(identity: RunIdentity | None = None, **config: Any) -> Any:
    """``TensorBoardBackend(identity=identity, **config)``, importing tensorboardX only now."""
    from .backend import TensorBoardBackend

    return TensorBoardBackend(identity=identity, **config)


@rlmetrics.hookimpl
def register_backends(register: Any) -> None:
    register("tensorboard", make_backend)
