"""Traces: a step's time as spans, from the same clock reads that feed its efficiency summary.

One timer, two outputs. ``with rlmetrics.phase("generation", bucket="productive"):`` reads the
clock once when the block starts and once when it ends; the two readings are the start and end
of a leaf span tagged ``rl.bucket`` (while tracing) *and* the seconds added to the phase's
accounting. ``with rlmetrics.step(n):`` is the umbrella span of one step (``rl.iteration``,
no ``rl.bucket``); when it ends it delivers the step's
:class:`~rlmetrics.events.EfficiencySummary` through ``on_efficiency_summary`` (or its
Logger's ``log_efficiency_summary``), exactly as if the loop had logged ``efficiency/*``.
``run()`` and ``rollout()`` are the other umbrella spans.

This module names no phase and no category. Which phase names are accounted, how their seconds
add up (per step, or over the run) and which ``rl.bucket`` their span carries is offered by
plugins through the ``register_phases`` hook (:class:`PhaseKind`); the efficiency family
offers its categories there. A phase no plugin offers is a span only; without an explicit
bucket it is ``overhead``, as NeMo-RL tags an unknown leaf.

Without a started telemetry that traces, a phase is a near-free pair of clock reads that still
feeds the accounting; the OpenTelemetry API is imported only when tracing starts.

Across processes the step's W3C trace context travels as a carrier (:func:`trace_carrier`,
entered on the other side with :func:`trace_context`) or in a child's environment
(:func:`trace_env`, ``TRACEPARENT``): a process started with ``TRACEPARENT`` parents every
span that has no other parent on it, so a worker's phases are children of the driver's step.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from . import plugins as _plugins
from ._fork import forget_in_child, reset_in_child
from ._warn import describe_key, describe_value, warn_once
from .events import EfficiencySummary
from .values import as_step

if TYPE_CHECKING:
    from .logger import Logger

__all__ = [
    "BUCKETS",
    "BUCKET_ATTR",
    "GENERATIONS_ATTR",
    "ITERATION_ATTR",
    "PHASE_ATTR",
    "RUN_SPAN",
    "ROLLOUT_SPAN",
    "STEP_SPAN",
    "TRACEPARENT_ENV",
    "TRACESTATE_ENV",
    "TRUNCATED_ATTR",
    "WEIGHT_VERSION_ATTR",
    "Phase",
    "PhaseKind",
    "PhaseTimer",
    "Scope",
    "Step",
    "Umbrella",
    "account",
    "close_open_scopes",
    "current_step",
    "phase",
    "phase_span_name",
    "rollout",
    "run",
    "step",
    "trace_carrier",
    "trace_context",
    "trace_env",
    "tracing",
]

#: The goodput buckets a leaf span may carry (NeMo-RL's ``Bucket``).
BUCKETS = frozenset({"productive", "overhead", "idle", "wasted"})
BUCKET_ATTR = "rl.bucket"
#: The phase's own name on its span (a category like ``idle/refit_bubble``, or yours).
PHASE_ATTR = "rl.phase"
ITERATION_ATTR = "rl.iteration"
WEIGHT_VERSION_ATTR = "rl.weight_version"
GENERATIONS_ATTR = "rl.num_generations_per_prompt"
#: Set on a span rlmetrics ended because it was still open at shutdown or Logger.finish().
TRUNCATED_ATTR = "rlmetrics.span.truncated"
THREAD_ID_ATTR = "thread.id"
THREAD_NAME_ATTR = "thread.name"

RUN_SPAN = "rl.run"
STEP_SPAN = "rl.step"
ROLLOUT_SPAN = "rl.rollout"

#: The environment carrier of W3C trace context (the OpenTelemetry convention for processes).
TRACEPARENT_ENV = "TRACEPARENT"
TRACESTATE_ENV = "TRACESTATE"

#: The bucket of a phase that neither names one nor is offered by a plugin.
DEFAULT_BUCKET = "overhead"
_INVALID_NAME = "rl.phase"

_F = TypeVar("_F", bound=Callable[..., Any])


@attrs.frozen
class PhaseKind:
    """How a named phase is accounted, as a plugin's ``register_phases`` hook offers it.

    :param bucket: the ``rl.bucket`` its span carries; None for a span with no bucket (time a
        trace has no way to tell apart, such as a collector loop's wait).
    :param cumulative: its seconds add up over the whole run and every step's summary carries
        the total so far; otherwise they are the step's own and start from zero each step.
    """

    bucket: str | None
    cumulative: bool = False

    def __attrs_post_init__(self) -> None:
        if self.bucket is not None and self.bucket not in BUCKETS:
            raise ValueError(f"PhaseKind bucket must be one of {sorted(BUCKETS)} or None")


# -- clocks -------------------------------------------------------------------------------------

#: Unix time minus perf_counter at import, in ns: the default clock is monotonic (a phase
#: never has a negative length) and still dates spans in Unix time.
_EPOCH_OFFSET_NS = time.time_ns() - time.perf_counter_ns()


@attrs.frozen
class _Clock:
    """``now()`` in ns, and what turns a reading into Unix ns for a span."""

    now: Callable[[], int]
    offset: int


_DEFAULT_CLOCK = _Clock(time.perf_counter_ns, _EPOCH_OFFSET_NS)


def _clock(seconds: Callable[[], float] | None) -> _Clock:
    """The default clock, or one from a function returning seconds (Unix time, for sensible
    span timestamps; any origin works for the accounting)."""
    if seconds is None or seconds is time.perf_counter:
        return _DEFAULT_CLOCK
    if not callable(seconds):
        raise TypeError(f"clock must be a function returning seconds, got {type(seconds)}")

    def now() -> int:
        return round(seconds() * 1e9)

    return _Clock(now, 0)


# -- accounting ---------------------------------------------------------------------------------


class PhaseTimer:
    """Seconds per phase name, added up across threads: the accounting behind every phase.

    ``time(name)`` is a :class:`Phase` whose seconds land here (and which is a span while
    tracing); ``record(name, seconds)`` adds seconds measured elsewhere, without a span. The
    efficiency family's ``EfficiencyTimer`` and ``CollectorTimer`` are timers of this kind.

    :param clock: a function returning seconds that the phases of this timer read; the default
        is monotonic and dates spans in Unix time.
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = _clock(clock)
        self._seconds: dict[str, float] = {}
        # What record() adds waits here until it is read: a deque's append is atomic, which
        # keeps a lock (a third of a phase's cost) off the timing path.
        self._pending: collections.deque[tuple[str, float]] = collections.deque()
        self._lock = threading.Lock()
        forget_in_child(self)

    def time(
        self, name: str, bucket: str | None = None, tags: Mapping[str, Any] | None = None
    ) -> Phase:
        """A phase whose seconds this timer adds up (a ``with`` block or a decorator)."""
        return Phase(name, bucket, tags, self)

    def record(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to ``name`` (from any thread)."""
        pending = self._pending
        pending.append((name, seconds))
        if len(pending) > _MAX_PENDING:  # a timer nobody reads stays bounded
            self._fold()

    def _fold(self) -> dict[str, float]:
        """Add what is pending to the totals; the caller holds the lock or takes it here."""
        with self._lock:
            return self._fold_locked()

    def _fold_locked(self) -> dict[str, float]:
        pending, seconds = self._pending, self._seconds
        while True:
            try:
                name, value = pending.popleft()
            except IndexError:
                return seconds
            seconds[name] = seconds.get(name, 0.0) + value

    def snapshot(self) -> dict[str, float]:
        """The seconds so far, per name."""
        with self._lock:
            return dict(self._fold_locked())

    def take(self, keep: frozenset[str] = frozenset()) -> dict[str, float]:
        """The seconds so far, then start from zero (except the names in ``keep``)."""
        with self._lock:
            seconds = self._fold_locked()
            self._seconds = {k: v for k, v in seconds.items() if k in keep}
        return seconds

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()


#: Records a timer holds unread before it adds them up on the recording thread.
_MAX_PENDING = 4096


# -- the process's tracing state ----------------------------------------------------------------


_NOT_LOADED = object()


class _State:
    """What phases share in this process: the tracer binding (None when not tracing), the
    phase table offered by plugins, the implicit step and run accounting, the run clock and
    the scopes open while tracing."""

    def __init__(self) -> None:
        self.binding: _Binding | None = None
        self.kinds: dict[str, PhaseKind] = {}
        #: Where each accounted name's seconds go (the step's timer or the run's).
        self.targets: dict[str, PhaseTimer] = {}
        self.kinds_source: object = _NOT_LOADED
        self.step_timer = PhaseTimer()
        self.run_timer = PhaseTimer()
        self.clock = _DEFAULT_CLOCK
        self.run_start_ns: int | None = None
        self.steps: list[Step] = []  # open steps, innermost last
        self.last_step: int | None = None
        self.open: dict[int, Scope] = {}  # open scopes while tracing, by id
        self.sequence = 0


_state = _State()
_MAIN_THREAD = threading.main_thread().ident


@reset_in_child
def _forget_after_fork() -> None:
    """In a forked child the parent's tracer, accounting and open spans are not its own."""
    global _MAIN_THREAD
    _reset()
    _MAIN_THREAD = threading.get_ident()


def _reset() -> None:
    """Forget the accounting, the phase table and the open spans (tests, a forked child)."""
    global _state
    _state = _State()


def _kinds() -> dict[str, PhaseKind]:
    """The phase table, offered by the loaded plugins (read again when they reload)."""
    state = _state
    source = _plugins._plugins
    if source is None or source is not state.kinds_source:
        source = _plugins.get_plugins()
        if source is not state.kinds_source:
            kinds = state.kinds = _load_kinds(source)
            state.targets = {
                name: state.run_timer if kind.cumulative else state.step_timer
                for name, kind in kinds.items()
            }
            state.kinds_source = source
    return state.kinds


def _target(name: str) -> PhaseTimer | None:
    """The timer an accounted phase's seconds go to; None for a phase nobody offers."""
    state = _state
    if _plugins._plugins is not state.kinds_source:
        _kinds()
    return state.targets.get(name)


def _load_kinds(source: _plugins.Plugins) -> dict[str, PhaseKind]:
    from .hooks import collect_offers

    kinds: dict[str, PhaseKind] = {}
    for name, (plugin, kind) in collect_offers("phase", source.hooks.register_phases).items():
        if isinstance(name, str) and isinstance(kind, PhaseKind):
            kinds[name] = kind
        else:
            warn_once(
                f"phase-offer:{plugin}",
                f"rlmetrics: plugin {plugin!r} offered phase {describe_key(name)} with "
                f"{describe_value(kind)}, not a PhaseKind; ignored",
            )
    return kinds


def tracing() -> bool:
    """Whether phases and steps are recorded as spans now (telemetry started with a span
    exporter)."""
    return _state.binding is not None


# -- the OpenTelemetry side, bound while tracing ------------------------------------------------


class _Binding:
    """The tracer and the API calls a scope makes, imported when tracing starts (so a process
    that never traces never imports OpenTelemetry for it)."""

    def __init__(self, tracer: Any) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.tracer = tracer
        self.get_current = context.get_current
        self.attach = context.attach
        self.detach = context.detach
        self.get_current_span = trace.get_current_span
        self.set_span_in_context = trace.set_span_in_context
        self.error = StatusCode.ERROR
        self.status = Status
        self.propagator = TraceContextTextMapPropagator()
        self.process_parent = self._from_environment()

    def _from_environment(self) -> Any:
        """The context ``TRACEPARENT`` (and ``TRACESTATE``) name, or None."""
        parent = os.environ.get(TRACEPARENT_ENV, "").strip()
        if not parent:
            return None
        carrier = {"traceparent": parent}
        state = os.environ.get(TRACESTATE_ENV, "").strip()
        if state:
            carrier["tracestate"] = state
        context = self.propagator.extract(carrier)
        if not self.get_current_span(context).get_span_context().is_valid:
            warn_once(
                "tracing:traceparent",
                f"rlmetrics: {TRACEPARENT_ENV} is not a W3C traceparent "
                f"({describe_value(parent)}); this process's spans start their own traces",
            )
            return None
        return context

    def parent(self) -> Any:
        """The context a new span starts in: the current one if it holds a span; else the
        innermost open step's (a phase on another thread belongs to the step the loop is in);
        else the one this process was started in (``TRACEPARENT``); else a new trace."""
        current = self.get_current()
        if self.get_current_span(current).get_span_context().is_valid:
            return current
        steps = _state.steps
        if steps:
            span = steps[-1]._span
            if span is not None:
                return self.set_span_in_context(span, current)
        if self.process_parent is not None:
            return self.process_parent
        return current

    def start(self, name: str, attributes: dict[str, Any], start_ns: int) -> tuple[Any, Any]:
        parent = self.parent()
        span = self.tracer.start_span(name, parent, attributes=attributes, start_time=start_ns)
        return span, self.attach(self.set_span_in_context(span, parent))

    def fail(self, span: Any, error: BaseException) -> None:
        span.set_status(self.status(self.error, type(error).__name__))
        span.record_exception(error)

    def carrier(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier, self.parent())
        return carrier


def bind(tracer: Any) -> None:
    """Start recording phases and steps as spans on ``tracer`` (``telemetry.start`` does)."""
    _state.binding = _Binding(tracer)


def unbind() -> None:
    """Stop recording spans; open scopes are closed first (``telemetry.shutdown`` does)."""
    close_open_scopes("still open at telemetry shutdown")
    _state.binding = None


# -- scopes: the spans rlmetrics opens ----------------------------------------------------------


def _thread_attributes(attributes: dict[str, Any]) -> None:
    ident = threading.get_ident()
    if ident != _MAIN_THREAD:
        attributes[THREAD_ID_ATTR] = ident
        attributes[THREAD_NAME_ATTR] = threading.current_thread().name


def _span_name(name: str) -> str:
    """A phase's span name: ``rl.`` and its name with ``/`` as ``.`` (``idle/refit_bubble`` is
    ``rl.idle.refit_bubble``), as NeMo-RL names efficiency spans."""
    dotted = name.replace("/", ".")
    return dotted if dotted.startswith("rl.") else "rl." + dotted


phase_span_name = functools.lru_cache(maxsize=1024)(_span_name)


class Scope:
    """A span rlmetrics opens and ends (a phase, a step, a rollout, the run). Subclasses say
    what it is called, what it carries and what happens when it ends."""

    __slots__ = ("__weakref__", "_binding", "_clock", "_order", "_span", "_t0", "_token")

    def __init__(self) -> None:
        self._span: Any = None
        self._token: Any = None

    # What a subclass provides.
    def _name(self) -> str:
        raise NotImplementedError

    def _attributes(self) -> dict[str, Any]:
        raise NotImplementedError

    def _ended(self, t1: int) -> None:
        """The scope ended at clock reading ``t1`` (accounting, delivery)."""

    def _finish(self, t1: int) -> None:
        try:
            self._ended(t1)
        except Exception:
            warn_once(
                f"tracing:{type(self).__name__}",
                f"rlmetrics: ending a {type(self).__name__.lower()} failed; its seconds are lost",
            )

    # The with-block.
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close(exc)

    def _open(self, clock: _Clock) -> None:
        self._clock = clock
        self._t0 = t0 = clock.now()
        binding = _state.binding
        if binding is not None:
            try:
                attributes = self._attributes()
                _thread_attributes(attributes)
                self._span, self._token = binding.start(self._name(), attributes, t0 + clock.offset)
            except Exception:
                self._span = self._token = None
                warn_once("tracing:start", "rlmetrics: a span could not start; timing goes on")
                return
            self._binding = binding  # detached by the same, even after tracing stopped
            _state.sequence += 1
            self._order = _state.sequence
            _state.open[id(self)] = self

    def _close(self, error: BaseException | None) -> None:
        t1 = self._clock.now()
        span = self._span
        if span is None:
            self._finish(t1)
            return
        binding = self._binding
        token, self._token = self._token, None
        mine = _state.open.pop(id(self), None) is not None  # else a closer ended it already
        try:
            if token is not None:
                binding.detach(token)
        except Exception:
            warn_once("tracing:detach", "rlmetrics: a span's context could not be left")
        if not mine:
            return
        self._finish(t1)
        try:
            if error is not None and not isinstance(error, GeneratorExit):
                binding.fail(span, error)
            span.end(end_time=t1 + self._clock.offset)
        except Exception:
            warn_once("tracing:end", "rlmetrics: a span could not end; timing goes on")
        self._span = None

    def _truncate(self, reason: str) -> None:
        """End the span now, from another thread: it was still open at shutdown."""
        if _state.open.pop(id(self), None) is None:
            return  # its owner ended it meanwhile
        t1 = self._clock.now()
        span = self._span
        try:
            span.set_attribute(TRUNCATED_ATTR, True)
            span.add_event(TRUNCATED_ATTR, {"reason": reason})
        except Exception:
            pass
        self._finish(t1)
        try:
            span.end(end_time=t1 + self._clock.offset)
        except Exception:
            warn_once("tracing:truncate", "rlmetrics: an open span could not be ended")


def close_open_scopes(reason: str, logger: Logger | None = None) -> int:
    """End every span rlmetrics still has open, innermost first, marked
    ``rlmetrics.span.truncated`` with ``reason``; each is accounted as if it ended now (a
    phase's seconds count, a step delivers its summary). Returns how many were closed.

    With ``logger``, only the steps that deliver to it and what was opened inside them (after
    them): a Logger that finishes ends its own steps, not a run another Logger serves.
    """
    scopes = sorted(list(_state.open.values()), key=lambda s: s._order, reverse=True)
    if logger is not None:
        mine = [s._order for s in scopes if isinstance(s, Step) and s._logger is logger]
        if not mine:
            return 0
        scopes = [s for s in scopes if s._order >= min(mine)]
    for scope in scopes:
        try:
            scope._truncate(reason)
        except Exception:
            warn_once("tracing:close", "rlmetrics: closing an open span failed")
    return len(scopes)


class Phase(Scope):
    """One timed phase of a step: ``with rlmetrics.phase("generation", bucket="productive"):``
    or ``@rlmetrics.phase("reward", bucket="overhead")``.

    :param name: the phase; a name a plugin offers (the efficiency family's categories, such
        as ``idle/refit_bubble``) is accounted in the step's efficiency summary and carries the
        plugin's bucket; any other name is a span only.
    :param bucket: ``productive``, ``overhead``, ``idle`` or ``wasted`` for the span's
        ``rl.bucket``; default the plugin's, else ``overhead``.
    :param tags: further span attributes (strings, ints, bools; never a time-series number).
    :param timer: the :class:`PhaseTimer` its seconds go to (``PhaseTimer.time`` passes it);
        default the step's or the run's accounting, as the phase's :class:`PhaseKind` says.

    A phase that raises still ends its span (status error) and still counts its seconds.
    Never raises: a bad name or bucket is reported once and the phase is still timed. One
    object times one block at a time: call ``rlmetrics.phase(...)`` for each.
    """

    __slots__ = ("_bucket", "_phase", "_tags", "_timer")

    def __init__(
        self,
        name: str,
        bucket: str | None = None,
        tags: Mapping[str, Any] | None = None,
        timer: PhaseTimer | None = None,
    ) -> None:
        self._span = None
        self._phase = name
        self._tags = tags
        self._timer = timer
        if bucket is not None and bucket not in BUCKETS:
            warn_once(
                "phase:bucket",
                f"rlmetrics.phase: bucket must be one of {sorted(BUCKETS)}, got "
                f"{describe_key(bucket)}; dropped (the phase's own bucket is used)",
            )
            bucket = None
        self._bucket = bucket

    def __enter__(self) -> Phase:
        timer = self._timer
        state = _state
        clock = self._clock = state.clock if timer is None else timer._clock
        if state.binding is None:  # not tracing: two clock readings and the accounting
            self._t0 = clock.now()
        else:
            self._open(clock)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._span is not None:
            self._close(exc)
            return
        seconds = (self._clock.now() - self._t0) / 1e9
        name = self._phase
        if type(name) is not str:
            self._valid_name()  # reported once; accounted nowhere
            return
        try:
            timer = self._timer
            if timer is not None:
                timer.record(name, seconds)
                return
            state = _state
            if _plugins._plugins is state.kinds_source:  # _target(name), inlined
                timer = state.targets.get(name)
            else:
                timer = _target(name)
            if timer is not None:  # the step's or the run's: PhaseTimer.record, inlined
                pending = timer._pending
                pending.append((name, seconds))
                if len(pending) > _MAX_PENDING:
                    timer._fold()
        except Exception:
            warn_once("tracing:Phase", "rlmetrics: accounting a phase failed; its seconds are lost")

    def __call__(self, function: _F) -> _F:
        """Time every call of ``function`` as this phase (``@rlmetrics.phase(...)``)."""
        name, bucket, tags, timer = self._phase, self._bucket, self._tags, self._timer
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                with Phase(name, bucket, tags, timer):
                    return await function(*args, **kwargs)

            return timed_async  # type: ignore[return-value]

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with Phase(name, bucket, tags, timer):
                return function(*args, **kwargs)

        return timed  # type: ignore[return-value]

    def _valid_name(self) -> str | None:
        name = self._phase
        if type(name) is str and name:
            return name
        warn_once(
            "phase:name",
            f"rlmetrics.phase: a phase name must be a non-empty string, got "
            f"{describe_value(name)}; the phase is timed as {_INVALID_NAME!r} and accounted "
            "nowhere",
        )
        return None

    def _ended(self, t1: int) -> None:
        name = self._phase
        if type(name) is not str:
            return
        timer = self._timer if self._timer is not None else _target(name)
        if timer is not None:
            timer.record(name, (t1 - self._t0) / 1e9)

    def _name(self) -> str:
        name = self._valid_name()
        return _INVALID_NAME if name is None else phase_span_name(name)

    def _attributes(self) -> dict[str, Any]:
        name = self._valid_name()
        attributes: dict[str, Any] = {}
        if self._tags:
            attributes.update(_tags(self._tags, "rlmetrics.phase"))
        bucket = self._bucket
        if name is not None:
            attributes[PHASE_ATTR] = name
        if bucket is None:
            kind = None if name is None else _kinds().get(name)
            bucket = DEFAULT_BUCKET if kind is None else kind.bucket
        if bucket is not None:
            attributes[BUCKET_ATTR] = bucket
        steps = _state.steps
        if steps and steps[-1]._iteration is not None:
            attributes[ITERATION_ATTR] = steps[-1]._iteration
        return attributes


#: ``rlmetrics.phase(name, bucket=None, tags=None)``: the class itself, so a phase costs one
#: call less (see :class:`Phase`).
phase = Phase


def account(name: str, seconds: float) -> None:
    """Add ``seconds`` measured elsewhere to phase ``name``'s accounting, without a span: the
    seconds a pool of worker threads spent, summed (``wasted/failed_trajectory``). A name no
    plugin offers is accounted nowhere."""
    try:
        timer = _target(name) if type(name) is str else None
        value = float(seconds)
    except Exception:
        timer = None
    if timer is None:
        warn_once(
            "phase:account",
            f"rlmetrics.account: {describe_key(name)} is no phase a plugin offers (or its seconds "
            "are not a number); not accounted",
        )
        return
    timer.record(name, value)


def _tags(tags: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Span attributes from ``tags``: string keys, and string, int or bool values. A float is
    a time-series number, which belongs on a metric; it is dropped with a warning."""
    out: dict[str, Any] = {}
    try:
        items = list(tags.items())
    except Exception:
        warn_once(f"{where}:tags", f"{where}: tags must be a mapping; ignored")
        return out
    for key, value in items:
        if type(key) is str and key and isinstance(value, (str, int)):
            out[key] = value
        else:
            warn_once(
                f"{where}:tag",
                f"{where}: tag {describe_key(key)} with {describe_value(value)} dropped: a span "
                "tag is a string, int or bool (numbers that change over time are metrics)",
            )
    return out


def current_step() -> int | None:
    """The step of the innermost :func:`step` scope open in this process, if any (where a
    ``Logger.log_metrics`` without a step lands)."""
    steps = _state.steps
    return steps[-1]._step if steps else None


class Step(Scope):
    """One training step: the umbrella span ``rl.step`` (``rl.iteration``, never
    ``rl.bucket``), and when it ends the step's efficiency summary (see :func:`step`)."""

    __slots__ = ("_deliver", "_given", "_iteration", "_logger", "_step", "_tag_values")

    def __init__(
        self,
        n: int,
        *,
        logger: Logger | None = None,
        weight_version: str | int | None = None,
        num_generations_per_prompt: int | None = None,
        tags: Mapping[str, Any] | None = None,
        summary: bool = True,
    ) -> None:
        self._span = None
        self._given = n
        self._logger = logger
        self._deliver = summary
        self._tag_values = (weight_version, num_generations_per_prompt, tags)
        self._iteration: int | None = None
        self._step = 0

    def __enter__(self) -> Step:
        iteration = as_step(self._given)  # the one rule for a step (the Logger's too)
        state = _state
        if iteration is None:
            warn_once(
                "step:n",
                f"rlmetrics.step: the step must be an int, got {describe_value(self._given)}; its "
                "span has no rl.iteration and its summary is logged as the step after the last",
            )
            self._step = 0 if state.last_step is None else state.last_step + 1
        else:
            self._step = iteration
        self._iteration = iteration
        state.last_step = self._step
        self._open(state.clock)
        if state.run_start_ns is None:
            state.run_start_ns = self._t0
        state.steps.append(self)
        return self

    def _name(self) -> str:
        return STEP_SPAN

    def _attributes(self) -> dict[str, Any]:
        weight_version, generations, tags = self._tag_values
        attributes: dict[str, Any] = _tags(tags, "rlmetrics.step") if tags else {}
        if self._iteration is not None:
            attributes[ITERATION_ATTR] = self._iteration
        for key, value, kinds in (
            (WEIGHT_VERSION_ATTR, weight_version, (str, int)),
            (GENERATIONS_ATTR, generations, (int,)),
        ):
            if value is None:
                continue
            if isinstance(value, kinds) and not isinstance(value, bool):
                attributes[key] = value
            else:
                warn_once(
                    f"step:{key}",
                    f"rlmetrics.step: {key} must be {' or '.join(k.__name__ for k in kinds)}, "
                    f"got {describe_value(value)}; dropped",
                )
        return attributes

    def _ended(self, t1: int) -> None:
        state = _state
        with contextlib.suppress(ValueError):
            state.steps.remove(self)
        if not self._deliver:
            return
        run_start = state.run_start_ns if state.run_start_ns is not None else self._t0
        seconds = state.run_timer.snapshot()
        seconds.update(state.step_timer.take())
        try:
            summary = EfficiencySummary(
                seconds=seconds,
                step_wall_time_s=(t1 - self._t0) / 1e9,
                run_elapsed_s=(t1 - run_start) / 1e9,
            )
            if self._logger is not None:
                self._logger.log_efficiency_summary(summary, self._step)
            else:
                _plugins.hooks().on_efficiency_summary(summary, self._step)
        except Exception:
            warn_once("step:summary", "rlmetrics.step: the step's efficiency summary was lost")


def step(
    n: int,
    *,
    logger: Logger | None = None,
    weight_version: str | int | None = None,
    num_generations_per_prompt: int | None = None,
    tags: Mapping[str, Any] | None = None,
    summary: bool = True,
) -> Step:
    """Time one training step: ``with rlmetrics.step(n, logger=logger):``.

    While tracing, the step is the span ``rl.step`` with ``rl.iteration=n`` (and
    ``rl.weight_version``, ``rl.num_generations_per_prompt`` when given: span tags, never
    metric labels); the phases inside are its children. When the block ends, the step's
    :class:`~rlmetrics.events.EfficiencySummary` (the step's wall time, the seconds of the
    phases accounted per step, the run totals of the cumulative ones) goes to
    ``logger.log_efficiency_summary(summary, n)`` — backends get its ``efficiency/*`` dict —
    or, without a logger, straight to the ``on_efficiency_summary`` hook. ``summary=False``
    skips that (a loop that logs ``efficiency/*`` itself). Never raises.
    """
    return Step(
        n,
        logger=logger,
        weight_version=weight_version,
        num_generations_per_prompt=num_generations_per_prompt,
        tags=tags,
        summary=summary,
    )


class Umbrella(Scope):
    """A span that groups others and carries no ``rl.bucket`` (the run, a rollout)."""

    __slots__ = ("_clock_fn", "_saved", "_span_name", "_tags")

    def __init__(
        self,
        name: str,
        tags: Mapping[str, Any] | None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._span = None
        self._span_name = name
        self._tags = tags
        self._clock_fn = clock

    def __enter__(self) -> Umbrella:
        state = _state
        if self._span_name == RUN_SPAN:  # a run's accounting starts from nothing
            state.step_timer.take()
            state.run_timer.take()
            state.last_step = None
        clock = state.clock
        if self._clock_fn is not None:
            self._saved = clock
            clock = state.clock = _clock(self._clock_fn)
        self._open(clock)
        if self._span_name == RUN_SPAN:
            state.run_start_ns = self._t0
        return self

    def _ended(self, t1: int) -> None:
        if self._clock_fn is not None:  # the run's own clock ends with it
            _state.clock = self._saved

    def _name(self) -> str:
        return self._span_name

    def _attributes(self) -> dict[str, Any]:
        return _tags(self._tags, f"rlmetrics:{self._span_name}") if self._tags else {}


def run(
    tags: Mapping[str, Any] | None = None, *, clock: Callable[[], float] | None = None
) -> Umbrella:
    """The run's umbrella span ``rl.run``: ``with rlmetrics.run():`` around the training loop.
    Entering it starts the run's accounting afresh: the totals of ``cumulative`` phases and
    the run's elapsed time count from here.

    :param clock: a function returning seconds (Unix time) that every phase and step inside
        reads instead of the real clock: a simulation's time (``rlmetrics demo`` uses it).
    """
    return Umbrella(RUN_SPAN, tags, clock)


def rollout(tags: Mapping[str, Any] | None = None) -> Umbrella:
    """A rollout's umbrella span ``rl.rollout`` (no ``rl.bucket``); phases inside are its
    children."""
    return Umbrella(ROLLOUT_SPAN, tags)


# -- context across processes -------------------------------------------------------------------


def trace_carrier() -> dict[str, str]:
    """The current span's W3C trace context (``traceparent``, ``tracestate``) as a dict to hand
    to another process (a Ray task's argument); ``{}`` when not tracing. On a thread with no
    span of its own, the innermost open step's."""
    binding = _state.binding
    if binding is None:
        return {}
    try:
        return binding.carrier()
    except Exception:
        warn_once("tracing:carrier", "rlmetrics.trace_carrier failed; no context carried")
        return {}


def trace_env() -> dict[str, str]:
    """:func:`trace_carrier` as the environment variables a child process reads
    (``TRACEPARENT``, ``TRACESTATE``): its ``rlmetrics.start()`` then parents every span that
    has no other parent in that process on the current span."""
    carrier = trace_carrier()
    env = {}
    if carrier.get("traceparent"):
        env[TRACEPARENT_ENV] = carrier["traceparent"]
        if carrier.get("tracestate"):
            env[TRACESTATE_ENV] = carrier["tracestate"]
    return env


@contextlib.contextmanager
def trace_context(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Make the context a :func:`trace_carrier` holds current for the block, so spans begun
    inside are children of the span it came from (a worker's side of a Ray call). A no-op when
    not tracing or when the carrier holds no valid context (reported once)."""
    binding = _state.binding
    token = None
    if binding is not None and carrier:
        try:
            context = binding.propagator.extract(dict(carrier))
            if binding.get_current_span(context).get_span_context().is_valid:
                token = binding.attach(context)
            else:
                warn_once(
                    "tracing:carrier-invalid",
                    "rlmetrics.trace_context: the carrier holds no W3C traceparent; spans start "
                    "their own traces",
                )
        except Exception:
            warn_once("tracing:context", "rlmetrics.trace_context failed; no context entered")
    try:
        yield
    finally:
        if token is not None:
            with contextlib.suppress(Exception):
                binding.detach(token)  # type: ignore[union-attr]
