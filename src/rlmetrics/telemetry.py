"""Telemetry lifecycle: ``start()`` builds the providers (metrics, and traces beside them) and
freezes declarations; the handle shuts them down, within a bound, once.

Everything is validated before anything is installed, so a bad argument leaves no half-started
telemetry behind. The SDK is imported here lazily, through ``_providers``.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

from . import _waiting
from . import tracing as _tracing
from ._fork import reset_in_child
from ._version import __version__
from ._warn import (
    StrictModeError,
    describe_value,
    hold_strict,
    logger,
    note_unmet,
    raise_if_strict,
    release_strict,
    warn_once,
)
from .backends import exit_status
from .identity import RESUME_ID_SOURCES, RUN_ID_ATTR, launcher_run_id
from .plugins import check_plugin_lists, hooks, load_plugins
from .registry import MetricRegistry, default_registry
from .tracing import naming as _naming
from .variables import warn_unknown_variables

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    from ._providers import Built
    from .exporters import Exporter

__all__ = ["Telemetry", "TelemetryError", "current", "start"]

DEFAULT_SHUTDOWN_TIMEOUT_S = 5.0

#: Each ``start()`` argument configuration can give, and its default (None: decided later,
#: from the environment the SDK reads or a generated id).
SETTING_DEFAULTS: dict[str, Any] = {
    "service_name": None,
    "service_version": None,
    "run_id": None,
    "resume": False,
    "export_interval_s": None,
    "traces": True,
    "plugins": None,
    "disable_plugins": None,
    "resource": None,
    "strict": False,
    "naming": "rlmetrics",
}


class TelemetryError(RuntimeError):
    """Telemetry was started in a way that cannot work."""


class Telemetry:
    """The handle ``rlmetrics.start()`` returns; a context manager that shuts down on exit."""

    def __init__(
        self,
        built: Built | None,
        registry: MetricRegistry,
        resource: Mapping[str, Any],
        resume: bool = False,
        strict: bool = False,
    ) -> None:
        self._built = built
        #: Whether this handle holds strict mode on (``start(strict=True)``) until shutdown.
        self.strict = strict
        #: Whether this process continues a run that already wrote to the trackers
        #: (``start(resume=True)``); a Logger created while this handle runs resumes too.
        self.resume = resume
        self._registry = registry
        self.resource: dict[str, Any] = dict(resource)
        #: The shutdowns that took this handle over (:meth:`_claim`): turn -> (thread, frame).
        self._claims: dict[int, tuple[int, FrameType]] = {}
        #: Whether a shutdown began stopping the exporters (:meth:`_shutdown`'s ``try``).
        self._began = False
        self._closed = False
        #: Each ``start()`` setting as ``(value, source)``: ``"the call"``, the variable or
        #: file setting that gave it, or ``"default"`` (docs/configuration.md).
        self.settings: dict[str, tuple[Any, str]] = {}
        #: What this handle holds of strict mode: on (True), off against RLMETRICS_STRICT
        #: (False: ``start(strict=False)``), or nothing (None).
        self._strict_hold: bool | None = True if strict else None

    def _release_strict(self) -> None:
        if self._strict_hold is not None:
            release_strict(self._strict_hold)
            self._strict_hold = None

    @property
    def service_name(self) -> str:
        return str(self.resource.get("service.name"))

    @property
    def run_id(self) -> str:
        return str(self.resource.get("rlmetrics.run.id"))

    @property
    def naming(self) -> str:
        """The naming profile: ``rlmetrics`` (the default) or ``rl_proposal``
        (:mod:`rlmetrics.families.rl_proposal`)."""
        value = self.settings.get("naming", ("rlmetrics", ""))[0]
        return str(value)

    @property
    def exporting(self) -> bool:
        """True while started with at least one metric reader; every tee is a no-op
        otherwise."""
        return not self._closed and self._built is not None and self._built.metric_readers > 0

    @property
    def tracing(self) -> bool:
        """True while started with at least one span processor: phases and steps are spans."""
        return not self._closed and self.tracer_provider is not None

    @property
    def tracer_provider(self) -> TracerProvider | None:
        """The TracerProvider beside the MeterProvider (same Resource), when tracing; for
        spans of your own, ``telemetry.tracer_provider.get_tracer(__name__)``."""
        return None if self._built is None else self._built.tracer_provider

    @property
    def exporters(self) -> dict[str, Exporter]:
        """``{name: Exporter}`` of the exporters this handle started (empty after shutdown)."""
        if self._built is None or self._closed:
            return {}
        return dict(self._built.exporters)

    @property
    def exporter_addresses(self) -> dict[str, tuple[str, int]]:
        """``{exporter: (host, port)}`` of every exporter that listens (Prometheus does)."""
        if self._built is None:
            return {}
        return {
            name: exporter.address
            for name, exporter in self._built.exporters.items()
            if exporter.address is not None
        }

    @property
    def prometheus_address(self) -> tuple[str, int] | None:
        """``(host, port)`` of the Prometheus endpoint, when that exporter runs."""
        return self.exporter_addresses.get("prometheus")

    def force_flush(self, timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S) -> None:
        """Collect and export now, waiting at most ``timeout_s``. Never call it per step."""
        built = self._built
        if built is None or self._closed:
            return
        timeout_s = _bound_or_default(timeout_s, "force_flush")
        _bounded(
            [functools.partial(p.force_flush, _millis(timeout_s)) for p in built.providers()],
            timeout_s,
            "force_flush",
        )
        raise_if_strict()

    def shutdown(
        self, timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S, *, failed: bool = False
    ) -> None:
        """Export what is left and stop, returning within ``timeout_s`` even if the collector
        is unreachable (what could not be sent by then is dropped). Idempotent. In strict
        mode, raises :class:`~rlmetrics.StrictModeError` once stopped if anything asked for
        did not happen.

        ``failed=True`` ends the run as a failed one, as the interpreter's exit does after an
        uncaught exception or a failing ``sys.exit``: the Prometheus endpoint never serves
        ``rlmetrics_run_ended`` 1, so RLMetricsEndpointDown pages. For a SIGTERM handler that
        shuts telemetry down before ``sys.exit(143)`` (a preempted job), as
        ``Logger.finish(failed=True)``."""
        # Said, and stopped within the default bound: a raise here would leave what is still
        # batched unexported, and telemetry half closed.
        timeout_s = _bound_or_default(timeout_s, "shutdown")
        if type(failed) is not bool:
            # Said, not raised (a signal handler's last call); taken as failed, for what was
            # passed is most likely an exception or an exit status.
            warn_once(
                "telemetry:shutdown-failed",
                "rlmetrics: Telemetry.shutdown()'s failed must be True or False, got "
                f"{describe_value(failed)}; the run is ended as failed",
            )
            failed = True
        if self._shutdown(timeout_s, clean=not failed):
            self._release_strict()
        raise_if_strict()

    def _shutdown(self, timeout_s: float, clean: bool = True) -> bool:
        """Stop, once; whether this call did. ``clean``: the run ended, rather than failed
        (an exception unwinding), so each exporter is told (:attr:`Exporter.end_run`: the
        Prometheus endpoint serves the end to one last scrape, waiting within its own bound)."""
        global _active
        if not self._claim():
            return False
        self._closed = True
        try:
            if self._began:  # an interrupted shutdown's: what is left is below, in finally
                return True
            self._began = True
            # Spans still open (a phase on a thread that never ended) end first, so they and
            # the step summaries they complete are exported by the shutdown below.
            _tracing.unbind()
            _naming.use(None)
            # The plugins' hooks get half the bound at most: one that hangs (a sampler's
            # join stuck on I/O) must leave the last export its time and shutdown its bound.
            deadline = time.monotonic() + timeout_s
            _stop_plugins(self, timeout_s / 2)
            built = self._built
            if built is not None:
                began = time.monotonic()
                try:
                    if clean:
                        built.end_run()
                finally:  # an interrupt ends that wait, never the shutdown
                    # The wait for a last scrape is bounded on its own: the export keeps its time.
                    deadline += time.monotonic() - began
                    left_s = max(0.0, deadline - time.monotonic())
                    _bounded(built.shutdown_actions(_millis(left_s)), left_s, "shutdown")
                    built.close_exporters()
        finally:
            self._registry.release()
            with _start_lock:
                if _active is self:
                    _active = None
        return True

    def _claim(self) -> bool:
        """Whether the calling shutdown is the one to stop this handle, without waiting: a
        SIGTERM handler's shutdown landing in this thread's own (found on the stack) or a
        shutdown running on another thread returns at once, where waiting would wait for ever.
        One interrupted and gone (a KeyboardInterrupt under a tracer, just after its claim or
        twice in its ``finally``) left the handle current: a later call takes it over."""
        mine = (threading.get_ident(), sys._getframe(1))
        turn = 0
        # dict.setdefault claims a turn atomically (under the GIL): one caller wins each.
        while (holder := self._claims.setdefault(turn, mine)) is not mine:
            if _running(*holder) or _active is not self:
                return False
            turn += 1
        return True

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.shutdown()
        elif self._shutdown(DEFAULT_SHUTDOWN_TIMEOUT_S, clean=_ended_cleanly(exc)):
            self._release_strict()  # the block's own exception is the one to see

    def __repr__(self) -> str:
        state = "exporting" if self.exporting else ("stopped" if self._closed else "idle")
        return f"<Telemetry service={self.service_name!r} run={self.run_id!r} {state}>"


def _ended_cleanly(exc: BaseException | None) -> bool:
    """Whether a run that ends with ``exc`` unwinding (None: nothing) ended rather than
    failed: nothing, an interrupt (Ctrl-C: someone stopped it) or ``sys.exit`` with status
    0 ended it; any other exception is a failure."""
    if exc is None or isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, SystemExit):
        return exc.code in (None, 0)
    return False


def _stop_plugins(handle: Telemetry, bound_s: float) -> None:
    """``telemetry_stopping`` on a daemon thread, waited for ``bound_s`` at most; a plugin
    whose implementation has not returned by then is named, and left running."""
    stopping = threading.Thread(
        target=hooks().telemetry_stopping,
        args=(handle,),
        name="rlmetrics-telemetry-stopping",
        daemon=True,
    )
    try:
        stopping.start()
    except RuntimeError:  # at interpreter exit, where Python 3.12+ starts no thread: inline
        hooks().telemetry_stopping(handle)
        return
    _waiting.join(stopping, bound_s)
    if stopping.is_alive():
        from .hooks import running_plugin

        message = (
            f"rlmetrics: 'telemetry_stopping' of plugin {running_plugin(stopping)!r} did not "
            f"return within {bound_s:.1f} s; telemetry shuts down without waiting for it "
            "(a hook stops its samplers promptly: docs/writing-a-plugin.md)"
        )
        logger.warning(message)
        note_unmet(message)


def _bound_or_default(timeout_s: Any, what: str) -> float:
    """``timeout_s`` when it is a wait's bound (``inf`` too), else the default bound, said
    once: a caller's None, string or NaN must not raise from a flush or a shutdown."""
    if _waiting.is_bound(timeout_s):
        return float(timeout_s)
    warn_once(
        f"telemetry:{what}-timeout",
        f"rlmetrics: Telemetry.{what}()'s timeout_s must be a number of 0 or more, got "
        f"{describe_value(timeout_s)}; the default bound ({DEFAULT_SHUTDOWN_TIMEOUT_S:g} s) "
        "is used",
    )
    return DEFAULT_SHUTDOWN_TIMEOUT_S


