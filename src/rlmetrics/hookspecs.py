"""The hooks a plugin can implement.

A plugin is a module (or object) with functions named after these specs and marked with
``@rlmetrics.hookimpl``; it is found through an entry point in the ``rlmetrics`` group. An
implementation may accept any subset of a hook's arguments, so hooks can grow arguments
without breaking plugins. ``@rlmetrics.hookimpl(wrapper=True)`` (and pluggy's older
``hookwrapper=True``) wrap the other implementations of a hook, as in pluggy.

Each implementation runs in its own guard: if it raises (anything but ``KeyboardInterrupt``,
``SystemExit`` included), rlmetrics reports it once, naming plugin and hook, and goes on with
the other plugins. A hook never raises into the training loop, so do not rely on raising to
signal anything.

rlmetrics calls these through :class:`rlmetrics.hooks.Hooks`, one typed method per hook.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

import attrs
import pluggy

from .key_patterns import pattern_regex

if TYPE_CHECKING:
    from .backends import BackendFactory
    from .events import Alert, EfficiencySummary, RolloutEvent, SetupTimings
    from .exporters import ExporterFactory
    from .telemetry import Telemetry
    from .tracing import PhaseKind
    from .trajectories import TrajectoryBatch

__all__ = ["READS_ATTRIBUTE", "TEE_ATTRIBUTE", "Reads", "hookimpl", "hookspec"]

hookspec = pluggy.HookspecMarker("rlmetrics")
_pluggy_hookimpl = pluggy.HookimplMarker("rlmetrics")

#: Set on a hook implementation marked ``tee=True``.
TEE_ATTRIBUTE = "rlmetrics_tee"
#: Set on a ``log_metrics`` implementation that declares what it reads (:class:`Reads`).
READS_ATTRIBUTE = "rlmetrics_reads"

_F = TypeVar("_F", bound=Callable[..., Any])


def _patterns(name: str, given: Iterable[str] | None) -> tuple[str, ...] | None:
    if given is None:
        return None
    if isinstance(given, str) or not isinstance(given, Iterable):
        raise TypeError(
            f"rlmetrics.hookimpl({name}=...) takes a list of patterns, got {given!r}: write "
            f"{name}=[{given!r}]"
        )
    patterns = tuple(given)
    if not patterns or not all(isinstance(p, str) for p in patterns):
        raise TypeError(
            f"rlmetrics.hookimpl({name}=...) takes a non-empty list of strings, got {given!r}"
        )
    return patterns


@attrs.frozen
class Reads:
    """What a ``log_metrics`` implementation declares it reads: dicts logged under a prefix
    matching one of ``prefixes``, and of those only the ones with a key matching one of
    ``keys`` (None: any). Patterns as :func:`rlmetrics.declare_keys` takes them: exact, ``*``
    for one path segment, ``**`` for any rest (``"vllm/**"``; ``"**"`` every key or prefix).

    The dispatcher skips the implementation for a dict it does not admit, decided once per
    prefix and key sequence (:mod:`rlmetrics.keyplans`), so a family that reads a few
    prefixes costs the other dicts nothing. (With a wrapper on the hook, pluggy's caller runs
    and every implementation gets every dict: the declaration is a promise that the
    implementation does nothing with the others.)"""

    prefixes: tuple[str, ...] | None = None
    keys: tuple[str, ...] | None = None

    def admits(self, prefix: str, keys: Collection[Any]) -> bool:
        """Whether a dict with ``keys`` logged under ``prefix`` reaches the implementation."""
        if self.prefixes is not None and not _matcher(self.prefixes).fullmatch(prefix):
            return False
        if self.keys is None:
            return True
        match = _matcher(self.keys).fullmatch
        return any(type(key) is str and match(key) for key in keys)


@functools.cache
def _matcher(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One regular expression matching any of ``patterns``, compiled once: a loop whose key
    sequences keep changing asks for a new plan, and each asks :meth:`Reads.admits`."""
    either = "|".join(f"(?:{pattern_regex(pattern).pattern})" for pattern in patterns)
    return re.compile(either, re.DOTALL)


@overload
def hookimpl(function: _F, /) -> _F: ...


