"""Process state: what a plugin module keeps for the life of the process, and how to forget it.

A plugin's module may hold state no telemetry session owns: counts of work in flight read by
an observable callback, the totals of every server middleware built, a sampler thread, the
destinations seen so far, a setting chosen once per process. In a service that is right: the
process is the unit. In a test suite it is not: one process runs every test, and what one
test left (a key counted at zero, a setting it chose) would show in the next test's telemetry
or change its result, so the suite would depend on its order.

A module that keeps such state registers a function that puts it back the way a fresh import
of the module holds it (``@rlmetrics.resets_process_state``). rlmetrics never calls these in
a running service; ``rlmetrics.testing.isolated_state()`` calls every one when a test starts
and when it ends, and ``rlmetrics.testing.reset_process_state()`` on demand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["reset_process_state", "resets_process_state"]

F = TypeVar("F", bound=Callable[[], None])

# By module and name, so a reloaded module's function replaces its earlier self.
_resets: dict[tuple[str, str], Callable[[], None]] = {}


def resets_process_state(function: F) -> F:
    """Register ``function`` (no arguments) as the one that returns its module's process state
    to what a fresh import holds; usable as a decorator. It runs between tests, never while a
    service runs, and must not raise."""
    key = (getattr(function, "__module__", ""), getattr(function, "__qualname__", repr(function)))
    _resets[key] = function
    return function


def reset_process_state() -> None:
    """Run every registered reset, in registration order. Every one runs; the first exception
    is raised afterwards (a reset that raises is a bug in the suite, not in a run)."""
    failure: BaseException | None = None
    for function in tuple(_resets.values()):
        try:
            function()
        except Exception as exc:
            if failure is None:
                failure = exc
    if failure is not None:
        raise failure
