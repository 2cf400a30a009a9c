"""How the host memory monitor that telemetry starts is configured, and which one runs.

Settings come from :func:`configure` (call it before ``rlmetrics.start()``; :func:`configured`
for a ``with`` block only), else from the environment, else from the defaults:

- ``enabled``: ``RLMETRICS_RAY_HOST_MEMORY`` (``0``, ``false``, ``no``, ``off`` disable;
  ``1``, ``true``, ``yes``, ``on`` enable; any other word is said once and the default kept); on.
- ``gpus``: ``RLMETRICS_RAY_GPUS`` (the same words disable); on: the monitor reads each host's
  GPUs from the same scrape, and a process without Ray reads its own through NVML.
- ``interval_s``: ``RLMETRICS_RAY_HOST_MEMORY_INTERVAL_S``; 10 s from cycle start to start.
- ``timeout_s``: ``RLMETRICS_RAY_HOST_MEMORY_TIMEOUT_S``; 5 s per endpoint, whole request.
- ``resolver``, ``nodes``, ``max_concurrency``: :func:`configure` only (see
  :class:`HostMemorySettings`).
- ``elect``, ``lock_dir``: :func:`configure` only; one process per host and run reports
  the host (:mod:`rlmetrics_ray.election`), its lock file in ``lock_dir`` (default: the
  system's temporary directory).

This module declares nothing, so importing it (or the package) is safe at any time.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs

from rlmetrics import resets_process_state, warn_once

from .nodes import NodeSource, Resolver, metrics_url

if TYPE_CHECKING:
    from .monitor import HostMemoryMonitor

__all__ = [
    "ENABLED_ENV",
    "GPUS_ENV",
    "INTERVAL_ENV",
    "TIMEOUT_ENV",
    "HostMemorySettings",
    "active_monitor",
    "configure",
    "configured",
    "seconds_problem",
    "settings",
    "switch_problem",
]

ENABLED_ENV = "RLMETRICS_RAY_HOST_MEMORY"
GPUS_ENV = "RLMETRICS_RAY_GPUS"
INTERVAL_ENV = "RLMETRICS_RAY_HOST_MEMORY_INTERVAL_S"
TIMEOUT_ENV = "RLMETRICS_RAY_HOST_MEMORY_TIMEOUT_S"
_OFF = ("0", "false", "no", "off")
_ON = ("1", "true", "yes", "on")


@attrs.frozen
class HostMemorySettings:
    """What the next ``rlmetrics.start()`` builds its monitor with.

    ``nodes`` None means this driver's ``ray.nodes()``, and then the monitor is started only
    in a process that can be a Ray driver (Ray installed, and not running as a Ray worker);
    give a node source to run it anywhere.
    """

    enabled: bool = True
    gpus: bool = True
    interval_s: float = 10.0
    timeout_s: float = 5.0
    resolver: Resolver = metrics_url
    nodes: NodeSource | None = None
    max_concurrency: int = 256
    #: Elect one process per host and run to report the host (False: every process does).
    elect: bool = True
    #: Where the election's lock files are (None: the system's temporary directory).
    lock_dir: str | os.PathLike[str] | None = None


_explicit: dict[str, Any] = {}
_lock = threading.Lock()
_active: HostMemoryMonitor | None = None


def configure(**changes: Any) -> None:
    """Set monitor settings for the next ``rlmetrics.start()`` (the running monitor keeps
    its own). Keys are :class:`HostMemorySettings` fields; ``None`` resets one to its
    environment/default value. A wrong key or value raises at once."""
    fields = attrs.fields_dict(HostMemorySettings)
    unknown = sorted(set(changes) - set(fields))
    if unknown:
        raise TypeError(f"configure(): unknown setting(s) {unknown}; choose from {sorted(fields)}")
    for key, value in changes.items():
        if value is not None:
            _check(key, value)
    with _lock:
        for key, value in changes.items():
            if value is None:
                _explicit.pop(key, None)
            else:
                _explicit[key] = value


@contextlib.contextmanager
def configured(**changes: Any) -> Iterator[HostMemorySettings]:
    """:func:`configure` for a ``with`` block only (tests, a script that starts telemetry
    twice): the settings in force inside are yielded, and what was configured before comes
    back after the block, even when it raises. A wrong key or value raises before the block."""
    with _lock:
        before = dict(_explicit)
    configure(**changes)
    try:
        yield settings()
    finally:
        with _lock:
            _explicit.clear()
            _explicit.update(before)


def _check(key: str, value: Any) -> None:
    if key in ("interval_s", "timeout_s"):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not (math.isfinite(value) and value > 0)
        ):
            raise ValueError(
                f"configure(): {key} must be a positive number of seconds, got {value!r}"
            )
    elif key == "max_concurrency":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"configure(): max_concurrency must be a positive int, got {value!r}")
    elif key == "lock_dir":
        if not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"configure(): lock_dir must be a path, got {type(value).__name__}")
    elif key in ("enabled", "gpus", "elect"):
        if not isinstance(value, bool):
            raise ValueError(f"configure(): {key} must be a bool, got {value!r}")
    elif not callable(value):
        raise TypeError(f"configure(): {key} must be callable, got {type(value).__name__}")


def switch_problem(value: str) -> str | None:
    """What is wrong with ``value`` as an on/off variable, or None."""
    flag = value.strip().lower()
    if not flag or flag in _ON or flag in _OFF:
        return None
    return f"must be one of {', '.join(_ON)} or {', '.join(_OFF)}"


def seconds_problem(value: str) -> str | None:
    """What is wrong with ``value`` as a number of seconds variable, or None."""
    if not value.strip():
        return None
    try:
        _check("interval_s", float(value))
    except ValueError:
        return "must be a positive number of seconds"
    return None


def settings() -> HostMemorySettings:
    """The settings in force: :func:`configure`'s, else the environment's, else defaults."""
    from_env: dict[str, Any] = {}
    for key, name in (("enabled", ENABLED_ENV), ("gpus", GPUS_ENV)):
        flag = (os.environ.get(name) or "").strip().lower()
        wrong = switch_problem(flag)
        if wrong:  # a typo ("flase") is no switch: said, and the default used
            warn_once(
                f"ray:config:{name}",
                f"rlmetrics-ray: {name} {wrong} (got a {len(flag)}-character value); using "
                "the default (on)",
            )
        elif flag:
            from_env[key] = flag in _ON
    for key, name in (("interval_s", INTERVAL_ENV), ("timeout_s", TIMEOUT_ENV)):
        raw = os.environ.get(name) or ""
        wrong = seconds_problem(raw)
        if wrong:
            warn_once(
                f"ray:config:{name}",
                f"rlmetrics-ray: {name} {wrong} (got a {len(raw)}-character value); using "
                "the default",
            )
        elif raw.strip():
            from_env[key] = float(raw)
    with _lock:
        return HostMemorySettings(**{**from_env, **_explicit})


def active_monitor() -> HostMemoryMonitor | None:
    """The monitor telemetry started in this process, while it runs."""
    return _active


def _set_active(monitor: HostMemoryMonitor | None) -> HostMemoryMonitor | None:
    """Install ``monitor`` as the process's; returns the one it replaces."""
    global _active
    with _lock:
        previous, _active = _active, monitor
    return previous


def _forget_monitor_in_child() -> None:
    """After ``fork()`` the parent's monitor is not the child's: its thread stayed behind and
    its locks (or this module's) may have been held at the fork, so stopping it would wait
    forever. The child forgets it; a ``start()`` in the child runs a monitor of its own."""
    global _active, _lock
    _lock = threading.Lock()
    _active = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_monitor_in_child)


@resets_process_state
def _forget_settings() -> None:
    with _lock:
        _explicit.clear()
    monitor = _set_active(None)
    if monitor is not None:
        monitor.stop()
