"""Finding plugins through entry points, one at a time, in a way that cannot be fooled.

pluggy's ``load_setuptools_entrypoints`` stops at the first import error, lets two
distributions claim one entry-point name by metadata order, and keeps whatever a failed import
declared. Telemetry must survive all three, so entry points are loaded here one by one:

- a plugin whose import or registration fails (any exception, ``SystemExit`` included) is
  skipped and named, and what it declared is rolled back; the others load;
- an entry-point name offered by two distributions is reported naming both; the core's
  built-in always wins, and between third parties the choice is deterministic (the first
  distribution by name) unless ``RLMETRICS_OVERRIDE_PLUGINS=name=distribution`` picks one;
- the core's built-ins (backends, families, exporters) load unless explicitly denied; the
  allow-list (``RLMETRICS_PLUGINS``) selects among third-party plugins only. Names match after
  PEP 503 normalisation (``acme_rlmetrics`` is ``acme-rlmetrics``).

Entry points are read on first use, never at ``import rlmetrics``.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
import sys
import threading
import traceback
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

from . import hookspecs
from ._fork import reset_in_child
from ._warn import logger, warn_once
from .hooks import Hooks, guard_implementations
from .registry import default_registry

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

__all__ = [
    "ALLOW_ENV",
    "CORE_DISTRIBUTION",
    "DENY_ENV",
    "ENTRY_POINT_GROUP",
    "OVERRIDE_ENV",
    "SHADOWED",
    "PluginInfo",
    "Plugins",
    "check_overrides",
    "check_plugin_lists",
    "get_plugins",
    "hooks",
    "installed_names",
    "load_plugins",
    "normalize",
    "overrides",
    "register",
]

ENTRY_POINT_GROUP = "rlmetrics"
CORE_DISTRIBUTION = "rlmetrics"
ALLOW_ENV = "RLMETRICS_PLUGINS"
DENY_ENV = "RLMETRICS_DISABLE_PLUGINS"
OVERRIDE_ENV = "RLMETRICS_OVERRIDE_PLUGINS"

LOADED, FAILED, DISABLED = "loaded", "failed", "disabled"
#: A backend, exporter or other part offered under a name another plugin's offer won.
SHADOWED = "shadowed"


@attrs.frozen
class PluginInfo:
    """One entry point (or in-process plugin) and what became of it.

    ``reason`` says why a row is disabled or failed; ``series`` names what a loaded plugin
    declared (a plugin may only declare series and implement no hook).
    """

    name: str
    distribution: str | None
    version: str | None
    status: str  # LOADED, FAILED, DISABLED, or SHADOWED (a registered name another won)
    hooks: tuple[str, ...] = ()
    series: tuple[str, ...] = ()
    reason: str | None = None
    #: The logged keys (patterns) a loaded plugin declared known (``declare_keys``).
    keys: tuple[str, ...] = ()
    builtin: bool = False
    #: The traceback of a plugin whose import failed (``rlmetrics plugins --verbose``).
    traceback: str | None = None

    @property
    def summary(self) -> str | None:
        """The reason's first line (a table row's), ``…`` marking that there is more."""
        if self.reason is None:
            return None
        lines = self.reason.strip().splitlines() or [""]
        return lines[0] + (" …" if len(lines) > 1 else "")

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self, recurse=False, value_serializer=_listify)


def _listify(_instance: Any, _field: Any, value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def normalize(name: str) -> str:
    """PEP 503 normalisation: ``Acme_RLMetrics`` and ``acme-rlmetrics`` are one name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(value: Iterable[str] | str | None) -> set[str] | None:
    if value is None:
        return None
    parts = value.split(",") if isinstance(value, str) else value
    return {normalize(part.strip()) for part in parts if part.strip()}


def overrides() -> dict[str, str]:
    """``RLMETRICS_OVERRIDE_PLUGINS`` as ``{name: distribution}``, names normalised."""
    return _overrides(os.environ.get(OVERRIDE_ENV))


def _overrides(value: str | None) -> dict[str, str]:
    """``"training=acme-dup, jsonl=fast-jsonl"`` → ``{"training": "acme-dup", ...}``."""
    chosen: dict[str, str] = {}
    for part in (value or "").split(","):
        name, _, dist = part.partition("=")
        if name.strip() and dist.strip():
            chosen[normalize(name.strip())] = normalize(dist.strip())
    return chosen


