"""Run a function once this process's driver connects to Ray, without importing Ray.

A process that has rlmetrics-ray installed but never calls ``ray.init()`` must pay nothing
for it: no thread, no polling. Ray runs the functions in ``ray._private.worker._post_init_hooks``
at the end of every ``ray.init()`` (its own libraries, Tune and Serve, register there too), so
the function is appended there: now if Ray's worker module is already imported, else from a
one-shot import hook the moment it is. Where that list is missing (a Ray that dropped it),
``on_ray_init`` says so by returning False and the caller starts at once instead.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["on_ray_init", "ray_is_initialized"]

_WORKER = "ray._private.worker"


def ray_is_initialized() -> bool:
    """Whether this process is connected to Ray (never imports it)."""
    ray: Any = sys.modules.get("ray")
    try:
        return ray is not None and bool(ray.is_initialized())
    except Exception:
        return False


def on_ray_init(function: Callable[[], None]) -> bool:
    """Call ``function`` after each later ``ray.init()`` of this process (it must be cheap and
    idempotent, and never raise). False when Ray offers no place for it (then nothing is
    registered)."""
    worker = sys.modules.get(_WORKER)
    if worker is not None:
        return _append(worker, function)
    _AfterImport.install(function)
    return True


def _append(worker: ModuleType, function: Callable[[], None]) -> bool:
    hooks = getattr(worker, "_post_init_hooks", None)
    if not isinstance(hooks, list):
        return False
    if function not in hooks:
        hooks.append(function)
    return True


class _AfterImport(importlib.abc.MetaPathFinder):
    """A finder that never finds anything itself: when Ray's worker module is about to be
    imported, it wraps that module's loader so ``function`` is registered right after the
    module runs, then takes itself off ``sys.meta_path``."""

    _lock = threading.Lock()

    def __init__(self, function: Callable[[], None]) -> None:
        self.function = function

    @classmethod
    def install(cls, function: Callable[[], None]) -> None:
        with cls._lock:
            for finder in sys.meta_path:
                if isinstance(finder, cls):
                    finder.function = function  # one pending hook: the newest monitor's
                    return
            sys.meta_path.insert(0, cls(function))

    def uninstall(self) -> None:
        with self._lock:
            if self in sys.meta_path:
                sys.meta_path.remove(self)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _WORKER:
            return None
        self.uninstall()
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        loader = None if spec is None else spec.loader
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        function, exec_module = self.function, loader.exec_module

        def exec_then_register(module: ModuleType) -> None:
            exec_module(module)
            _append(module, function)

        loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec
