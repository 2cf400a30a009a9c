"""Fork safety: what a child process must forget of its parent's telemetry.

After ``os.fork()`` the child has only the thread that forked: a lock another thread held
stays locked forever, and the parent's exporter threads, queues and run identity are not the
child's. Objects that own such state register here; after a fork, in the child, each one's
``_after_fork_in_child()`` runs (module-level state registers plain functions). Telemetry is
then off in the child until it calls ``rlmetrics.start()`` itself.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["forget_in_child", "reset_in_child"]

_objects: weakref.WeakSet[Any] = weakref.WeakSet()
_functions: list[Callable[[], None]] = []


def forget_in_child(obj: Any) -> None:
    """Call ``obj._after_fork_in_child()`` in a forked child (``obj`` is held weakly)."""
    _objects.add(obj)


def reset_in_child(function: Callable[[], None]) -> Callable[[], None]:
    """Call ``function`` in a forked child (module-level state); usable as a decorator."""
    _functions.append(function)
    return function


def _in_child() -> None:
    for function in _functions:
        function()
    for obj in list(_objects):
        obj._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_in_child)
