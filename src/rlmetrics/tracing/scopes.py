"""The spans rlmetrics opens: :class:`Scope` (what every one shares: its span, the two clock
readings, ending it from another thread at shutdown), the step's umbrella span
:class:`Step`, and :class:`Umbrella` (the run, a rollout). A phase, the leaf span, is
:class:`rlmetrics.tracing.phases.Phase`.

What a span carries follows the spec: per-step categoricals (``rl.iteration``,
``rl.weight_version``) are span tags, never metric labels; numbers that change over time are
never on spans; umbrella spans carry no ``rl.bucket``.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from .. import plugins as _plugins
from .._warn import describe_key, describe_number, describe_value, warn_once
from ..events import EfficiencySummary
from ..redaction import REDACTED, configured_redaction
from ..storable import utf8_text
from ..values import as_plain, as_step
from ._state import kinds as phase_table
from ._state import state
from .accounting import Clock, PhaseSeconds, clock_of, overlap_ns
from .naming import LOOP, step_seconds

if TYPE_CHECKING:
    from ..logger import Logger

__all__ = [
    "BUCKET_ATTR",
    "GENERATIONS_ATTR",
    "ITERATION_ATTR",
    "PHASE_ATTR",
    "ROLLOUT_SPAN",
    "RUN_SPAN",
    "STEP_SPAN",
    "STEP_SPANS",
    "THREAD_ID_ATTR",
    "THREAD_NAME_ATTR",
    "TRUNCATED_ATTR",
    "WEIGHT_VERSION_ATTR",
    "Scope",
    "Step",
    "Umbrella",
    "clock_ran_back",
    "close_open_scopes",
    "current_step",
    "step_account",
    "step_here",
    "exited_unentered",
    "rollout",
    "run",
    "span_tags",
    "step",
]

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
#: What a step's span is called: ``rl.step``, or ``rl.loop`` under the RL naming profile
#: (``start(naming="rl_proposal")``); a trace's readers take either.
STEP_SPANS = frozenset({STEP_SPAN, "rl.loop"})
ROLLOUT_SPAN = "rl.rollout"


def _thread_attributes(attributes: dict[str, Any]) -> int:
    """The ``thread.*`` attributes of a span started on this thread (none on the main one);
    returns the thread's id."""
    ident = threading.get_ident()
    if ident != state.main_thread:
        attributes[THREAD_ID_ATTR] = ident
        attributes[THREAD_NAME_ATTR] = threading.current_thread().name
    return ident


def exited_unentered(scope: Scope) -> None:
    """``scope`` was exited while not running: never entered, or exited twice. Said once;
    nothing is timed or accounted for it."""
    warn_once(
        "tracing:unentered",
        f"rlmetrics: a {type(scope).__name__.lower()} was exited without being entered (or "
        "exited twice); ignored. Time a block with `with rlmetrics.phase(...):` / "
        "`with rlmetrics.step(n):`, or call __enter__ before __exit__",
    )


def clock_ran_back(scope: Scope, t0: int, t1: int) -> int:
    """``scope`` started at clock reading ``t0`` and ends at ``t1``, earlier: its clock ran
    back (a simulation's, a timer's). It lasted no time, said once; returns ``t0``."""
    warn_once(
        "tracing:clock-back",
        f"rlmetrics: the clock ran back {(t0 - t1) / 1e9:.3g} s during a "
        f"{type(scope).__name__.lower()}; it is counted as no time (its span ends where it "
        "began). A clock passed to rlmetrics.run / a timer must never go back",
        expected=True,
    )
    return t0


_Scope = TypeVar("_Scope", bound="Scope")

#: Set when a scope's span starts: resetting its token tells whether the scope ends in the
#: context it started in (a token resets only there), before OpenTelemetry's own token is.
_entered_here: contextvars.ContextVar[None] = contextvars.ContextVar("rlmetrics_entered")


def _started_in_this_context(scope: Scope) -> bool:
    """Whether ``scope`` ends in the context (the task's, the thread's) it started in."""
    try:
        _entered_here.reset(scope._entered)
    except ValueError:  # created in another context
        return False
    except RuntimeError:  # used already: not reached (a scope ends once)
        pass
    return True