#: The SDK's wait in milliseconds for "no bound" (inf has no int): a year.
_NO_BOUND_MS = 365 * 24 * 3600 * 1000


def _millis(timeout_s: float) -> int:
    """``timeout_s`` as the SDK's ``timeout_millis`` (an int, ``inf`` included)."""
    return int(timeout_s * 1000) if timeout_s * 1000 < _NO_BOUND_MS else _NO_BOUND_MS


def _bounded(actions: Sequence[Callable[[], Any]], timeout_s: float, what: str) -> None:
    """Run each action on a daemon thread of its own, all at once, and stop waiting for them
    after ``timeout_s`` in all (the traces' and the metrics' shutdowns share one bound).

    The OTLP exporter retries a dead collector for up to its own timeout (10 s by default)
    whatever deadline its caller passes, so the bound has to be enforced from outside.
    """

    def run(action: Callable[[], Any]) -> None:
        try:
            action()
        except Exception:
            warn_once(f"telemetry:{what}", f"rlmetrics: telemetry {what} failed")

    workers = [
        threading.Thread(target=run, args=(action,), name=f"rlmetrics-{what}", daemon=True)
        for action in actions
    ]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + timeout_s
    for worker in workers:
        _waiting.join(worker, deadline - time.monotonic())
    if any(worker.is_alive() for worker in workers):
        message = (
            f"rlmetrics: telemetry {what} did not finish within {timeout_s:.1f} s (a collector "
            "that does not answer, or one that answers late: a larger timeout_s waits for it); "
            "what was not exported is dropped"
        )
        logger.warning(message)
        note_unmet(message)