class Plugins:
    """A plugin manager, its typed hooks, and the record of what loaded, failed or was
    disabled."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
        self.pm.add_hookspecs(hookspecs)
        self.hooks = Hooks(self.pm)
        self.infos: list[PluginInfo] = []

    def register(self, plugin: Any, name: str) -> str | None:
        """Register ``plugin`` with its hooks guarded; on failure, why (and nothing stays)."""
        # pluggy refuses a second registration of one object, or a second object under a
        # taken name, with its whole name table; and the object must stay as it was
        # registered the first time, so neither reaches the rollback below.
        holder = self.pm.get_name(plugin)
        if holder is not None:
            return (
                f"it is the object plugin {holder!r} is already; one object is one plugin: keep "
                "one of the two (entry points, or registrations)"
            )
        if self.pm.has_plugin(name):
            return (
                f"the name {name!r} is another plugin's ({self._origin(name)}); register this "
                "one under a name of its own"
            )
        never_run = _never_run(self.pm, plugin)
        if never_run:
            return "; ".join(never_run)
        try:
            self.pm.register(plugin, name=name)
            self.pm.check_pending()
        except Exception as exc:
            if self.pm.is_registered(plugin):
                self.pm.unregister(plugin)
            # What to change first (the row's summary), pluggy's own words after it.
            hints = _hook_mistakes(self.pm, plugin)
            return "; ".join(hints) + f"\n{exc}" if hints else str(exc)
        guard_implementations(self.pm, plugin)
        self.hooks.changed()
        return None

    def _origin(self, name: str) -> str:
        info = self.info(name)
        return info.distribution if info is not None and info.distribution else "in process"

    def hooks_of(self, name: str) -> tuple[str, ...]:
        plugin = self.pm.get_plugin(name)
        if plugin is None:
            return ()
        return tuple(sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or ()))

    def names(self) -> list[str]:
        """The registered plugins' names."""
        return [name for name, _ in self.pm.list_name_plugin()]

    def info(self, name: str) -> PluginInfo | None:
        """The row for ``name`` that loaded, else the first row of that name."""
        rows = [info for info in self.infos if info.name == name and info.status != SHADOWED]
        return next((info for info in rows if info.status == LOADED), rows[0] if rows else None)

    # -- names offered through registration hooks (backends, exporters, demo parts) ---------

    def rank(self, plugin: str) -> tuple[bool, str, str]:
        """Where ``plugin``'s offer ranks when two plugins offer one name: the core's built-ins
        first, then by distribution name (the entry-point rule)."""
        info = self.info(plugin)
        builtin = info is not None and info.builtin
        return (not builtin, normalize(info.distribution or "") if info else "~", plugin)

    def names_of(self, plugin: str) -> set[str]:
        """The names ``RLMETRICS_OVERRIDE_PLUGINS`` may choose ``plugin`` by: its own and its
        distribution's, normalised."""
        info = self.info(plugin)
        distribution = info.distribution if info is not None else None
        return {normalize(plugin), *([normalize(distribution)] if distribution else [])}

    def describe(self, plugin: str) -> str:
        """``'jsonl' (rlmetrics)``: a plugin and where it comes from, for a message."""
        info = self.info(plugin)
        origin = info.distribution if info is not None and info.distribution else "in process"
        return f"{plugin!r} ({origin})"

    def shadow(self, what: str, name: str, loser: str, winner: str) -> None:
        """Record, once, that ``loser``'s offer of ``what`` ``name`` is not used."""
        info = self.info(loser)
        distribution = info.distribution if info is not None else None
        reason = (
            f"{what} {name!r} of {loser!r} is not used: {self.describe(winner)} offers it too "
            f"({OVERRIDE_ENV}={name}={normalize(distribution or loser)} chooses this one)"
        )
        if not any(i.status == SHADOWED and i.reason == reason for i in self.infos):
            version = info.version if info is not None else None
            self.infos.append(PluginInfo(name, distribution, version, SHADOWED, reason=reason))


def _spec_arguments() -> dict[str, tuple[str, ...]]:
    """``{hook: its arguments}`` from :mod:`.hookspecs`."""
    marker = f"{ENTRY_POINT_GROUP}_spec"
    return {
        name: tuple(inspect.signature(function).parameters)
        for name, function in vars(hookspecs).items()
        if callable(function) and hasattr(function, marker)
    }


