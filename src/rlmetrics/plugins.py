"""Finding plugins through entry points, and calling their hooks one guard at a time.

pluggy's own ``load_setuptools_entrypoints`` stops at the first import error and a bare
``pm.hook.x(...)`` stops at the first implementation that raises. Telemetry must survive
both, so plugins are loaded one entry point at a time and every implementation is called in
its own guard: a broken plugin is skipped and named, the others run.

Built-in plugins (the JSONL and console backends, the families) are entry points of the core
distribution, so they load, list and can be disabled exactly like third-party ones.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
from collections.abc import Iterable
from typing import Any

import attrs
import pluggy

from . import hookspecs
from ._warn import logger, warn_once

__all__ = [
    "ENTRY_POINT_GROUP",
    "PluginInfo",
    "Plugins",
    "call_hook",
    "get_plugins",
    "load_plugins",
    "register",
]

ENTRY_POINT_GROUP = "rlmetrics"
ALLOW_ENV = "RLMETRICS_PLUGINS"
DENY_ENV = "RLMETRICS_DISABLE_PLUGINS"


@attrs.frozen
class PluginInfo:
    """One entry point and what became of it."""

    name: str
    distribution: str | None
    version: str | None
    status: str  # "loaded", "failed", "disabled"
    hooks: tuple[str, ...] = ()
    error: str | None = None


def _plugin_name(plugin: Any) -> str:
    """A module's name, else the object's class name."""
    return str(getattr(plugin, "__name__", None) or type(plugin).__name__)


def _split(value: str | None) -> set[str] | None:
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


class Plugins:
    """A plugin manager plus the record of what loaded, failed or was disabled."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.infos: dict[str, PluginInfo] = {}

    def register(self, plugin: Any, name: str | None = None) -> bool:
        """Register ``plugin``; on a validation error, skip it with a warning naming it."""
        name = name or _plugin_name(plugin)
        try:
            self.pm.register(plugin, name=name)
            self.pm.check_pending()
        except Exception as exc:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            logger.warning("rlmetrics: plugin %r skipped: %s", name, exc)
            return False
        return True

    def call(self, hook: str, **kwargs: Any) -> list[Any]:
        """Call every implementation of ``hook``, each in its own guard; collect results."""
        results = []
        for impl in reversed(getattr(self.pm.hook, hook).get_hookimpls()):
            result = self.call_impl(impl, hook, **kwargs)
            if result is not None:
                results.append(result)
        return results

    def call_impl(self, impl: pluggy.HookImpl, hook: str, **kwargs: Any) -> Any:
        """Call one implementation in its own guard; None if it raised."""
        try:
            return impl.function(*(kwargs[arg] for arg in impl.argnames))
        except Exception:
            warn_once(
                f"hook:{impl.plugin_name}:{hook}",
                f"rlmetrics: plugin {impl.plugin_name!r} raised in hook {hook!r}; the other "
                "plugins ran and training goes on",
            )
            return None

    def hooks_of(self, name: str) -> tuple[str, ...]:
        plugin = self.pm.get_plugin(name)
        if plugin is None:
            return ()
        return tuple(sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or ()))

    def names(self) -> list[str]:
        return [name for name, _ in self.pm.list_name_plugin()]


def _matches(ep: importlib.metadata.EntryPoint, names: set[str]) -> bool:
    dist = getattr(ep, "dist", None)
    return ep.name in names or (dist is not None and dist.name in names)


def load_plugins(
    allow: Iterable[str] | None = None,
    deny: Iterable[str] | None = None,
) -> Plugins:
    """Build the process's plugin manager from the ``rlmetrics`` entry points.

    ``allow`` (else ``RLMETRICS_PLUGINS``) lists the entry point or distribution names to load,
    all others being skipped; ``deny`` (else ``RLMETRICS_DISABLE_PLUGINS``) lists names never
    to load. A set-but-empty allow-list loads nothing.
    """
    allowed = set(allow) if allow is not None else _split(os.environ.get(ALLOW_ENV))
    denied = set(deny) if deny is not None else (_split(os.environ.get(DENY_ENV)) or set())
    plugins = Plugins()
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        info = PluginInfo(
            name=ep.name,
            distribution=dist.name if dist is not None else None,
            version=dist.version if dist is not None else None,
            status="disabled",
        )
        plugins.infos[ep.name] = info
        if (allowed is not None and not _matches(ep, allowed)) or _matches(ep, denied):
            continue
        if plugins.pm.has_plugin(ep.name):
            continue
        try:
            plugin = ep.load()
        except Exception as exc:
            warn_once(
                f"plugin-load:{ep.name}",
                f"rlmetrics: plugin {ep.name!r} ({ep.value}) failed to import and is skipped; "
                f"the other plugins load: {exc!r}",
            )
            plugins.infos[ep.name] = attrs.evolve(info, status="failed", error=repr(exc))
            continue
        if plugins.register(plugin, ep.name):
            hooks = plugins.hooks_of(ep.name)
            plugins.infos[ep.name] = attrs.evolve(info, status="loaded", hooks=hooks)
        else:
            plugins.infos[ep.name] = attrs.evolve(info, status="failed", error="invalid hooks")
    for name, plugin in _in_process.items():
        plugins.register(plugin, name)
    global _plugins
    with _lock:
        _plugins = plugins
    return plugins


_plugins: Plugins | None = None
_in_process: dict[str, Any] = {}
_lock = threading.Lock()


def register(plugin: Any, name: str | None = None) -> bool:
    """Register a plugin object from code (no entry point), for this process.

    It stays registered when ``rlmetrics.start()`` reloads the entry points, and the allow-
    and deny-lists do not apply to it: registering it is already an explicit choice.
    """
    name = name or _plugin_name(plugin)
    if not get_plugins().register(plugin, name):
        return False
    _in_process[name] = plugin
    return True


def get_plugins() -> Plugins:
    """The loaded plugins, loading them (with the environment's lists) on first use."""
    plugins = _plugins
    return plugins if plugins is not None else load_plugins()


def call_hook(hook: str, **kwargs: Any) -> list[Any]:
    """Call ``hook`` on every loaded plugin, each in its own guard."""
    return get_plugins().call(hook, **kwargs)
