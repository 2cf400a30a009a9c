"""The plugin module behind the ``wandb`` entry point: offers the ``wandb`` backend.

Every process that uses rlmetrics loads this module, so it must not import wandb: the
factory imports it when a Logger actually asks for the ``wandb`` backend.
"""

from __future__ import annotations

from typing import Any

import rlmetrics
from rlmetrics.configuration import (
    ANYTHING,
    PATH,
    POSITIVE_NUMBER,
    TABLE,
    TEXT,
    TEXT_LIST,
    declare_options,
    one_of,
)
from rlmetrics.identity import RunIdentity

__all__ = ["MODES", "make_backend", "register_backends"]

#: The modes W&B takes (its settings' ``mode``; ``dryrun`` and ``run`` are its old names).
MODES = ("online", "offline", "shared", "disabled", "dryrun", "run")


# What each option must be, checked where a configuration is read (the call, a variable, the
# file), the wrong one's source named; the tracker's own errors stay its own.
@declare_options(
    project=TEXT,
    entity=TEXT,
    name=TEXT,
    tags=TEXT_LIST,
    mode=one_of(*MODES).checks("WANDB_MODE"),  # wandb reads it whatever the option says
    dir=PATH,
    group=TEXT,
    notes=TEXT,
    config=TABLE,
    init_kwargs=TABLE,
    run=ANYTHING,
    connect_timeout_s=POSITIVE_NUMBER,
)
def make_backend(identity: RunIdentity | None = None, **config: Any) -> Any:
    """``WandbBackend(identity=identity, **config)``, importing wandb only now."""
    from .backend import WandbBackend

    return WandbBackend(identity=identity, **config)


@rlmetrics.hookimpl
def register_backends(register: Any) -> None:
    register("wandb", make_backend)