def _running(thread: int, frame: FrameType) -> bool:
    """Whether ``frame`` is on ``thread``'s stack (the caller's own thread too)."""
    running: FrameType | None = sys._current_frames().get(thread)
    while running is not None:
        if running is frame:
            return True
        running = running.f_back
    return False


_active: Telemetry | None = None
# Reentrant: a KeyboardInterrupt at a with block's end under a tracer (bpo-29988) leaves
# it held by its thread, which takes it again instead of waiting for ever.
_start_lock = threading.RLock()
_atexit_registered = False


@reset_in_child
def _forget_after_fork() -> None:
    """In a forked child the parent's handle is not ours: telemetry is off (and the child's
    exit does not shut the parent's exporter down) until the child calls ``start()``."""
    global _active, _start_lock
    _active = None
    _start_lock = threading.RLock()


def current() -> Telemetry | None:
    """The running telemetry handle, if any."""
    return _active


def _shutdown_at_exit() -> None:
    handle = _active
    if handle is None:
        return
    try:
        # nobody is left to raise into; an exception nothing caught ended the process (not
        # an interactive session's earlier error, a notebook cell's), or a failing sys.exit
        # status (a SIGTERM handler's 143), as with a block's: the run failed
        failure = exit_status.uncaught_exception()
        clean = _ended_cleanly(failure) and not exit_status.exit_failed()
        handle._shutdown(DEFAULT_SHUTDOWN_TIMEOUT_S, clean=clean)
    except Exception:
        warn_once("telemetry:exit", "rlmetrics: shutting telemetry down at exit failed")
    except BaseException as exc:
        # An interrupt (a second SIGTERM, Ctrl-C) ended the wait: the user's, not a failure
        # of rlmetrics, so one line instead of the interpreter's traceback of an atexit hook.
        logger.warning(
            "rlmetrics: telemetry's shutdown at exit was interrupted (%s); what it had not "
            "exported is dropped",
            type(exc).__name__,
        )