@overload
def hookimpl(
    function: None = None,
    /,
    *,
    tee: bool = False,
    prefixes: Iterable[str] | None = None,
    keys: Iterable[str] | None = None,
    **options: Any,
) -> Callable[[_F], _F]: ...


def hookimpl(
    function: _F | None = None,
    /,
    *,
    tee: bool = False,
    prefixes: Iterable[str] | None = None,
    keys: Iterable[str] | None = None,
    **options: Any,
) -> _F | Callable[[_F], _F]:
    """Mark a hook implementation: ``@rlmetrics.hookimpl`` or ``@rlmetrics.hookimpl(...)``
    with pluggy's options (``tryfirst``, ``trylast``, ``wrapper``, ``hookwrapper``,
    ``specname``).

    ``tee=True`` says the implementation only mirrors data into OpenTelemetry, so it is
    called only while telemetry is exporting: when no other implementation wants a hook,
    rlmetrics then skips the call — and the parsing of its payload — altogether.

    ``prefixes`` and ``keys`` (``log_metrics`` only) declare which dicts the implementation
    reads (:class:`Reads`): ``@rlmetrics.hookimpl(prefixes=["gym/rollout"])``,
    ``(prefixes=["train", ""], keys=["acme/**"])``. rlmetrics then stops calling it for any
    other dict — a promise that it does nothing with them, for with a wrapper on the hook
    pluggy's caller runs every implementation. One that declares neither gets every dict.
    """
    reads = (
        None
        if prefixes is None and keys is None
        else Reads(_patterns("prefixes", prefixes), _patterns("keys", keys))
    )

    def mark(target: _F) -> _F:
        if reads is not None:
            hook = options.get("specname") or getattr(target, "__name__", "")
            if hook != "log_metrics" and difflib.get_close_matches(hook, ["log_metrics"], n=1):
                raise TypeError(
                    f"rlmetrics.hookimpl(prefixes=..., keys=...) on {hook!r}: {hook!r} is no "
                    "hook: did you mean 'log_metrics'?"
                )
            if hook != "log_metrics" or options.get("wrapper") or options.get("hookwrapper"):
                raise TypeError(
                    f"rlmetrics.hookimpl(prefixes=..., keys=...) on {hook!r}: only a plain "
                    "log_metrics implementation declares what it reads; drop the arguments "
                    "here (or filter inside the implementation)"
                )
        marked: _F = _pluggy_hookimpl(**options)(target)
        if tee:
            setattr(marked, TEE_ATTRIBUTE, True)
        if reads is not None:
            setattr(marked, READS_ATTRIBUTE, reads)
        return marked

    return mark(function) if function is not None else mark


# -- per-step metrics -----------------------------------------------------------------------


@hookspec
def log_metrics(metrics: Mapping[str, Any], step: int, prefix: str) -> None:
    """One dict the training loop logged, after every backend has written it.

    :param metrics: flat ``{key: value}``; nested dicts were flattened with ``/``. Values are
        whatever the loop logged (floats, ints, tensors, strings, lists…): take what you
        understand and ignore the rest. Read-only (every implementation reads the same
        mapping): ``dict(metrics)`` is a copy of your own to change or serialise.
    :param step: the trainer step the loop passed.
    :param prefix: the dict's prefix (``"train"``, ``""``, ``"timing/setup"``…); a key's meaning
        depends on it, so filter on it first.

    Called for every dict, including the ones also routed to a typed hook below, unless the
    implementation declares what it reads (``@rlmetrics.hookimpl(prefixes=[...],
    keys=[...])``): then only for the dicts it admits. Families that mirror values into
    OpenTelemetry record through :func:`rlmetrics.record`, which is a cheap no-op unless
    telemetry is exporting.
    """


@hookspec
def on_setup_timing(timings: SetupTimings) -> None:
    """Startup phase durations, once per run.

    :param timings: a :class:`rlmetrics.events.SetupTimings`: ``timings.seconds`` maps each
        phase (``policy_init`` from the logged key ``policy_init_time_s``) to its seconds;
        ``timings.flags`` holds the dict's other entries (``parallel_init_enabled``…), which
        are not durations.
    """


