"""The plugin module behind the ``trackio`` entry point: offers the ``trackio`` backend.

Every process that uses rlmetrics loads this module, so it must not import trackio: the
factory imports it when a Logger actually asks for the ``trackio`` backend.
"""

from __future__ import annotations

from typing import Any

import rlmetrics
from rlmetrics.configuration import ANYTHING, POSITIVE_NUMBER, TABLE, TEXT, declare_options
from rlmetrics.identity import RunIdentity

__all__ = ["make_backend", "register_backends"]


# What each option must be, checked where a configuration is read (the call, a variable, the
# file), the wrong one's source named; the tracker's own errors stay its own.
@declare_options(
    project=TEXT,
    name=TEXT,
    group=TEXT,
    config=TABLE,
    init_kwargs=TABLE,
    run=ANYTHING,
    connect_timeout_s=POSITIVE_NUMBER,
)
def make_backend(identity: RunIdentity | None = None, **config: Any) -> Any:
    """``TrackioBackend(identity=identity, **config)``, importing trackio only now."""
    from .backend import TrackioBackend

    return TrackioBackend(identity=identity, **config)


@rlmetrics.hookimpl
def register_backends(register: Any) -> None:
    register("trackio", make_backend)