def _arguments(plugin: Any, attribute: str) -> tuple[str, ...]:
    """The arguments a hook implementation takes from the hook, as pluggy reads them: its
    positional parameters without a default (``self`` of a method left out)."""
    try:
        parameters = inspect.signature(getattr(plugin, attribute)).parameters.values()
    except (TypeError, ValueError, AttributeError):
        return ()
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(
        p.name
        for p in parameters
        if p.kind in positional and p.default is p.empty and p.name not in ("self", "cls")
    )


def _hookimpls(pm: pluggy.PluginManager, plugin: Any) -> Iterator[tuple[str, str]]:
    """``(attribute, hook name)`` of each ``@rlmetrics.hookimpl`` that ``plugin`` holds."""
    for attribute in dir(plugin):
        try:
            options = pm.parse_hookimpl_opts(plugin, attribute)
        except Exception:
            continue
        if options is not None:
            yield attribute, options.get("specname") or attribute


def _never_run(pm: pluggy.PluginManager, plugin: Any) -> list[str]:
    """What to change in each hook implementation of ``plugin`` whose body a call would never
    run: an ``async def`` (a coroutine nobody awaits), a generator not marked as a wrapper, a
    module's function named like a hook whose ``@rlmetrics.hookimpl`` was left off (not an
    object's method: an object may be a backend too, whose ``log_metrics`` is no hook)."""
    found = [
        f"{name!r} is named like a hook but not marked @rlmetrics.hookimpl, so it is never "
        "called: mark it (or rename it)"
        for name in (_spec_arguments() if inspect.ismodule(plugin) else ())
        if inspect.isfunction(getattr(plugin, name, None))
        and pm.parse_hookimpl_opts(plugin, name) is None
    ]
    for attribute, hook in _hookimpls(pm, plugin):
        function = getattr(plugin, attribute, None)
        options: Mapping[str, Any] = pm.parse_hookimpl_opts(plugin, attribute) or {}
        if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
            found.append(
                f"hook {hook!r} is an async def: rlmetrics calls hooks and never awaits them; "
                "make it a plain def (hand the work to your own event loop from there)"
            )
        elif inspect.isgeneratorfunction(function) and not (
            options.get("wrapper") or options.get("hookwrapper")
        ):
            found.append(
                f"hook {hook!r} is a generator function without wrapper=True: its body would "
                "never run; drop the yield, or mark it @rlmetrics.hookimpl(wrapper=True)"
            )
    return found


def _misnamed(pm: pluggy.PluginManager, plugin: Any, ep: EntryPoint) -> str | None:
    """What to change when an entry point names an object that cannot be a plugin: a class
    (its hooks would lack ``self`` at every call), or an object with no hook at all (a
    function, a constant) where the module beside it has them."""
    if inspect.ismodule(plugin):
        return None
    module = f'{ep.name} = "{ep.module}"'
    if inspect.isclass(plugin):
        return (
            f"the entry point names the class {plugin.__qualname__}: hooks are called on a "
            f"module or an instance; name the module ({module}) or an instance of the class"
        )
    if any(True for _ in _hookimpls(pm, plugin)):
        return None
    kind = "function" if inspect.isroutine(plugin) else type(plugin).__name__
    beside = sorted({hook for _, hook in _hookimpls(pm, sys.modules.get(ep.module))})
    return f"the entry point names a {kind} that implements no rlmetrics hook; " + (
        f"{ep.module} implements {', '.join(beside)}: name the module ({module})"
        if beside
        else "name a module (or an instance) holding @rlmetrics.hookimpl functions"
    )


def _hook_mistakes(pm: pluggy.PluginManager, plugin: Any) -> list[str]:
    """What is wrong with ``plugin``'s hook implementations, each saying what to change: a
    name that is no hook (with the hook meant), an argument the hook does not have."""
    specs = _spec_arguments()
    mistakes = []
    for attribute, hook in _hookimpls(pm, plugin):
        if hook not in specs:
            meant = difflib.get_close_matches(hook, specs, n=1)
            mistakes.append(
                f"{hook!r} is not an rlmetrics hook: did you mean {meant[0]!r}?"
                if meant
                else f"{hook!r} is not an rlmetrics hook; the hooks are {', '.join(sorted(specs))}"
            )
            continue
        for argument in (a for a in _arguments(plugin, attribute) if a not in specs[hook]):
            mistakes.append(
                f"hook {hook!r} has no argument {argument!r}: it takes any of "
                f"{', '.join(specs[hook])}"
            )
    return mistakes


