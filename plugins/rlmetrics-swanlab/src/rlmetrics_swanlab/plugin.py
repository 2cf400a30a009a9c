"""The plugin module behind the ``swanlab`` entry point: offers the ``swanlab`` backend.

Every process that uses rlmetrics loads this module, so it must not import swanlab: the
factory imports it when a Logger actually asks for the ``swanlab`` backend.
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

#: The modes SwanLab takes (its settings' ``mode``; ``cloud`` is its old name of ``online``).
MODES = ("online", "offline", "local", "disabled", "cloud")


# What each option must be, checked where a configuration is read (the call, a variable, the
# file), the wrong one's source named; the tracker's own errors stay its own.
@declare_options(
    project=TEXT,
    workspace=TEXT,
    name=TEXT,
    description=TEXT,
    tags=TEXT_LIST,
    group=TEXT,
    job_type=TEXT,
    mode=one_of(*MODES).checks("SWANLAB_MODE"),  # swanlab reads it whatever the option says
    log_dir=PATH,
    config=TABLE,
    init_kwargs=TABLE,
    run=ANYTHING,
    connect_timeout_s=POSITIVE_NUMBER,
)
def make_backend(identity: RunIdentity | None = None, **config: Any) -> Any:
    """``SwanLabBackend(identity=identity, **config)``, importing swanlab only now."""
    from .backend import SwanLabBackend

    return SwanLabBackend(identity=identity, **config)


@rlmetrics.hookimpl
def register_backends(register: Any) -> None:
    register("swanlab", make_backend)