@hookspec
def on_efficiency_summary(summary: EfficiencySummary, step: int) -> None:
    """Where wall time went in one step (and in the run so far).

    :param summary: an :class:`rlmetrics.events.EfficiencySummary`; from a logged dict it is
        built from the ``efficiency/*`` keys of a ``train`` or ``""`` dict.
    :param step: the trainer step it belongs to.
    """


@hookspec
def on_rollout_checkpoint(event: RolloutEvent) -> None:
    """One sample of a rollout-checkpoint stream.

    :param event: a :class:`~rlmetrics.events.CheckpointSave`,
        :class:`~rlmetrics.events.CheckpointRestore`,
        :class:`~rlmetrics.events.CheckpointOutcome` or
        :class:`~rlmetrics.events.ThroughputSample`; ``event.wall_time_s`` (Unix time) is the
        stream's axis, not the trainer step.
    """


# -- trajectories (issue 33) ---------------------------------------------------------------


@hookspec
def on_trajectories(batch: TrajectoryBatch) -> None:
    """Finished rollouts: a ``Logger.log_trajectories`` batch, or one live trajectory.

    :param batch: a :class:`rlmetrics.trajectories.TrajectoryBatch`: ``batch.step``, the
        checked records ``batch.trajectories`` (each a
        :class:`~rlmetrics.trajectories.Trajectory`: ids, outcome, turns of generations,
        tool calls and rewards), ``batch.contexts`` (the context holding each one's span, for
        exemplars: :func:`rlmetrics.trajectories.inside`) and ``batch.dropped`` (how many
        the span budget left without spans). Their spans have ended and their rows are
        logged when this is called.
    """


# -- alerts ----------------------------------------------------------------------------------


@hookspec
def on_alert(alert: Alert) -> None:
    """An alert rlmetrics evaluates in this process started or stopped firing.

    :param alert: an :class:`rlmetrics.events.Alert`: its rule's ``name`` (``RLStepStalled``:
        no new trainer step for longer than the stall rule allows, the rule ``/health`` and
        Prometheus' alert apply), ``state`` (``firing`` / ``resolved``), a ``summary``, the
        newest ``step`` and the ``time_s``. Called from rlmetrics' stall-watch thread while
        telemetry exports; each Logger's backends that take alerts (``log_alert``) get it too.
    """


# -- lifecycle ------------------------------------------------------------------------------


@hookspec
def telemetry_started(telemetry: Telemetry) -> None:
    """Telemetry is exporting: declarations are frozen and every instrument exists.

    Start background samplers here (and stop them in :func:`telemetry_stopping`).

    :param telemetry: the handle ``rlmetrics.start()`` returned.
    """


@hookspec
def telemetry_stopping(telemetry: Telemetry) -> None:
    """Telemetry is about to shut down; the last export follows this hook.

    Stop samplers promptly; recording is still possible during this call.
    """


# -- registration ---------------------------------------------------------------------------


@hookspec
def register_backends(register: Callable[[str, BackendFactory], None]) -> None:
    """Offer logger backends by name.

    Call ``register("name", factory)`` for each; ``Logger(backends={"name": {...}})`` then
    builds one with ``factory(**config)``. The object must provide
    ``log_metrics(metrics, step, prefix)`` and ``finish()`` (see
    :class:`rlmetrics.backends.Backend`).
    """


@hookspec
def register_exporters(register: Callable[[str, ExporterFactory], None]) -> None:
    """Offer OpenTelemetry exporters by name.

    Call ``register("name", factory)`` for each; ``rlmetrics.start(exporters=["name"])`` then
    calls ``factory(export_interval_s=..., **options)`` and attaches the
    :class:`rlmetrics.exporters.Exporter` it returns (its ``reader`` joins the one
    MeterProvider). Import the SDK inside the factory, not at module level: plugin modules are
    imported by every process that uses rlmetrics, telemetry or not.
    """