@attrs.frozen
class _Candidate:
    entry_point: EntryPoint
    distribution: str | None
    version: str | None

    @property
    def builtin(self) -> bool:
        return self.distribution is not None and normalize(self.distribution) == CORE_DISTRIBUTION

    def row(self, status: str, **fields: Any) -> PluginInfo:
        return PluginInfo(
            self.entry_point.name,
            self.distribution,
            self.version,
            status,
            builtin=self.builtin,
            **fields,
        )


def _candidate(ep: EntryPoint) -> _Candidate:
    """An entry point with its distribution's name and version, read once."""
    dist = getattr(ep, "dist", None)
    metadata = dist.metadata if dist is not None else None  # parsed once, not per field
    return _Candidate(
        ep,
        metadata["Name"] if metadata is not None else None,
        metadata["Version"] if metadata is not None else None,
    )


#: Groups an author means for ``rlmetrics`` but rlmetrics never reads (besides the spellings
#: close to it): an entry point there would be absent from every listing, unsaid.
_MISSPELT_GROUPS = frozenset({"rlmetrics-plugins", "rlmetrics-plugin"})


def _misspelt_group(group: str) -> bool:
    """Whether entry-point ``group`` looks like ``rlmetrics`` misspelt (the groups of
    rlmetrics' own distributions, ``rlmetrics.ranks`` and ``rlmetrics_gym``, do not)."""
    name = normalize(group)
    if name == ENTRY_POINT_GROUP:
        return False
    close = difflib.SequenceMatcher(None, name, ENTRY_POINT_GROUP).ratio() >= 0.85
    return name in _MISSPELT_GROUPS or close


def _misplaced(everything: Any) -> list[PluginInfo]:
    """A failed row for each entry point in a group that looks like ``rlmetrics`` misspelt."""
    rows = []
    for group in sorted(g for g in everything.groups if _misspelt_group(g)):
        for ep in everything.select(group=group):
            rows.append(
                _candidate(ep).row(
                    FAILED,
                    reason=f"entry point in group {group!r}, which rlmetrics never reads: "
                    f"declare it under [project.entry-points.{ENTRY_POINT_GROUP}]",
                )
            )
    return rows


def _candidates(everything: Any = None) -> list[_Candidate]:
    """Every entry point of the group (of ``everything``, the installed entry points, when
    given), with its distribution read once."""
    from importlib.metadata import entry_points

    found = [
        _candidate(ep) for ep in (everything or entry_points()).select(group=ENTRY_POINT_GROUP)
    ]
    # Built-ins first (their declarations come first), then by distribution and name.
    found.sort(key=lambda c: (not c.builtin, normalize(c.distribution or ""), c.entry_point.name))
    return found


def _resolve_clashes(
    candidates: list[_Candidate], overrides: Mapping[str, str]
) -> tuple[list[_Candidate], list[PluginInfo]]:
    """One candidate per entry-point name; rows for the others, each saying why."""
    by_name: dict[str, list[_Candidate]] = {}
    for candidate in candidates:
        by_name.setdefault(normalize(candidate.entry_point.name), []).append(candidate)
    chosen: list[_Candidate] = []
    shadowed: list[PluginInfo] = []
    for name, rivals in by_name.items():
        wanted = overrides.get(name)
        winner = next(
            (c for c in rivals if wanted and normalize(c.distribution or "") == wanted),
            rivals[0],  # sorted: the built-in if there is one, else the first distribution
        )
        chosen.append(winner)
        losers = [c for c in rivals if c is not winner]
        if not losers:
            continue
        offered = ", ".join(repr(c.distribution) for c in rivals)
        # An override that picked the winner is the user's deliberate choice: warned every run,
        # it would read as if the choice had not taken (`rlmetrics plugins` lists the others).
        if not (wanted and normalize(winner.distribution or "") == wanted):
            warn_once(
                f"plugin-clash:{name}",
                f"rlmetrics: entry point {winner.entry_point.name!r} is offered by {offered}; "
                f"{winner.distribution!r} is used. Entry-point names share one namespace with "
                f"the core's: rename one, or choose with {OVERRIDE_ENV}={name}=<distribution>",
            )
        for loser in losers:
            shadowed.append(
                loser.row(
                    DISABLED,
                    reason=f"entry-point name clash: {winner.distribution!r} is used "
                    f"({OVERRIDE_ENV}={name}={loser.distribution} chooses this one)",
                )
            )
    return chosen, shadowed


