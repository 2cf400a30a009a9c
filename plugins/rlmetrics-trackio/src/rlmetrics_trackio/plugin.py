"""The plugin module behind the ``trackio`` entry point: offers the ``trackio`` backend.

Every process that uses rlmetrics loads this module, so it must not import trackio: the
factory imports it when a Logger actually asks for the ``trackio`` backend.
"""

from __future__ import annotations

from typing import Any

import rlmetrics
from rlmetrics.identity import RunIdentity

__all__ = ["make_backend", "register_backends"]


def make_backend(identity: RunIdentity | None = None, **config: Any) -> Any:
    """``TrackioBackend(identity=identity, **config)``, importing trackio only now."""
    from .backend import TrackioBackend

    return TrackioBackend(identity=identity, **config)


@rlmetrics.hookimpl
def register_backends(register: Any) -> None:
    register("trackio", make_backend)