@hookspec
def register_phases(register: Callable[[str, PhaseKind], None]) -> None:
    """Offer phase names that ``rlmetrics.phase`` accounts, with how.

    Call ``register("idle/refit_bubble", PhaseKind(bucket="idle"))`` for each: a phase of that
    name then carries that ``rl.bucket`` on its span (unless the caller names one) and its
    seconds go into the step's :class:`rlmetrics.events.EfficiencySummary` — per step, or
    added up over the run when ``PhaseKind(cumulative=True)``; with
    ``PhaseKind(wall_clock=True)`` overlapping phases of the name count the time they cover
    once (else every phase adds its own seconds). A name nobody offers is timed as a span
    only. Read once per plugin load, never per phase.
    """


# -- the user's tools: demo, dashboard, check ----------------------------------------------

if TYPE_CHECKING:
    from .alerts.model import RuleBuilder
    from .check import Exemption
    from .dashboard.model import RowBuilder
    from .demo.parts import DemoPartFactory
    from .keymaps import KeyMap
    from .variables import Variable


@hookspec
def register_demo_parts(register: Callable[[str, DemoPartFactory], None]) -> None:
    """Offer parts of ``rlmetrics demo`` by name: what your family contributes to the
    simulated run.

    Call ``register("name", factory)``; the demo calls ``factory(settings)`` (a
    :class:`rlmetrics.demo.parts.DemoSettings`) *before* telemetry starts, so a part can
    configure its family first, then ``part.step(step)`` once per simulated step (a
    :class:`rlmetrics.demo.parts.DemoStep`) and ``part.close()`` at the end. ``step`` may
    record through your family and may return ``{key: value}`` to merge into the step's
    train dict. Parts run in name order; one that raises is skipped from then on.
    """


@hookspec
def register_dashboard_rows(register: Callable[[RowBuilder], None]) -> None:
    """Offer rows of the generated Grafana dashboard (``rlmetrics dashboard``).

    Call ``register(build)``; ``build(names)`` gets a :class:`rlmetrics.dashboard.promql.Names`
    (the Prometheus name of every declared series, from the frozen registry) and returns a
    :class:`rlmetrics.dashboard.model.Row` of panels whose PromQL reads your family's series.
    """


@hookspec
def register_alert_rules(register: Callable[[RuleBuilder], None]) -> None:
    """Offer Prometheus alerting rules (``rlmetrics alerts``, loaded by ``rlmetrics stack``).

    Call ``register(build)``; ``build(context)`` gets a
    :class:`rlmetrics.alerts.model.AlertContext` (the Prometheus name of every declared series
    in ``context.names``, tunable thresholds through ``context.threshold(...)``) and returns
    :class:`rlmetrics.alerts.model.AlertRule` objects, each with examples that fire and that
    stay quiet (run by ``promtool test rules``).
    """


@hookspec
def register_check_exemptions(register: Callable[[Exemption], None]) -> None:
    """Declare deliberate departures from one ``rlmetrics check`` rule.

    Call ``register(Exemption(rule, names, reason))`` for series whose names a specification
    fixes (NeMo Gym's ``_ms`` and ``_total`` names, say); ``rlmetrics check`` then reports
    them as exempt, with the reason, instead of as findings.
    """


@hookspec
def register_variables(register: Callable[[Variable], None]) -> None:
    """Name the ``RLMETRICS_*`` environment variables the plugin reads.

    Call ``register(Variable("RLMETRICS_ACME_URL", check))`` for each
    (:class:`rlmetrics.variables.Variable`; ``check(value)`` says what is wrong with a value,
    or returns None). Every ``RLMETRICS_*`` variable that neither the core nor a loaded plugin
    names is said once by ``start()`` and ``Logger()`` as a likely misspelling, and
    ``rlmetrics config`` refuses it and each value a check finds wrong.
    """


@hookspec
def register_key_maps(register: Callable[[KeyMap], None]) -> None:
    """Offer key maps: which key a trainer logs is which declared series.

    Call ``register(KeyMap("name", [KeyRule(...), ...]))`` (:mod:`rlmetrics.keymaps`);
    ``Logger(key_map="name")`` then records each listed key of a train dict into its series
    (or efficiency category) while every backend still gets the trainer's own keys.
    ``rlmetrics check`` lints each map offered: its series are declared, its categories known,
    no two keys land on one series.
    """