def _matches(candidate: _Candidate, names: set[str]) -> bool:
    return normalize(candidate.entry_point.name) in names or (
        candidate.distribution is not None and normalize(candidate.distribution) in names
    )


def _load(plugins: Plugins, candidate: _Candidate, quiet: bool = False) -> PluginInfo:
    """Import and register one entry point; a failure rolls back what it declared and is
    warned (unless ``quiet``: a command that lists the failures itself)."""
    ep = candidate.entry_point
    registry = default_registry()
    mark = registry.mark()

    def imported_elsewhere(owner: str) -> bool:
        # A module the plugin imported that stays imported (its own import succeeded) never
        # declares again: its series must stay for the plugins that share it.
        own = owner == ep.module or owner.startswith(ep.module + ".")
        return not own and owner in sys.modules

    try:
        plugin = ep.load()
        problem = _misnamed(plugins.pm, plugin, ep) or plugins.register(plugin, ep.name)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit at a plugin's import must not end the job
        registry.rollback(mark, keep=imported_elsewhere)
        if not quiet:
            warn_once(
                f"plugin-load:{ep.name}",
                f"rlmetrics: plugin {ep.name!r} ({ep.value}, from {candidate.distribution}) "
                f"failed to import and is skipped; the other plugins load: {exc!r}",
            )
        return candidate.row(
            FAILED, reason=f"import failed: {exc!r}", traceback=traceback.format_exc()
        )
    if problem is not None:
        registry.rollback(mark, keep=imported_elsewhere)
        if not quiet:
            warn_once(
                f"plugin-load:{ep.name}",
                f"rlmetrics: plugin {ep.name!r} skipped, its hooks are invalid (from "
                f"{candidate.distribution}): {problem}",
            )
        return candidate.row(FAILED, reason=f"invalid hooks: {problem}")
    module = ep.module

    def own(owner: str) -> bool:
        return owner == module or owner.startswith(module + ".")

    series = tuple(item.spec.name for item in registry.declared() if own(item.owner))
    keys = tuple(dict.fromkeys(p.key for p in registry.key_patterns() if own(p.owner)))
    return candidate.row(LOADED, hooks=plugins.hooks_of(ep.name), series=series, keys=keys)


def installed_names() -> dict[str, str]:
    """Every entry-point and distribution name of the ``rlmetrics`` group, normalised, as each
    is spelled: the names an allow- or deny-list may use."""
    names: dict[str, str] = {}
    for candidate in _candidates():
        names[normalize(candidate.entry_point.name)] = candidate.entry_point.name
        if candidate.distribution:
            names.setdefault(normalize(candidate.distribution), candidate.distribution)
    return names


def check_plugin_lists(
    allow: Iterable[str] | str | None = None, deny: Iterable[str] | str | None = None
) -> None:
    """Raise ``ValueError`` naming every name in the allow- and deny-lists (``allow``/``deny``,
    else ``RLMETRICS_PLUGINS``/``RLMETRICS_DISABLE_PLUGINS``) that no installed plugin has, with
    the installed names: a misspelled name would otherwise load, or deny, nothing in silence."""
    from .configuration import check_plugin_names

    known: dict[str, str] | None = None
    for given, env, source in (
        (allow, ALLOW_ENV, "plugins="),
        (deny, DENY_ENV, "disable_plugins="),
    ):
        value = given if given is not None else os.environ.get(env)
        if value is None:
            continue
        names = value.split(",") if isinstance(value, str) else list(value)
        if known is None:
            known = installed_names()
        check_plugin_names(names, source if given is not None else env, known)
    check_overrides(known)