def start(
    service_name: str | None = None,
    *,
    run_id: str | None = None,
    exporters: Iterable[str] | Mapping[str, Mapping[str, Any]] = (),
    readers: Sequence[MetricReader] = (),
    span_processors: Sequence[SpanProcessor] = (),
    traces: bool | None = None,
    resource: Mapping[str, Any] | None = None,
    service_version: str | None = None,
    export_interval_s: float | None = None,
    plugins: Iterable[str] | None = None,
    disable_plugins: Iterable[str] | None = None,
    prometheus_host: str | None = None,
    prometheus_port: int | None = None,
    otlp_endpoint: str | None = None,
    resume: bool | None = None,
    strict: bool | None = None,
    naming: str | None = None,
) -> Telemetry:
    """Start exporting every declared series.

    An argument the call gives wins; one it leaves out (None, or no exporters) takes the value
    configured without code, the environment's over the file's: the exporters from
    ``RLMETRICS_EXPORTERS`` or the configuration file (``RLMETRICS_CONFIG``), each exporter's
    options from ``RLMETRICS_EXPORTER_<NAME>_<OPTION>`` and the file (under the call's own),
    the other arguments from their variables (``OTEL_SERVICE_NAME``, ``RLMETRICS_STRICT``,
    ``OTEL_TRACES_EXPORTER``...) and the file's ``[telemetry]`` table, else their defaults.
    They are checked as the call's are, and a mistake names where it came from
    (docs/configuration.md).

    :param exporters: exporters by name, each offered by a plugin's ``register_exporters``
        hook: the core offers ``"otlp"`` (gRPC, configured by the standard
        ``OTEL_EXPORTER_OTLP_*`` variables or ``otlp_endpoint``), ``"otlp_http"`` (the same
        over HTTP/protobuf; ``otlp_endpoint`` is then the base URL), ``"prometheus"`` (an HTTP
        endpoint on ``prometheus_host``:``prometheus_port``, 127.0.0.1:9464 by default) and
        ``"console"``. A mapping ``{name: {option: value}}`` passes options to each factory.
    :param readers: further OTel ``MetricReader`` instances (an ``InMemoryMetricReader`` in
        tests); all readers run side by side on one MeterProvider.
    :param span_processors: further OTel ``SpanProcessor`` instances (a
        ``SimpleSpanProcessor(InMemorySpanExporter())`` in tests). With any span processor
        (an exporter's or these) a TracerProvider is built beside the MeterProvider, on the
        same Resource, and ``rlmetrics.phase``/``step``/``run``/``rollout`` become spans.
    :param traces: False (or ``OTEL_TRACES_EXPORTER=none`` when not given) exports no spans:
        the exporters' span processors are dropped and no TracerProvider is built.
    :param export_interval_s: period of the push readers; ``OTEL_METRIC_EXPORT_INTERVAL`` (ms)
        when None.
    :param plugins / disable_plugins: allow- and deny-lists of plugin names, overriding
        ``RLMETRICS_PLUGINS`` / ``RLMETRICS_DISABLE_PLUGINS``.
    :param service_version: the version of *your* service; unset unless given.
    :param run_id: the run's id (resource attribute ``rlmetrics.run.id``), which every Logger
        created while telemetry runs also writes to its backends; default the launcher's
        (:func:`~rlmetrics.identity.launcher_run_id`: ``OTEL_RESOURCE_ATTRIBUTES``,
        ``SLURM_JOB_ID``, ``TORCHELASTIC_RUN_ID``), else a generated id.
    :param resume: this process continues the run ``run_id`` names (a job restarted from a
        checkpoint): Loggers created while telemetry runs continue the same tracker runs
        (docs/trackers.md, "Run identity and resume").
    :param strict: strict mode until shutdown (also ``RLMETRICS_STRICT=1``): a warning that
        something asked for is not happening raises :class:`~rlmetrics.StrictModeError` from
        the next rlmetrics call (docs/configuration.md, "Strict mode"); for CI and first runs.
    :param naming: ``"rl_proposal"`` also speaks the proposed RL conventions' names
        (semantic-conventions-genai #88: ``rl.{loop,sample,reward,train,sync}.duration``, the
        spans ``rl.loop``, ``rl.sample``..., ``rl.run.id`` on the resource); also
        ``RLMETRICS_NAMING`` and ``[telemetry] naming``. Default ``"rlmetrics"``: its own names
        only (docs/conventions.md).

    Raises :class:`TelemetryError` if telemetry is already running in this process or an
    exporter cannot start (nothing is left running then), and
    :class:`~rlmetrics.configuration.ConfigurationError` (a ``ValueError`` and a
    ``TypeError``) for an unknown exporter, a plugin name no installed plugin has (here or in
    ``RLMETRICS_PLUGINS`` / ``RLMETRICS_DISABLE_PLUGINS``), an option an exporter does not take
    or of the wrong type, or a bad argument, naming the value's source.
    """
    global _active, _atexit_registered
    from .configuration import (
        CALL,
        DEFAULT,
        TELEMETRY_SETTINGS,
        ConfigurationError,
        check_call,
        check_configured_options,
        check_names,
        check_plugin_names,
        choose,
        configured,
        from_source,
        in_any_case,
        resolve,
    )
    from .plugins import installed_names

    # What the file would refuse is refused from the call too, before anything starts (a
    # string interval failed a comparison; a number as the service name went through; a
    # switch given as text, strict="false", is a true value).
    check_call(
        "start()",
        {
            "service_name": service_name,
            "service_version": service_version,
            "export_interval_s": export_interval_s,
            "resource": resource,
            "naming": naming,
            "strict": strict,
            "resume": resume,
            "traces": traces,
        },
        TELEMETRY_SETTINGS,
    )
    for name, names in (("plugins", plugins), ("disable_plugins", disable_plugins)):
        if isinstance(names, str):  # one name, which list() would read letter by letter
            raise ConfigurationError(
                f"start(): {name} is a list of plugin names, got the string {names!r}: "
                f"{name}=[{names!r}]"
            )
    given = _given_exporters(exporters)
    # An argument the call gives wins; one it leaves out (None) takes the environment's
    # value, else the configuration file's (RLMETRICS_CONFIG), else the default.
    settings = resolve(
        configured().telemetry,
        {
            "service_name": service_name,
            "service_version": service_version,
            "run_id": run_id,
            "resume": resume,
            "export_interval_s": export_interval_s,
            "traces": traces,
            "plugins": None if plugins is None else list(plugins),
            "disable_plugins": None if disable_plugins is None else list(disable_plugins),
            "resource": resource,
            "strict": strict,
            "naming": naming,
        },
        SETTING_DEFAULTS,
    )
    service_name = settings["service_name"][0]
    service_version = settings["service_version"][0]
    run_id, run_id_source = settings["run_id"]
    if run_id is not None and (not isinstance(run_id, str) or not run_id.strip()):
        # Refused here, naming its source: taken, it failed the first Logger, which could not.
        raise ConfigurationError(
            f"run_id must be a non-empty string, got {run_id!r}"
            + from_source(None if run_id_source == CALL else run_id_source)
        )
    resume = bool(settings["resume"][0])
    export_interval_s, interval_source = settings["export_interval_s"]
    traces = bool(settings["traces"][0])
    plugins, plugins_source = settings["plugins"]
    disable_plugins, disable_source = settings["disable_plugins"]
    resource = settings["resource"][0]
    if settings["resource"][1] != CALL:
        resource = _under_the_environment(resource)
    strict_given = strict
    strict = bool(settings["strict"][0])
    naming, naming_source = settings["naming"]
    if export_interval_s is not None and not export_interval_s > 0:
        raise ConfigurationError(
            f"export_interval_s must be a positive number, got {export_interval_s}"
            + from_source(None if interval_source == CALL else interval_source)
        )
    if (
        resume
        and run_id is None
        and not (resource or {}).get(RUN_ID_ATTR)
        and launcher_run_id(resumable=True) is None
    ):
        raise ConfigurationError(
            "start(resume=True) continues the run its id names: pass run_id= (the id of the "
            f"run to continue), or set {RESUME_ID_SOURCES}"
            + from_source(None if settings["resume"][1] == CALL else settings["resume"][1])
        )
    for names, source in ((plugins, plugins_source), (disable_plugins, disable_source)):
        if names is not None and source not in (CALL, DEFAULT):
            check_plugin_names(names, source, installed_names())
    registry = default_registry()
    with _start_lock:
        if _active is not None:
            raise TelemetryError(
                f"rlmetrics.start() called while telemetry is running ({_active!r}); one process "
                "exports through one provider: shut the running handle down first, or use "
                "rlmetrics.current() to reach it"
            )
        check_plugin_lists(plugins, disable_plugins)
        loaded = load_plugins(plugins, disable_plugins)
        warn_unknown_variables(loaded)  # a misspelt RLMETRICS_* variable does nothing
        # A profile is registered by the family that declares its series, loaded just now.
        settings["naming"] = in_any_case(settings["naming"], _naming.names)
        naming = settings["naming"][0]
        check_naming(naming, naming_source)
        profile = _naming.build(naming)
        from .exporters import available_exporters

        offered = available_exporters(loaded)
        # The call's exporters, else RLMETRICS_EXPORTERS, else the file's; each with the
        # options the environment and the file give it under the call's own.
        options_found = configured(exporter_names=offered, exporters_chosen=given or ())
        chosen, sources = choose("exporter", given, options_found.exporters)
        wanted = _exporter_options(
            chosen or {}, given, prometheus_host, prometheus_port, otlp_endpoint, sources
        )
        check_names(
            "exporter",
            wanted,
            offered,
            None if given is not None else options_found.exporters_source,
            "An exporter comes from a plugin's register_exporters hook (check "
            "RLMETRICS_PLUGINS / RLMETRICS_DISABLE_PLUGINS and `rlmetrics plugins`)",
        )
        for name, options in wanted.items():
            check_configured_options(
                "exporter",
                name,
                offered[name][1],
                options,
                sources.get(name, {}),
                ("export_interval_s",),
            )
        from ._providers import build_provider, resource_attributes

        attributes = resource_attributes(service_name, service_version, run_id, resource)
        if profile is not None:
            attributes.update(profile.resource_attributes(attributes))
        built = None
        if wanted or readers or span_processors:
            built = build_provider(
                attributes,
                {name: (offered[name][1], options) for name, options in wanted.items()},
                readers,
                export_interval_s,
                span_processors,
                bool(traces),
            )
        if built is not None and built.metric_readers:
            session = registry.bind(built.provider.get_meter("rlmetrics", __version__))
            built.export_gauges(session.gauge_points, "rlmetrics", __version__)
        else:
            registry.freeze()
        # A new session: the last one's run-wide totals (cumulative phases, the run's wall
        # time) do not carry into this one, whatever its run id.
        _tracing.new_session()
        if built is not None and built.tracer_provider is not None:
            _tracing.bind(built.tracer_provider.get_tracer("rlmetrics", __version__))
        _naming.use(profile)
        handle = Telemetry(built, registry, attributes, resume=resume, strict=strict)
        handle.settings = settings
        # Strict mode held on, or (an explicit strict=False) off against RLMETRICS_STRICT.
        handle._strict_hold = True if strict else (False if strict_given is False else None)
        _active = handle
        if handle._strict_hold is not None:
            hold_strict(handle._strict_hold)
        if not _atexit_registered:
            atexit.register(_shutdown_at_exit)
            _atexit_registered = True
        exit_status.watch()  # a sys.exit(3) at the end is a failed run's end, not a clean one
    hooks().telemetry_started(handle)
    try:
        raise_if_strict()  # a plugin that did not load, a hook that raised
    except StrictModeError:
        if handle._shutdown(DEFAULT_SHUTDOWN_TIMEOUT_S):
            handle._release_strict()
        raise
    return handle


