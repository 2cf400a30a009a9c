"""The phase API: ``with rlmetrics.phase("generation", bucket="productive"):`` (or a
decorator) reads the clock once when the block starts and once when it ends; the two readings
are its leaf span, tagged ``rl.bucket`` (while tracing), *and* the seconds added to the
phase's accounting. :class:`PhaseTimer` is a phase factory with accounting of its own (the
efficiency family's ``EfficiencyTimer``); :func:`account` adds seconds measured elsewhere.

This module names no phase and no category: which names are accounted, per step or over the
run, and which bucket their span carries, plugins offer through ``register_phases``
(:class:`~rlmetrics.tracing.accounting.PhaseKind`). A phase no plugin offers is a span only;
without an explicit bucket it is ``overhead``, as NeMo-RL tags an unknown leaf.

Without tracing a phase is two clock readings and an append: the path is written inline for
that (see :meth:`Phase.__exit__`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from .. import plugins as _plugins
from .._warn import describe_key, describe_value, warn_once
from ._state import kinds, state, target
from .accounting import BUCKETS, MAX_PENDING, PhaseSeconds, WallClock, clock_of
from .naming import phase_seconds
from .scopes import (
    BUCKET_ATTR,
    ITERATION_ATTR,
    PHASE_ATTR,
    Scope,
    clock_ran_back,
    exited_unentered,
    span_tags,
    step_account,
    step_here,
)

__all__ = [
    "DEFAULT_BUCKET",
    "Phase",
    "PhaseTimer",
    "account",
    "phase",
    "phase_span_name",
]

#: The bucket of a phase that neither names one nor is offered by a plugin.
DEFAULT_BUCKET = "overhead"
_INVALID_NAME = "rl.phase"

_F = TypeVar("_F", bound=Callable[..., Any])


def _span_name(name: str) -> str:
    """A phase's span name: ``rl.`` and its name with ``/`` as ``.`` (``idle/refit_bubble`` is
    ``rl.idle.refit_bubble``), as NeMo-RL names efficiency spans."""
    dotted = name.replace("/", ".")
    return dotted if dotted.startswith("rl.") else "rl." + dotted


phase_span_name = functools.lru_cache(maxsize=1024)(_span_name)


class PhaseTimer(PhaseSeconds):
    """Seconds per phase name, added up across threads, and the phases that add to them.

    ``time(name)`` is a :class:`Phase` whose seconds land here (and which is a span while
    tracing); ``record(name, seconds)`` adds seconds measured elsewhere, without a span. The
    efficiency family's ``EfficiencyTimer`` and ``CollectorTimer`` are timers of this kind.

    :param clock: a function returning seconds that the phases of this timer read; the default
        is monotonic and dates spans in Unix time.
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        super().__init__()
        self._clock = clock_of(clock)
        kinds()  # which names are wall-clock ones: its phases' starts read the table

    def time(
        self, name: str, bucket: str | None = None, tags: Mapping[str, Any] | None = None
    ) -> Phase:
        """A phase whose seconds this timer adds up (a ``with`` block or a decorator)."""
        return Phase(name, bucket, tags, self)

    def _after_fork_in_child(self) -> None:
        """A forked child goes on with this timer (a worker given the driver's) and only the
        thread that forked: a wall-clock phase the parent's other threads had open never ends
        here, and would count for as long as the child lives. Each phase open at the fork
        ends at it; one the forking thread itself has open then counts up to the fork only
        (which thread opened a phase is not kept: it would cost every phase)."""
        super()._after_fork_in_child()
        try:
            now = self._clock.now()
            for wall in list(self._walls.values()):
                still_open = wall.open + len(wall.starts) - len(wall.ends)
                if still_open > 0:
                    wall.ends.extend([now] * still_open)
            self._fold()
        except Exception:
            warn_once(
                "tracing:fork", "rlmetrics: a timer's phases open at the fork could not be ended"
            )


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

    __slots__ = ("_account", "_bucket", "_phase", "_tags", "_timer", "_wall")

    def __init__(
        self,
        name: str,
        bucket: str | None = None,
        tags: Mapping[str, Any] | None = None,
        timer: PhaseTimer | None = None,
    ) -> None:
        self._span = None
        self._t0 = None
        self._phase = name
        self._tags = tags
        self._timer = timer
        #: A wall-clock name's readings while it runs (see :meth:`__enter__`), else None.
        self._wall: WallClock | None = None
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
        clock = self._clock = state.clock if timer is None else timer._clock
        t0: int | None
        if state.binding is None:  # not tracing: two clock readings and the accounting
            self._t0 = t0 = clock.now()
        else:
            self._open(clock)
            t0 = self._t0
        # A wall-clock name's start is one of its readings (overlapping phases count once):
        # written inline, as the exit's accounting is, for the path without tracing. The
        # phase table is current: telemetry's start, a step's, a timer's making and every
        # phase's end read it again when the plugins change.
        try:
            if self._phase not in state.wall_clock or t0 is None:
                return self
            name = self._phase
            if timer is not None:
                accounts: PhaseSeconds | None = timer
            else:  # target(name), inlined
                accounts = state.targets.get(name)
                if accounts is state.step_timer:
                    accounts = step_account(accounts)
            if accounts is not None:  # the accounting its end goes to as well
                wall = accounts._walls.get(name) or accounts.wall_clock(name)
                self._wall = wall
                self._account = accounts
                wall.starts.append(t0)
        except Exception:  # an unhashable name: said at the exit
            pass
        return self

    def _close_wall_clock(self, wall: WallClock, t1: int) -> None:
        """End a wall-clock phase at ``t1`` in the accounting it started in; if that one was
        closed meanwhile (its step ended, counting the phase up to then), in the one current
        now, from the closing on."""
        self._wall = None
        accounts: PhaseSeconds = self._account
        closed_at = accounts._closed_at
        if closed_at is None:
            wall.ends.append(t1)
            if len(wall.ends) > MAX_PENDING:
                accounts._fold()
            return
        name, t0 = self._phase, self._t0
        start = closed_at if t0 is None else max(t0, closed_at)
        later = self._timer if self._timer is not None else target(name)
        if later is state.step_timer:
            later = step_account(later)
        if later is None or later._closed_at is not None:
            return
        wall = later.wall_clock(name)
        wall.starts.append(start)
        wall.ends.append(t1)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._span is not None:
            self._close(exc)
            return
        t0 = self._t0
        if t0 is None:  # never entered, or exited twice
            exited_unentered(self)
            return
        t1 = self._clock.now()
        if t1 < t0:
            t1 = clock_ran_back(self, t0, t1)
        seconds = (t1 - t0) / 1e9
        name = self._phase
        wall = self._wall
        if wall is not None:  # a wall-clock phase: its end is one of its name's readings
            if state.naming is not None:
                phase_seconds(state.naming, name, seconds)
            if self._account._closed_at is None:  # _close_wall_clock, inlined
                self._wall = self._t0 = None
                ends = wall.ends
                ends.append(t1)
                if len(ends) > MAX_PENDING:
                    self._account._fold()
                return
            try:
                self._close_wall_clock(wall, t1)
            except Exception:
                warn_once(
                    "tracing:Phase", "rlmetrics: accounting a phase failed; its seconds are lost"
                )
            self._t0 = None
            return
        self._t0 = None
        if type(name) is not str:
            self._valid_name()  # reported once; accounted nowhere
            return
        if state.naming is not None:
            phase_seconds(state.naming, name, seconds)
        try:
            timer = self._timer
            if timer is not None:
                timer.record(name, seconds)
                return
            if _plugins._plugins is state.kinds_source:  # target(name), inlined
                accounts = state.targets.get(name)
            else:
                accounts = target(name)
            if accounts is state.step_timer:
                accounts = step_account(accounts)
            if accounts is not None:  # the step's or the run's: PhaseSeconds.record, inlined
                pending = accounts._pending
                pending.append((name, seconds))
                if len(pending) > MAX_PENDING:
                    accounts._fold()
        except Exception:
            warn_once("tracing:Phase", "rlmetrics: accounting a phase failed; its seconds are lost")

    def __call__(self, function: _F) -> _F:
        """Time every call of ``function`` as this phase (``@rlmetrics.phase(...)``). A
        generator function is refused (TypeError): a call only creates the generator."""
        if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function):
            raise TypeError(
                f"@rlmetrics.phase({self._phase!r}) cannot time the generator function "
                f"{getattr(function, '__qualname__', function)!r}: calling it only creates "
                "the generator, and its iteration would go untimed. Time the loop that "
                "consumes it: `with rlmetrics.phase(...): for item in gen(): ...`"
            )
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
        name, t0 = self._phase, self._t0
        if type(name) is not str or t0 is None:
            return
        if state.naming is not None:
            phase_seconds(state.naming, name, (t1 - t0) / 1e9)
        wall = self._wall
        if wall is not None:
            self._close_wall_clock(wall, t1)
            return
        accounts = self._timer if self._timer is not None else target(name)
        if accounts is state.step_timer:
            accounts = step_account(accounts)
        if accounts is not None:
            accounts.record(name, (t1 - t0) / 1e9)

    def _name(self) -> str:
        name = self._valid_name()
        if name is None:
            return _INVALID_NAME
        naming = state.naming
        if naming is not None:  # a stage of the profile takes the profile's span name
            try:
                stage = naming.stage(name)
                if stage is not None:
                    return naming.span_name(stage)
            except Exception:
                warn_once("naming:span", "rlmetrics: the naming profile could not name a span")
        return phase_span_name(name)

    def _attributes(self) -> dict[str, Any]:
        name = self._valid_name()
        attributes: dict[str, Any] = {}
        if self._tags:
            attributes.update(span_tags(self._tags, "rlmetrics.phase"))
        bucket = self._bucket
        if name is not None:
            attributes[PHASE_ATTR] = name
        if bucket is None:
            kind = None if name is None else kinds().get(name)
            bucket = DEFAULT_BUCKET if kind is None else kind.bucket
        if bucket is not None:
            attributes[BUCKET_ATTR] = bucket
        step = step_here()
        if step is not None and step._iteration is not None:
            attributes[ITERATION_ATTR] = step._iteration
        return attributes


#: ``rlmetrics.phase(name, bucket=None, tags=None)``: the class itself, so a phase costs one
#: call less (see :class:`Phase`).
phase = Phase


def account(name: str, seconds: float) -> None:
    """Add ``seconds`` measured elsewhere to phase ``name``'s accounting, without a span: the
    seconds a pool of worker threads spent, summed (``wasted/failed_trajectory``). A name no
    plugin offers is accounted nowhere."""
    try:
        accounts = target(name) if type(name) is str else None
        if accounts is state.step_timer:
            accounts = step_account(accounts)
    except Exception:
        accounts = None
    if accounts is None:
        warn_once(
            "phase:account",
            f"rlmetrics.account: {describe_key(name)} is no phase a plugin offers; not accounted",
        )
        return
    accounts.record(name, seconds)  # seconds that are no duration: dropped there, said once