def check_overrides(known: Mapping[str, str] | None = None) -> None:
    """Raise ``ConfigurationError`` for a ``RLMETRICS_OVERRIDE_PLUGINS`` entry that is not
    ``name=distribution`` or chooses a distribution (or plugin) nobody installed: it would
    choose nothing, and the built-in would go on winning in silence."""
    from .configuration import ConfigurationError, check_plugin_names

    value = os.environ.get(OVERRIDE_ENV)
    if not value:
        return
    parts = [part.strip() for part in value.split(",") if part.strip()]
    for part in parts:
        name, _, distribution = part.partition("=")
        if not (name.strip() and distribution.strip()):
            raise ConfigurationError(
                f"{OVERRIDE_ENV}: {part!r} is not name=distribution (as in training=acme-rlmetrics)"
            )
    chosen = [part.partition("=")[2].strip() for part in parts]
    check_plugin_names(chosen, OVERRIDE_ENV, known if known is not None else installed_names())


def load_plugins(
    allow: Iterable[str] | None = None,
    deny: Iterable[str] | None = None,
    *,
    quiet: bool = False,
) -> Plugins:
    """Build the process's plugin manager from the ``rlmetrics`` entry points.

    ``allow`` (else ``RLMETRICS_PLUGINS``) lists the third-party entry point or distribution
    names to load, all other third-party plugins being skipped; the core's built-ins load
    regardless. ``deny`` (else ``RLMETRICS_DISABLE_PLUGINS``) lists names never to load,
    built-ins included. ``quiet`` records a plugin's failure without warning about it (a
    command that lists the failures itself).
    """
    allow_source = "allow=" if allow is not None else ALLOW_ENV
    deny_source = "deny=" if deny is not None else DENY_ENV
    allowed = _names(allow if allow is not None else os.environ.get(ALLOW_ENV))
    denied = _names(deny if deny is not None else os.environ.get(DENY_ENV)) or set()
    from importlib.metadata import entry_points

    plugins = Plugins()
    everything = entry_points()  # read once: this group's and the misspelt ones'
    chosen, shadowed = _resolve_clashes(_candidates(everything), overrides())
    for candidate in chosen:
        if _matches(candidate, denied):
            info = candidate.row(DISABLED, reason=f"denied by {deny_source}")
        elif allowed is not None and not candidate.builtin and not _matches(candidate, allowed):
            info = candidate.row(DISABLED, reason=f"not in the allow-list {allow_source}")
        else:
            info = _load(plugins, candidate, quiet)
        plugins.infos.append(info)
    plugins.infos.extend(shadowed)
    for row in _misplaced(everything):
        if not quiet:
            warn_once(
                f"plugin-group:{row.name}",
                f"rlmetrics: plugin {row.name!r} ({row.distribution}): {row.reason}",
            )
        plugins.infos.append(row)
    for name, plugin in _in_process.items():
        _register_in_process(plugins, plugin, name)
    global _plugins
    with _lock:
        _plugins = plugins
    return plugins


_plugins: Plugins | None = None
_in_process: dict[str, Any] = {}
_lock = threading.Lock()


@reset_in_child
def _new_lock_after_fork() -> None:
    global _lock
    _lock = threading.Lock()


def _plugin_name(plugin: Any) -> str:
    """A module's name, else the object's class name."""
    return str(getattr(plugin, "__name__", None) or type(plugin).__name__)


def _register_in_process(plugins: Plugins, plugin: Any, name: str) -> str | None:
    problem = plugins.register(plugin, name)
    status = FAILED if problem else LOADED
    plugins.infos.append(
        PluginInfo(name, None, None, status, hooks=plugins.hooks_of(name), reason=problem)
    )
    return problem


def register(plugin: Any, name: str | None = None) -> bool:
    """Register a plugin object from code (no entry point), for this process.

    It stays registered when ``rlmetrics.start()`` reloads the entry points, and the allow-
    and deny-lists do not apply to it: registering it is already an explicit choice. Returns
    False, with a warning naming it, if its hooks are invalid.
    """
    name = name or _plugin_name(plugin)
    plugins = get_plugins()
    if plugins.pm.get_plugin(name) is plugin:
        return True  # registered already (a module imported twice, a test's setup run again)
    problem = _register_in_process(plugins, plugin, name)
    if problem is not None:
        logger.warning("rlmetrics: plugin %r skipped: %s", name, problem)
        return False
    _in_process[name] = plugin
    return True


def get_plugins() -> Plugins:
    """The loaded plugins, loading them (with the environment's lists) on first use."""
    plugins = _plugins
    return plugins if plugins is not None else load_plugins()


def hooks() -> Hooks:
    """The typed hooks of the loaded plugins."""
    return get_plugins().hooks