class Scope:
    """A span rlmetrics opens and ends (a phase, a step, a rollout, the run). Subclasses say
    what it is called, what it carries and what happens when it ends."""

    __slots__ = (
        "__weakref__",
        "_binding",
        "_clock",
        "_entered",
        "_order",
        "_span",
        "_t0",
        "_thread",
        "_token",
    )
    #: The clock reading it started at; None while it is not running (never entered, or
    #: ended), so an exit without an entry is told from one.
    _t0: int | None
    #: Whether, started where no span is current (a thread pool's worker), its span is a
    #: child of the innermost open step; a step is not (another task's step is no parent).
    _joins_open_step: ClassVar[bool] = True

    def __init__(self) -> None:
        self._span: Any = None
        self._token: Any = None
        self._t0 = None

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
    def __enter__(self) -> Scope:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close(exc)

    # The async with-block, for an async loop (``async with rlmetrics.step(n):``): the same
    # scope, entered and ended on the task's thread. Its span is the current one in the task's
    # own context, which asyncio keeps across the task's awaits, so concurrent tasks' scopes
    # nest each in its own.
    async def __aenter__(self: _Scope) -> _Scope:
        self.__enter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)

    def _open(self, clock: Clock) -> None:
        self._clock = clock
        self._t0 = t0 = clock.now()
        binding = state.binding
        if binding is not None:
            try:
                attributes = self._attributes()
                self._thread = _thread_attributes(attributes)
                self._span, self._token = binding.start(
                    self._name(), attributes, t0 + clock.offset, self._joins_open_step
                )
                self._entered = _entered_here.set(None)  # which context it started in
            except Exception:
                self._span = self._token = None
                warn_once("tracing:start", "rlmetrics: a span could not start; timing goes on")
                return
            self._binding = binding  # detached by the same, even after tracing stopped
            state.sequence += 1
            self._order = state.sequence
            state.open[id(self)] = self

    def _close(self, error: BaseException | None) -> None:
        t0 = self._t0
        if t0 is None:
            exited_unentered(self)
            return
        t1 = self._clock.now()
        if t1 < t0:
            t1 = clock_ran_back(self, t0, t1)
        span = self._span
        if span is None:
            self._finish(t1)
            self._t0 = None
            return
        binding = self._binding
        token, self._token = self._token, None
        mine = state.open.pop(id(self), None) is not None  # else a closer ended it already
        if token is not None:
            if threading.get_ident() == self._thread:
                if _started_in_this_context(self):
                    try:
                        binding.leave(token, span)
                    except Exception:
                        warn_once("tracing:detach", "rlmetrics: a span's context could not be left")
                else:  # OpenTelemetry would log a ValueError traceback at ERROR
                    warn_once(
                        "tracing:context",
                        f"rlmetrics: a {type(self).__name__.lower()} was ended in another "
                        "context than the one it started in (an async generator left inside "
                        "a phase, which the event loop closes later in a task of its own); "
                        "its span ends and its seconds count, and the next spans of the task "
                        "it started in go under that task's step. Leave a phase before the "
                        "generator yields, or close the generator (`await gen.aclose()`)",
                        expected=True,  # the GeneratorExit closing it is no error
                    )
            else:  # a context can be left only on the thread that entered it
                warn_once(
                    "tracing:thread",
                    f"rlmetrics: a {type(self).__name__.lower()} was ended on another thread "
                    "than the one it started on; its span ends and its seconds count, but the "
                    "starting thread's context still holds it until its enclosing step ends. "
                    "Enter and exit a phase on the same thread",
                )
        if not mine:
            return
        self._finish(t1)
        self._t0 = None
        try:
            if error is not None and not isinstance(error, GeneratorExit):
                binding.fail(span, error)
            span.end(end_time=t1 + self._clock.offset)
        except Exception:
            warn_once("tracing:end", "rlmetrics: a span could not end; timing goes on")
        self._span = None

    def _truncate(self, reason: str) -> None:
        """End the span now, from another thread: it was still open at shutdown."""
        if state.open.pop(id(self), None) is None:
            return  # its owner ended it meanwhile
        t1 = self._clock.now()
        if self._t0 is not None and t1 < self._t0:
            t1 = clock_ran_back(self, self._t0, t1)
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
    phase's seconds count, a step delivers its summary). An open live trajectory is delivered
    as it stands, outcome ``truncated``. Returns how many spans were closed.

    With ``logger``, only the steps that deliver to it and what was opened inside them (after
    them), and the live trajectories that deliver to it: a Logger that finishes ends its own
    steps, not a run another Logger serves.
    """
    # Live trajectories first: the innermost, and delivered while their step is open.
    for live in list(state.live.values()):
        if logger is None or live._logger is logger:
            try:
                live._truncate(reason)
            except Exception:
                warn_once("tracing:close-trajectory", "rlmetrics: an open trajectory was lost")
    untraced = 0
    if logger is not None:  # its steps with no span (not tracing) end too, innermost first
        for step in reversed(list(state.steps)):
            if step._logger is logger and step._span is None and step._t0 is not None:
                step._end_untraced()
                untraced += 1
    scopes = sorted(list(state.open.values()), key=lambda s: s._order, reverse=True)
    if logger is not None:
        mine = [s._order for s in scopes if isinstance(s, Step) and s._logger is logger]
        if not mine:
            return untraced
        scopes = [s for s in scopes if s._order >= min(mine)]
    for scope in scopes:
        try:
            scope._truncate(reason)
        except Exception:
            warn_once("tracing:close", "rlmetrics: closing an open span failed")
    return len(scopes) + untraced


def _tag_value(value: Any) -> Any:
    """``value`` as a span attribute can hold it: a NumPy or torch integer or bool as the
    Python one (as a step is taken), anything else as it is."""
    if isinstance(value, (str, int)):
        return value
    plain = as_plain(value)
    return plain if isinstance(plain, (str, int)) else value


def span_tags(tags: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Span attributes from ``tags``: string keys, and string, int or bool values. A float is
    a time-series number, which belongs on a metric; it is dropped with a warning. A tag
    whose key names a secret (:mod:`rlmetrics.redaction`, as the configuration's ``[logger]
    redact`` says) is ``"<redacted>"``."""
    out: dict[str, Any] = {}
    try:
        items = list(tags.items())
    except Exception:
        warn_once(f"{where}:tags", f"{where}: tags must be a mapping; ignored")
        return out
    redact = configured_redaction()
    for key, value in items:
        value = _tag_value(value)
        if type(value) is str and utf8_text(value)[1]:
            # A name decoded with surrogateescape: OTLP cannot encode it, and the SDK's
            # encoder would drop it at every export with an ERROR traceback of its own.
            warn_once(
                f"{where}:tag-text",
                f"{where}: tag {describe_key(key)} dropped: its value is no UTF-8 text (a "
                "name decoded with surrogateescape); decode such a name with "
                "errors='replace'",
            )
        elif type(key) is str and key and isinstance(value, (str, int)):
            out[key] = REDACTED if redact.secret(key) else value
        else:
            warn_once(
                f"{where}:tag",
                f"{where}: tag {describe_key(key)} with {describe_value(value)} dropped: a span "
                "tag is a string, int or bool (numbers that change over time are metrics)",
            )
    return out