def check_naming(naming: Any, source: str) -> None:
    """Refuse, naming its ``source``, a ``naming`` no loaded family registers a profile for."""
    from .configuration import CALL, ConfigurationError, from_source

    if naming not in _naming.names():
        raise ConfigurationError(
            f"naming must be one of {_naming.names()}, got {naming!r}"
            + from_source(None if source == CALL else source)
        )


def _under_the_environment(resource: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The configuration file's resource attributes without those ``OTEL_RESOURCE_ATTRIBUTES``
    sets: the environment wins over the file."""
    if not resource:
        return resource
    text = os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    from_env = {part.split("=", 1)[0].strip() for part in text.split(",") if "=" in part}
    return {key: value for key, value in resource.items() if key not in from_env}


def _given_exporters(
    exporters: Iterable[str] | Mapping[str, Mapping[str, Any]],
) -> dict[str, Any] | None:
    """The call's choice of exporters as ``{name: options}``, None when it made none (an empty
    choice is none: the configuration's stands)."""
    from .configuration import named_choice

    return named_choice("exporter", "start", exporters) or None


def _exporter_options(
    chosen: Mapping[str, Any],
    given: Mapping[str, Any] | None,
    prometheus_host: str | None,
    prometheus_port: int | None,
    otlp_endpoint: str | None,
    sources: dict[str, dict[str, str]],
) -> dict[str, Any]:
    """``{exporter: options}``, the named ``start()`` arguments folded into the options of
    the exporter they configure: over the configured ones, under the call's own mapping.
    ``sources`` (option to where it came from, per exporter) then names the argument for
    each option one gave: a wrong value is said as what the user wrote
    (``start(prometheus_port=)``), not as the option or a variable it replaced."""
    wanted = {name: dict(o) if isinstance(o, Mapping) else o for name, o in chosen.items()}
    shortcuts: dict[str, dict[str, tuple[str, Any]]] = {
        "prometheus": {
            "host": ("prometheus_host", prometheus_host),
            "port": ("prometheus_port", prometheus_port),
        },
        # otlp_endpoint names the collector of either OTLP exporter (docs/exporters.md).
        "otlp": {"endpoint": ("otlp_endpoint", otlp_endpoint)},
        "otlp_http": {"endpoint": ("otlp_endpoint", otlp_endpoint)},
    }
    for name, options in shortcuts.items():
        if name in wanted and isinstance(wanted[name], dict):
            explicit = (given or {}).get(name)
            for key, (argument, value) in options.items():
                if value is not None and not (isinstance(explicit, Mapping) and key in explicit):
                    wanted[name][key] = value
                    sources.setdefault(name, {})[key] = f"start({argument}=)"
    return wanted
