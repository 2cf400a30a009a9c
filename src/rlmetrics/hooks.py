"""Calling the hooks: one typed method per hook, through pluggy, each implementation guarded.

pluggy's fan-out stops at the first implementation that raises, and the training loop must
survive any plugin. So when a plugin is registered, each of its implementations is wrapped in
a guard that reports a failure once (plugin and hook named) and returns nothing; the call then
goes through pluggy's own hook caller, which keeps its ordering (``tryfirst``/``trylast``),
argument subsets and wrappers. Wrappers are guarded too: one that fails before its ``yield``
steps aside and the others still run; one that fails after it leaves the result as it was.

The data hooks are called on every logged dict, and pluggy's caller costs about 4 µs a call
(its checks, a copy of the implementation list, the wrapper machinery): a tenth of a step. So
while every implementation of a data hook is a plain one (no wrapper, no keyword-only
argument), the hook calls them itself, in the order pluggy would, with the arguments each
names, each in the same guard; one wrapper anywhere sends the call back through pluggy.
``log_metrics`` skips, too, the implementations that declare what they read
(``@rlmetrics.hookimpl(prefixes=..., keys=...)``) for a dict they do not read, decided once
per prefix and key sequence.

The typed methods make a misspelt hook a type error rather than a silent no-op.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import operator
import signal
import sys
import threading
from collections.abc import Callable, Generator, Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import pluggy

from ._warn import warn_once
from .hookspecs import READS_ATTRIBUTE, TEE_ATTRIBUTE, Reads
from .keyplans import KeyPlans
from .registry import is_exporting

if TYPE_CHECKING:
    from .backends import BackendFactory
    from .events import Alert, EfficiencySummary, RolloutEvent, SetupTimings
    from .exporters import ExporterFactory
    from .plugins import Plugins
    from .telemetry import Telemetry
    from .tracing import PhaseKind

__all__ = [
    "HookFailure",
    "Hooks",
    "collect_offered",
    "collect_offers",
    "current_plugin",
    "guard_implementations",
    "offered_label",
    "recording_failures",
    "running_plugin",
    "when_registered",
]

_Factory = TypeVar("_Factory")
_Offered = TypeVar("_Offered")

_current_plugin: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "rlmetrics_current_plugin", default=None
)


def current_plugin() -> str | None:
    """The name of the plugin whose hook implementation is running, if any (so a
    ``register`` callback can say who offered what)."""
    return _current_plugin.get()


def collect_offers(
    what: str,
    call: Callable[[Callable[[str, _Factory], None]], None],
    plugins: Plugins | None = None,
) -> dict[str, tuple[str, _Factory]]:
    """``{name: (offering plugin, factory)}`` from a registration hook (``call`` is, say,
    ``plugins.hooks.register_backends``).

    A name offered by two plugins follows the entry-point rule: the core's built-in wins,
    between third parties the first by distribution name, unless
    ``RLMETRICS_OVERRIDE_PLUGINS=<name>=<distribution or plugin>`` picks another. The clash
    is warned naming both, and each loser is recorded on ``plugins`` (default: the loaded
    plugins), so ``rlmetrics plugins`` lists it.
    """
    from .plugins import OVERRIDE_ENV, get_plugins, normalize, overrides

    plugins = plugins or get_plugins()
    offers: dict[str, list[tuple[str, _Factory]]] = {}

    def register(name: str, factory: _Factory) -> None:
        if not isinstance(name, str) or not name:
            # Raised into the offering plugin's hook, whose guard reports it naming the
            # plugin: a junk name must not fail the collection every other offer is in.
            raise TypeError(f"rlmetrics: {what} names are non-empty strings, got {name!r}")
        owner = current_plugin() or "?"
        offered = offers.setdefault(name, [])
        if not any(known is factory for _, known in offered):
            offered.append((owner, factory))

    call(register)
    chosen = overrides()
    found: dict[str, tuple[str, _Factory]] = {}
    for name, offered in offers.items():
        ranked = sorted(offered, key=lambda offer: plugins.rank(offer[0]))
        wanted = chosen.get(normalize(name))
        winner = next((o for o in ranked if wanted and wanted in plugins.names_of(o[0])), ranked[0])
        found[name] = winner
        losers = [offer for offer in ranked if offer is not winner]
        if not losers:
            continue
        # An override that picked the winner is the user's deliberate choice: warned every run,
        # it would read as if the choice had not taken (`rlmetrics plugins` lists the losers).
        deliberate = bool(wanted) and wanted in plugins.names_of(winner[0])
        named = " and ".join(plugins.describe(owner) for owner, _ in ranked)
        if not deliberate:
            warn_once(
                f"{what}-clash:{name}",
                f"rlmetrics: {what} {name!r} is offered by {named}; {plugins.describe(winner[0])} "
                f"is used. The core's built-in wins unless {OVERRIDE_ENV}={name}=<distribution> "
                "chooses another",
            )
        for owner, _ in losers:
            plugins.shadow(what, name, owner, winner[0])
    return found


def collect_offered(
    call: Callable[[Callable[[_Offered], None]], None],
) -> list[tuple[str, _Offered]]:
    """What a registration hook offers without a name (a dashboard row's builder, an alert
    rule's), each with the plugin that offered it (``call`` is, say,
    ``plugins.hooks.register_dashboard_rows``)."""
    offered: list[tuple[str, _Offered]] = []
    call(lambda item: offered.append((current_plugin() or "?", item)))
    return offered


def offered_label(plugin: str, item: object) -> str:
    """``acme.dash.build (plugin 'acme_dash')``: what a plugin offered, for a message."""
    module, name = getattr(item, "__module__", None), getattr(item, "__qualname__", None)
    what = f"{module}.{name}" if callable(item) and module and name else repr(item)
    return f"{what} (plugin {plugin!r})"


class HookFailure(NamedTuple):
    """An implementation that failed while :func:`recording_failures` listened."""

    plugin: str
    hook: str
    error: str  # the exception's repr


_recording: contextvars.ContextVar[list[HookFailure] | None] = contextvars.ContextVar(
    "rlmetrics_hook_failures", default=None
)


@contextlib.contextmanager
def recording_failures() -> Iterator[list[HookFailure]]:
    """List the implementations that fail in this context (``rlmetrics check`` makes each an
    error: what such a hook registers is missing from what it checks)."""
    failures: list[HookFailure] = []
    token = _recording.set(failures)
    try:
        yield failures
    finally:
        _recording.reset(token)


def _report(plugin: str, hook: str, what: str = "raised") -> None:
    failures = _recording.get()
    if failures is not None:
        error = sys.exc_info()[1]
        failures.append(HookFailure(plugin, hook, repr(error) if error is not None else what))
    warn_once(
        f"hook:{plugin}:{hook}",
        f"rlmetrics: plugin {plugin!r} {what} in hook {hook!r}; the other plugins ran and "
        "training goes on",
    )


def _interrupts(exc: BaseException) -> bool:
    """Whether ``exc`` is the job's, not the plugin's: a Ctrl-C, or what a Python signal
    handler raised (a SIGTERM's ``sys.exit``) while it ran on this thread inside a plugin's
    code. The kernel's signal must end the job wherever it lands."""
    if isinstance(exc, KeyboardInterrupt):
        return True
    handlers = set()
    for number in signal.valid_signals():
        try:
            handler = signal.getsignal(number)
        except (ValueError, OSError):
            continue
        code = getattr(getattr(handler, "__func__", handler), "__code__", None)
        if code is not None:
            handlers.add(code)
    trace = exc.__traceback__
    while trace is not None:
        if trace.tb_frame.f_code in handlers:
            return True
        trace = trace.tb_next
    return False


def _guard(function: Callable[..., Any], plugin: str, hook: str) -> Callable[..., Any]:
    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except BaseException as exc:  # SystemExit from a plugin must not end the training job
            if _interrupts(exc):
                raise
            _report(plugin, hook)
            return None

    if hook in _LIFECYCLE:
        return _tracked(guarded, plugin)
    if not hook.startswith("register_"):
        return guarded

    @functools.wraps(function)
    def naming(*args: Any, **kwargs: Any) -> Any:
        # A registration hook's ``register`` callback asks which plugin is offering.
        token = _current_plugin.set(plugin)
        try:
            return guarded(*args, **kwargs)
        finally:
            _current_plugin.reset(token)

    return naming


#: The hooks whose running implementation a thread records (:func:`running_plugin`): the
#: lifecycle hooks, which telemetry waits for with a bound and names the one that hangs. Not
#: the data hooks: their path stays as cheap as it is.
_LIFECYCLE = frozenset({"telemetry_started", "telemetry_stopping"})
_running: dict[int, str] = {}


def _tracked(guarded: Callable[..., Any], plugin: str) -> Callable[..., Any]:
    @functools.wraps(guarded)
    def tracked(*args: Any, **kwargs: Any) -> Any:
        thread = threading.get_ident()
        _running[thread] = plugin
        try:
            return guarded(*args, **kwargs)
        finally:
            _running.pop(thread, None)

    return tracked


#: How long ``telemetry_started`` may run before the plugin ``rlmetrics.start()`` is still
#: waiting for is named in a warning (a hook starts its samplers and returns at once).
STARTED_HOOK_BOUND_S = 10.0


def _say_started_hangs(thread: threading.Thread, bound_s: float) -> None:
    plugin = running_plugin(thread)
    if plugin is None:  # it returned meanwhile
        return
    message = (
        f"rlmetrics: 'telemetry_started' of plugin {plugin!r} did not return within "
        f"{bound_s:.1f} s, and rlmetrics.start() waits for it (it runs on start()'s thread), "
        "so the training loop has not begun: a hook starts its samplers and returns "
        "(docs/writing-a-plugin.md); RLMETRICS_DISABLE_PLUGINS turns an installed plugin off"
    )
    # A warning, not strict mode's unmet promise: a hook that is slow but returns (a plugin
    # connecting to its cluster) has done what it should.
    logging.getLogger("rlmetrics").warning(message)


def running_plugin(thread: threading.Thread) -> str | None:
    """The plugin whose lifecycle hook (``telemetry_started``/``telemetry_stopping``)
    ``thread`` is running now, if any."""
    return _running.get(thread.ident) if thread.ident is not None else None


def _guard_wrapper(function: Callable[..., Any], plugin: str, hook: str) -> Callable[..., Any]:
    """Guard a ``wrapper=True`` or ``hookwrapper=True`` implementation: drive its generator,
    passing through whatever pluggy sends (the result, or a ``Result`` for old-style ones)."""

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Generator[None, Any, Any]:
        try:
            wrapped = function(*args, **kwargs)
            next(wrapped)
        except BaseException as exc:  # raised, or returned without yielding
            if _interrupts(exc):
                raise
            _report(plugin, hook, "failed before its yield")
            return (yield)  # step aside: the other implementations still run
        try:
            sent = yield
        except BaseException as exc:  # thrown in by pluggy: let the wrapper clean up
            try:
                wrapped.throw(exc)
            except StopIteration as stop:
                return stop.value
            raise
        try:
            wrapped.send(sent)
        except StopIteration as stop:
            return stop.value
        except BaseException as exc:
            if _interrupts(exc):
                raise
            _report(plugin, hook, "failed after its yield")
            return sent
        wrapped.close()
        _report(plugin, hook, "yielded twice")
        return sent

    return guarded


def guard_implementations(pm: pluggy.PluginManager, plugin: object) -> None:
    """Wrap every hook implementation of a registered ``plugin`` in its own guard."""
    for caller in pm.get_hookcallers(plugin) or ():
        for impl in caller.get_hookimpls():
            if impl.plugin is not plugin:
                continue
            tee = getattr(impl.function, TEE_ATTRIBUTE, False)
            reads = getattr(impl.function, READS_ATTRIBUTE, None)
            guard = _guard_wrapper if (impl.wrapper or impl.hookwrapper) else _guard
            # pluggy calls ``impl.function``; replacing it is how the guard goes through
            # pluggy's own fan-out (typed Final in pluggy, hence setattr).
            guarded = guard(impl.function, impl.plugin_name, caller.name)
            setattr(guarded, TEE_ATTRIBUTE, tee)
            setattr(guarded, READS_ATTRIBUTE, reads)
            # The data hooks' own loop guards each call itself (see _run): one frame less.
            setattr(guarded, _UNGUARDED, impl.function)
            setattr(impl, "function", guarded)  # noqa: B010


#: Set on a guard: the implementation it guards.
_UNGUARDED = "rlmetrics_unguarded"


def _fan_out(caller: pluggy.HookCaller, **kwargs: Any) -> None:
    # Every implementation is guarded; this catches what pluggy itself raises.
    try:
        caller(**kwargs)
    except BaseException as exc:
        if _interrupts(exc):
            raise
        warn_once(f"hook:{caller.name}", f"rlmetrics: calling hook {caller.name!r} failed")


class _PlainCall(NamedTuple):
    """One plain implementation of a data hook as the hook calls it itself: ``function``
    (unguarded: :func:`_run` guards it), ``pick`` taking the arguments it names from the
    spec's (None: all of them, in order), the plugin that owns it and what it reads. A named
    tuple: the loop unpacks it."""

    function: Callable[..., Any]
    pick: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None
    plugin: str
    reads: Reads | None


def _picker(
    spec_names: tuple[str, ...], names: tuple[str, ...]
) -> Callable[[tuple[Any, ...]], tuple[Any, ...]] | None:
    """What takes the arguments ``names`` from a tuple of the spec's ``spec_names``."""
    if names == spec_names:
        return None
    positions = [spec_names.index(name) for name in names]
    if len(positions) > 1:
        return operator.itemgetter(*positions)
    if positions:
        (position,) = positions
        return lambda args: (args[position],)
    return lambda _args: ()


def _plain_calls(caller: pluggy.HookCaller) -> tuple[_PlainCall, ...] | None:
    """Each implementation in pluggy's call order (its list reversed), if every one is plain;
    None if any is a wrapper or takes keyword-only arguments, which only pluggy's caller
    handles."""
    impls = caller.get_hookimpls()
    if any(impl.wrapper or impl.hookwrapper or impl.kwargnames for impl in impls):
        return None
    spec_names = tuple(caller.spec.argnames) if caller.spec is not None else ()
    return tuple(
        _PlainCall(
            getattr(impl.function, _UNGUARDED, impl.function),
            _picker(spec_names, tuple(impl.argnames)),
            impl.plugin_name,
            getattr(impl.function, READS_ATTRIBUTE, None),
        )
        for impl in reversed(impls)
    )


def _run(calls: tuple[_PlainCall, ...], hook: str, args: tuple[Any, ...]) -> None:
    """Call each implementation with the arguments it names, each in its own guard (the
    guard :func:`_guard` puts around it for pluggy, without its frame)."""
    for function, pick, plugin, _reads in calls:
        try:
            if pick is None:
                function(*args)
            else:
                function(*pick(args))
        except BaseException as exc:  # SystemExit from a plugin must not end the training job
            if _interrupts(exc):
                raise
            _report(plugin, hook)


#: Called with the hooks each time a plugin is registered (:func:`when_registered`).
_on_registered: list[Callable[[Hooks], None]] = []


def when_registered(callback: Callable[[Hooks], None]) -> None:
    """Call ``callback(hooks)`` each time a plugin is registered, once its hooks are in
    place (the stall watch starts when a first ``on_alert`` implementation appears). The
    callback must not raise and must not load plugins."""
    _on_registered.append(callback)


class _ViaPluggy:
    """The plan of a hook some wrapper wraps: pluggy's caller runs it."""


_VIA_PLUGGY = _ViaPluggy()


class Hooks:
    """The hooks of one plugin manager, one typed method each (see :mod:`.hookspecs`)."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self._hook = pm.hook
        self._wanted_unexported: dict[str, bool] = {}
        self._plain: dict[str, tuple[_PlainCall, ...] | None] = {}
        self._metrics_plans = KeyPlans(self._plan_log_metrics)
        self._plans_by_keys: bool | None = None

    def implemented(self, name: str) -> bool:
        """Whether any registered plugin implements hook ``name``."""
        caller = getattr(self._hook, name, None)
        return caller is not None and bool(caller.get_hookimpls())

    def wanted(self, name: str) -> bool:
        """Whether calling hook ``name`` can do anything now: telemetry is exporting, or an
        implementation not marked ``tee=True`` exists."""
        if is_exporting():
            return True
        wanted = self._wanted_unexported.get(name)
        if wanted is None:
            caller = getattr(self._hook, name, None)
            impls = caller.get_hookimpls() if caller is not None else ()
            wanted = any(not getattr(i.function, TEE_ATTRIBUTE, False) for i in impls)
            self._wanted_unexported[name] = wanted
        return wanted

    def changed(self) -> None:
        """A plugin was registered: forget what :meth:`wanted` and the data hooks' calls
        worked out."""
        self._wanted_unexported.clear()
        self._plain.clear()
        self._metrics_plans = KeyPlans(self._plan_log_metrics)
        self._plans_by_keys = None
        for callback in _on_registered:
            callback(self)

    def _plain_of(self, name: str) -> tuple[_PlainCall, ...] | None:
        if name in self._plain:
            return self._plain[name]
        plain = self._plain[name] = _plain_calls(getattr(self._hook, name))
        return plain

    def _call_data_hook(self, name: str, args: tuple[Any, ...]) -> None:
        plain = self._plain_of(name)
        if plain is None:
            caller = getattr(self._hook, name)
            _fan_out(caller, **dict(zip(caller.spec.argnames, args, strict=True)))
            return
        # pluggy checked at registration that each names only arguments of the hook's spec.
        _run(plain, name, args)

    def _plan_log_metrics(
        self, prefix_and_keys: tuple[Any, ...]
    ) -> tuple[_PlainCall, ...] | _ViaPluggy:
        """The ``log_metrics`` implementations a dict of these keys (or of any keys, while no
        implementation declares keys) under this prefix reaches: those that declare nothing
        and those whose declaration admits it."""
        plain = self._plain_of("log_metrics")
        if plain is None:
            return _VIA_PLUGGY
        prefix, keys = prefix_and_keys[0], prefix_and_keys[1:]
        return tuple(c for c in plain if c.reads is None or c.reads.admits(prefix, keys))

    def _some_declare_keys(self) -> bool:
        plain = self._plain_of("log_metrics")
        return plain is not None and any(
            call.reads is not None and call.reads.keys is not None for call in plain
        )

    # The data hooks are skipped when only tee implementations would run and telemetry is
    # not exporting: they would all return at once.

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        if not (is_exporting() or self.wanted("log_metrics")):  # exporting: one call, not two
            return
        if type(metrics) is dict:
            # One view for every implementation: a plugin that pops or overwrites a key raises
            # in its own guard, instead of taking the key from every family after it.
            metrics = MappingProxyType(metrics)
        # Which implementations read such a dict is worked out once per prefix and key
        # sequence (a loop logs the same keys every step), or once per prefix while no
        # implementation declares keys: then a loop whose keys churn holds no plans for them.
        by_keys = self._plans_by_keys
        if by_keys is None:
            by_keys = self._plans_by_keys = self._some_declare_keys()
        plan = self._metrics_plans((prefix, *metrics) if by_keys else (prefix,))
        if plan is _VIA_PLUGGY:
            _fan_out(self._hook.log_metrics, metrics=metrics, step=step, prefix=prefix)
        elif plan:
            _run(plan, "log_metrics", (metrics, step, prefix))  # type: ignore[arg-type]

    def on_setup_timing(self, timings: SetupTimings) -> None:
        if self.wanted("on_setup_timing"):
            self._call_data_hook("on_setup_timing", (timings,))

    def on_efficiency_summary(self, summary: EfficiencySummary, step: int) -> None:
        if self.wanted("on_efficiency_summary"):
            self._call_data_hook("on_efficiency_summary", (summary, step))

    def on_rollout_checkpoint(self, event: RolloutEvent) -> None:
        if self.wanted("on_rollout_checkpoint"):
            self._call_data_hook("on_rollout_checkpoint", (event,))

    # -- trajectories (issue 33)
    def on_trajectories(self, batch: TrajectoryBatch) -> None:
        if self.wanted("on_trajectories"):
            self._call_data_hook("on_trajectories", (batch,))

    def on_alert(self, alert: Alert) -> None:
        _fan_out(self._hook.on_alert, alert=alert)

    def telemetry_started(self, telemetry: Telemetry) -> None:
        # On the caller's thread, as start() was called (a plugin may install signal
        # handlers, which only the main thread can), so it cannot be left behind as
        # telemetry_stopping is; a watch names the plugin start() is still waiting for.
        caller = threading.current_thread()
        bound_s = STARTED_HOOK_BOUND_S
        watch = threading.Timer(bound_s, _say_started_hangs, args=(caller, bound_s))
        watch.daemon = True
        watch.name = "rlmetrics-telemetry-started-watch"
        with contextlib.suppress(RuntimeError):  # at exit, Python 3.12+ starts no thread
            watch.start()
        try:
            _fan_out(self._hook.telemetry_started, telemetry=telemetry)
        finally:
            watch.cancel()

    def telemetry_stopping(self, telemetry: Telemetry) -> None:
        _fan_out(self._hook.telemetry_stopping, telemetry=telemetry)

    def register_backends(self, register: Callable[[str, BackendFactory], None]) -> None:
        _fan_out(self._hook.register_backends, register=register)

    def register_exporters(self, register: Callable[[str, ExporterFactory], None]) -> None:
        _fan_out(self._hook.register_exporters, register=register)

    def register_phases(self, register: Callable[[str, PhaseKind], None]) -> None:
        _fan_out(self._hook.register_phases, register=register)

    def register_demo_parts(self, register: Callable[[str, DemoPartFactory], None]) -> None:
        _fan_out(self._hook.register_demo_parts, register=register)

    def register_dashboard_rows(self, register: Callable[[RowBuilder], None]) -> None:
        _fan_out(self._hook.register_dashboard_rows, register=register)

    def register_check_exemptions(self, register: Callable[[Exemption], None]) -> None:
        _fan_out(self._hook.register_check_exemptions, register=register)

    def register_key_maps(self, register: Callable[[KeyMap], None]) -> None:
        _fan_out(self._hook.register_key_maps, register=register)

    def register_alert_rules(self, register: Callable[[RuleBuilder], None]) -> None:
        _fan_out(self._hook.register_alert_rules, register=register)

    def register_variables(self, register: Callable[[Variable], None]) -> None:
        _fan_out(self._hook.register_variables, register=register)


if TYPE_CHECKING:
    from .alerts.model import RuleBuilder
    from .check import Exemption
    from .dashboard.model import RowBuilder
    from .demo.parts import DemoPartFactory
    from .keymaps import KeyMap
    from .trajectories import TrajectoryBatch
    from .variables import Variable