def current_step() -> int | None:
    """The step of the :func:`step` scope open here (:func:`step_here`: this task's own, else
    the innermost open in the process), if any: where a ``Logger.log_metrics`` without a
    step lands."""
    step = step_here()
    return None if step is None else step._step


#: The step this context is in: an asyncio task's own (each task runs in a copy of the context
#: it was created in), or the thread's.
_context_step: contextvars.ContextVar[Step | None] = contextvars.ContextVar(
    "rlmetrics_step", default=None
)


def step_here() -> Step | None:
    """The open step a phase started here belongs to: this context's (an asyncio task's own
    step, when concurrent tasks each run one), else the innermost open step of the process
    (a thread with no span of its own belongs to the step the loop is in)."""
    steps = state.steps
    step = _context_step.get()
    if step is not None and step in steps:  # else it ended (in another context, or truncated)
        return step
    return steps[-1] if steps else None


def step_account(shared: PhaseSeconds) -> PhaseSeconds:
    """Where a per-step phase's seconds go: the account of the step it belongs to
    (:func:`step_here`), so concurrent tasks' steps (or a step inside a step) each sum their
    own; ``shared`` (``state.step_timer``) outside any step, which the next step to end takes."""
    step = step_here()
    return shared if step is None else step._seconds


class Step(Scope):
    """One training step: the umbrella span ``rl.step`` (``rl.iteration``, never
    ``rl.bucket``), and when it ends the step's efficiency summary (see :func:`step`)."""

    __slots__ = (
        "_context_token",
        "_deliver",
        "_ended_early",
        "_given",
        "_iteration",
        "_logger",
        "_seconds",
        "_step",
        "_tag_values",
    )
    _joins_open_step: ClassVar[bool] = False

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
        self._t0 = None
        self._given = n
        self._logger = logger
        self._deliver = summary
        self._tag_values = (weight_version, num_generations_per_prompt, tags)
        self._iteration: int | None = None
        self._step = 0
        self._context_token: contextvars.Token[Step | None] | None = None
        self._ended_early = False
        #: The seconds of its per-step phases (``step_account``).
        self._seconds = PhaseSeconds()

    def __enter__(self) -> Step:
        iteration = as_step(self._given)  # the one rule for a step (the Logger's too)
        if iteration is None:
            warn_once(
                "step:n",
                "rlmetrics.step: the step must be an int from 0 to 2**63 - 1 (a NumPy or torch "
                f"integer counts), got {describe_number(self._given)}; its span has no "
                "rl.iteration and its summary is logged as the step after the last",
            )
            self._step = 0 if state.last_step is None else state.last_step + 1
        else:
            self._step = iteration
        self._iteration = iteration
        state.last_step = self._step
        if _plugins._plugins is not state.kinds_source:  # the phase table its phases read
            phase_table()
        self._open(state.clock)
        if state.run_start_ns is None:
            state.run_start_ns = self._t0
        state.steps.append(self)
        self._context_token = _context_step.set(self)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, self._context_token = self._context_token, None
        if token is not None:
            with contextlib.suppress(ValueError):  # left in another context than entered
                _context_step.reset(token)
        if self._ended_early:  # ended at its Logger's finish(): nothing twice
            self._ended_early = False
            return
        self._close(exc)

    def _end_untraced(self) -> None:
        """End now, a step with no span still open when its Logger finishes (as a traced one
        is truncated): its seconds and summary are logged; its late exit ends nothing."""
        self._ended_early = True
        try:
            self._finish(self._clock.now())
        finally:
            self._t0 = None

    def _name(self) -> str:
        naming = state.naming
        if naming is not None:
            try:
                return naming.span_name(LOOP)
            except Exception:
                warn_once("naming:span", "rlmetrics: the naming profile could not name a span")
        return STEP_SPAN

    def _attributes(self) -> dict[str, Any]:
        weight_version, generations, tags = self._tag_values
        attributes: dict[str, Any] = span_tags(tags, "rlmetrics.step") if tags else {}
        if self._iteration is not None:
            attributes[ITERATION_ATTR] = self._iteration
        naming = state.naming
        if naming is not None:
            try:
                naming.step_attributes(attributes, self._iteration)
            except Exception:
                warn_once("naming:step-tags", "rlmetrics: the naming profile's step tags failed")
        for key, value, kinds in (
            (WEIGHT_VERSION_ATTR, weight_version, (str, int)),
            (GENERATIONS_ATTR, generations, (int,)),
        ):
            if value is None:
                continue
            value = _tag_value(value)
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
        with contextlib.suppress(ValueError):
            state.steps.remove(self)
        # The rows of the step's live trajectories, held to be one table, go to the trackers.
        from ..trajectories.held_rows import release_step

        release_step(self._step)
        t0 = self._t0
        if state.naming is not None and t0 is not None:
            step_seconds(state.naming, (t1 - t0) / 1e9)
        # A wall-clock phase still open counts up to the step's end here, the rest where it
        # ends (a thread's phase outside the step, the next step's).
        # A wall-clock name timed both in the step and outside any step (a collector thread's
        # wait begun before the step) counts the time both covered once: their stretches say.
        ours: dict[str, list[tuple[int, int]]] = {}
        theirs: dict[str, list[tuple[int, int]]] = {}
        own = self._seconds.close(t1, ours)
        outside = state.step_timer.take(now=t1, stretches=theirs)
        if not self._deliver or t0 is None:  # its window ends all the same: the next step
            return  # starts from zero
        run_start = state.run_start_ns if state.run_start_ns is not None else t0
        seconds = state.run_timer.snapshot()
        for name, value in outside.items():  # timed outside any step, since the last one
            both = ours.get(name) and theirs.get(name)
            counted_twice = overlap_ns(ours[name], theirs[name]) / 1e9 if both else 0.0
            own[name] = own.get(name, 0.0) + value - counted_twice
        seconds.update(own)
        try:
            summary = EfficiencySummary(
                seconds=seconds,
                step_wall_time_s=(t1 - t0) / 1e9,
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
        self._t0 = None
        self._span_name = name
        self._tags = tags
        self._clock_fn = clock

    def __enter__(self) -> Umbrella:
        if self._span_name == RUN_SPAN:  # a run's accounting starts from nothing
            state.start_run()
            state.runs += 1
        clock = state.clock
        if self._clock_fn is not None:
            self._saved = clock
            clock = state.clock = clock_of(self._clock_fn)
        self._open(clock)
        if self._span_name == RUN_SPAN:
            state.run_start_ns = self._t0
        return self

    def _ended(self, t1: int) -> None:
        if self._span_name == RUN_SPAN:
            state.runs = max(0, state.runs - 1)
        if self._clock_fn is not None:  # the run's own clock ends with it
            state.clock = self._saved

    def _name(self) -> str:
        return self._span_name

    def _attributes(self) -> dict[str, Any]:
        return span_tags(self._tags, f"rlmetrics:{self._span_name}") if self._tags else {}


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
