"""The live form: a trajectory built while an agent loop runs.

::

    with rlmetrics.trajectory("p3-2", group="p3", env="math", step=n, logger=logger) as t:
        with t.turn():
            t.generation(model="policy", input_tokens=120, output_tokens=30,
                         finish_reason="tool_calls", latency_s=0.8, weight_version=12)
            t.tool_call("search", latency_s=0.3)
        t.reward(1.0, component="correct")

``async with`` works the same. The builder keeps plain records of what happened (each call is
read by the same code as an after-the-fact record's fields) and measures when it happened;
when the block ends, the finished :class:`~rlmetrics.trajectories.records.Trajectory` goes
where ``Logger.log_trajectories`` sends its records: spans (parented where the block began:
the current span, else the open step, else the process's ``TRACEPARENT``), a row for the
logger's trackers, the metrics. Its spans are always kept (the span budget is for batches).

Called outside an open trajectory, or after it ended, a method warns once and does nothing.
A generation outside ``t.turn()`` opens a turn of its own; a tool call outside one joins the
last turn; a reward outside one belongs to the whole trajectory. An exception leaving the
block makes the outcome ``error`` (its class is ``error.type``) and is not swallowed; a task
cancelled inside it (asyncio's ``CancelledError``) makes it ``truncated``, finish reason
``cancelled``.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .._warn import not_our_exception, warn_once
from ..blocks import Block
from ..tracing._state import state
from ..tracing.scopes import current_step
from .delivery import deliver
from .records import (
    MAX_CALLS_PER_TURN,
    MAX_TURNS,
    OUTCOMES,
    PAST_CAP,
    Generation,
    Reward,
    ToolCall,
    Trajectory,
    Turn,
    _choice,
    _generation,
    _identifier,
    _name,
    _positive,
    _real,
    _reward,
    _seconds_like,
    _tool_call,
)
from .settings import settings
from .spans import now_ns

if TYPE_CHECKING:
    from ..logger import Logger

__all__ = ["LiveTrajectory", "LiveTurn", "trajectory"]


def _closed(what: str) -> None:
    warn_once(
        f"trajectory:closed:{what}",
        f"rlmetrics: {what} called outside an open trajectory (use it inside `with "
        "rlmetrics.trajectory(...) as t:`); ignored",
    )


def _past_cap(kind: str, where: str = "turn") -> None:
    warn_once(
        f"trajectory:live-many:{where}:{kind}",
        f"rlmetrics: a live trajectory's {where} has more than {MAX_CALLS_PER_TURN} "
        f"{kind.replace('_', ' ')}; the first {MAX_CALLS_PER_TURN} are kept in its spans and "
        f"row, {PAST_CAP[kind]}",
    )


class _TurnParts:
    """What one turn collects; ``dropped`` once it is a turn past MAX_TURNS (counted, not
    kept)."""

    __slots__ = (
        "dropped",
        "end_ns",
        "explicit",
        "generations",
        "rewards",
        "start_ns",
        "tool_calls",
    )

    def __init__(self, start_ns: int, explicit: bool) -> None:
        self.start_ns = start_ns
        self.explicit = explicit
        self.dropped = False
        self.end_ns: int | None = None
        self.generations: list[Generation] = []
        self.tool_calls: list[ToolCall] = []
        self.rewards: list[Reward] = []

    def freeze(self) -> Turn:
        return Turn(
            generations=tuple(self.generations),
            tool_calls=tuple(self.tool_calls),
            rewards=tuple(self.rewards),
            start_ns=self.start_ns,
            end_ns=self.end_ns,
        )


def _cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is asyncio's cancellation (asyncio is not imported for the check: a
    process that never imported it has no task to cancel)."""
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)


def _error_class(error: Any) -> Any:
    """An ``error=`` given as the exception a loop caught (or its class) is its class's
    name, what the record's ``error`` holds; its message is never read (it may quote a
    prompt). Anything else is left to the field's check."""
    if isinstance(error, BaseException):
        return type(error).__name__
    if isinstance(error, type) and issubclass(error, BaseException):
        return error.__name__
    return error


class LiveTurn(Block):
    """``with t.turn():`` (or ``async with``): one turn of the trajectory."""

    __slots__ = ("_owner", "_parts")

    def __init__(self, owner: LiveTrajectory | None) -> None:
        self._owner = owner
        self._parts: _TurnParts | None = None

    def __enter__(self) -> LiveTurn:
        owner = self._owner
        if owner is not None:
            self._parts = owner._open_turn()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        parts = self._parts
        if parts is not None and self._owner is not None:
            if parts.end_ns is None:  # else a turn opened inside it ended it where it began
                parts.end_ns = now_ns()
            self._owner._close_turn(parts)


class LiveTrajectory(Block):
    """One trajectory while it runs (see the module's docstring)."""

    __slots__ = (
        "_current",
        "_fields",
        "_last",
        "_logger",
        "_off_policy",
        "_open",
        "_opened_in",
        "_parent",
        "_past",
        "_rewards",
        "_start_ns",
        "_step",
        "_tool_calls",
        "_turn_count",
        "_turns",
        "agent",
        "error",
        "finish_reason",
        "outcome",
        "reward_total",
    )

    def __init__(
        self,
        sample_id: Any,
        *,
        group: Any = None,
        env: Any = None,
        agent: Any = None,
        step: Any = None,
        weight_version: Any = None,
        logger: Logger | None = None,
    ) -> None:
        self._fields = (sample_id, group, env, weight_version)
        self.agent = agent
        self._step = step
        self._logger = logger
        self._open = False
        self.outcome: str | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.reward_total: float | None = None
        self._off_policy: tuple[Any, Any] = (None, None)

    # -- the block ----------------------------------------------------------------------------

    def __enter__(self) -> LiveTrajectory:
        self._open = True
        self._opened_in = current_step()
        state.live[id(self)] = self
        # Turns stay open to a late tool call until the block ends (frozen in _record).
        self._turns: list[_TurnParts] = []
        self._last: _TurnParts | None = None
        self._turn_count = 0
        # Tool calls past the caps by (name, outcome): counted by rl.tool.calls, not kept.
        self._past: dict[tuple[str, str], int] = {}
        self._tool_calls = 0
        self._rewards: list[Reward] = []
        self._current: _TurnParts | None = None
        self._parent = None
        binding = state.binding
        if binding is not None:
            try:
                self._parent = binding.parent()
            except Exception:
                self._parent = None
        self._start_ns = now_ns()
        return self

    @not_our_exception
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Claimed here or by shutdown's _truncate, whichever comes first: delivered once.
        if not self._open or state.live.pop(id(self), None) is None:
            return
        end_ns = now_ns()
        self._open = False
        if exc is not None and _cancelled(exc):
            # Cut, not failed: an async trainer aborting its in-flight rollouts (a weight
            # update, a timeout around the agent) would otherwise show as a burst of errors.
            if self.outcome is None:
                self.outcome = "truncated"
            if self.finish_reason is None:
                self.finish_reason = "cancelled"
        elif exc is not None and not isinstance(exc, GeneratorExit):
            if self.outcome is None:
                self.outcome = "error"
            if self.error is None:
                self.error = type(exc).__name__
        self._deliver(end_ns)

    def _truncate(self, reason: str) -> None:
        """Deliver the trajectory as it stands, outcome ``truncated`` (unless it said one):
        telemetry shuts down (``reason``) while its block still runs, on another thread or
        below a signal handler; the block's own end then delivers nothing."""
        if state.live.pop(id(self), None) is None:
            return  # its block ended meanwhile
        self._open = False
        if self.outcome is None:
            self.outcome = "truncated"
        # At the step its block was in: shutdown may run on another thread, in no step.
        self._deliver(now_ns(), self._opened_in if self._step is None else self._step)

    def _deliver(self, end_ns: int, step: Any = None) -> None:
        try:
            if self._current is not None:
                self._turn_done(self._current, end_ns)
            deliver(
                [self._record(end_ns)],
                self._step if step is None else step,
                self._logger,
                budgeted=False,
                parent=self._parent,
                call="rlmetrics.trajectory",
            )
        except Exception:
            warn_once("trajectory:live", "rlmetrics: a live trajectory could not be logged")

    def _record(self, end_ns: int) -> Trajectory:
        sample_id, group, env, weight_version = self._fields
        identifier = _identifier("sample_id", sample_id)
        if identifier is None:
            warn_once(
                "trajectory:no-sample-id",
                "rlmetrics: a trajectory has no sample_id; it is logged without one (give each "
                "rollout an id to find it in the trace and the table)",
            )
        return Trajectory(
            sample_id=identifier,
            group_id=_identifier("group_id", group),
            env=_name("env", env),
            agent=_name("agent", self.agent),
            outcome=_choice(
                "outcome", self.outcome, OUTCOMES, "success" if self.error is None else "error"
            ),
            finish_reason=_name("finish_reason", self.finish_reason),
            weight_version=_identifier("weight_version", weight_version),
            reward=_real("reward", self.reward_total),
            latency_s=(end_ns - self._start_ns) / 1e9,
            error=_name("error", self.error),
            turns=tuple([parts.freeze() for parts in self._turns]),
            rewards=tuple(self._rewards),
            turn_count=self._turn_count,
            tool_call_count=self._tool_calls,
            start_ns=self._start_ns,
            end_ns=end_ns,
            logprob_mismatch=_seconds_like("logprob_mismatch", self._off_policy[0]),
            importance_ratio=_positive("importance_ratio", self._off_policy[1]),
            tool_calls_past_caps=tuple([(n, o, c) for (n, o), c in self._past.items()]),
        )

    # -- turns --------------------------------------------------------------------------------

    def turn(self) -> LiveTurn:
        """``with t.turn():`` one turn: its generations, tool calls and rewards."""
        if not self._open:
            _closed("turn()")
            return LiveTurn(None)
        return LiveTurn(self)

    def _open_turn(self) -> _TurnParts | None:
        if not self._open:
            _closed("turn()")
            return None
        now = now_ns()
        if self._current is not None:  # an implicit turn, or a turn not left
            self._turn_done(self._current, now)
        parts = self._current = _TurnParts(now, explicit=True)
        return parts

    def _close_turn(self, parts: _TurnParts) -> None:
        if self._current is parts and self._open:
            self._turn_done(parts, parts.end_ns or now_ns())

    def _turn_done(self, parts: _TurnParts, end_ns: int) -> None:
        self._current = None
        if parts.end_ns is None:
            parts.end_ns = end_ns
        self._last = parts
        self._turn_count += 1
        if len(self._turns) < MAX_TURNS:
            self._turns.append(parts)
            return
        if self._turn_count == MAX_TURNS + 1:
            warn_once(
                "trajectory:many-turns",
                f"rlmetrics: a trajectory has more than {MAX_TURNS} turns; the first "
                f"{MAX_TURNS} are kept in its spans and row, all of them are counted",
            )
        parts.dropped = True  # its tool calls are counted; the rest of it is let go
        for call in parts.tool_calls:
            self._count_past(call)
        parts.generations, parts.tool_calls, parts.rewards = [], [], []

    def _count_past(self, call: ToolCall) -> None:
        key = (call.name, call.outcome)
        self._past[key] = self._past.get(key, 0) + 1

    def _turn_for(self, start_ns: int) -> _TurnParts:
        current = self._current
        if current is None:
            current = self._current = _TurnParts(start_ns, explicit=False)
        return current

    # -- what happened ------------------------------------------------------------------------

    @not_our_exception
    def generation(
        self,
        model: Any = None,
        *,
        input_tokens: Any = None,
        output_tokens: Any = None,
        finish_reason: Any = None,
        latency_s: Any = None,
        weight_version: Any = None,
        prompt: Any = None,
        completion: Any = None,
    ) -> None:
        """A model call that just ended (``latency_s`` long). Outside ``t.turn()``, it opens
        a turn of its own."""
        if not self._open:
            _closed("generation()")
            return
        try:
            end_ns = now_ns()
            parsed = _generation(
                {
                    "model": model,
                    "input_tokens": input_tokens,
                    "output_tokens": output_tokens,
                    "finish_reason": finish_reason,
                    "latency_s": latency_s,
                    "weight_version": weight_version,
                    "prompt": prompt,
                    "completion": completion,
                },
                settings().text,
                end_ns,
            )
            if parsed is None:
                return
            start_ns = end_ns - int(parsed.latency_s * 1e9)
            turn = self._current
            if turn is not None and not turn.explicit and turn.generations:
                self._turn_done(turn, max(turn.start_ns, start_ns))  # the next implicit turn
                turn = None
            if turn is None:
                turn = self._turn_for(start_ns)
            if len(turn.generations) < MAX_CALLS_PER_TURN:
                turn.generations.append(parsed)
            else:
                _past_cap("generations")
        except Exception:
            warn_once("trajectory:generation", "rlmetrics: a generation could not be recorded")

    @not_our_exception
    def tool_call(
        self,
        name: Any,
        *,
        outcome: Any = None,
        latency_s: Any = None,
        error: Any = None,
        arguments: Any = None,
        result: Any = None,
    ) -> None:
        """A tool call that just ended. Outside ``t.turn()``, it joins the last turn (which
        then lasts until this call ended); before any turn, it opens one."""
        if not self._open:
            _closed("tool_call()")
            return
        try:
            end_ns = now_ns()
            parsed = _tool_call(
                {
                    "name": name,
                    "outcome": outcome,
                    "latency_s": latency_s,
                    "error": _error_class(error),
                    "arguments": arguments,
                    "result": result,
                },
                settings().text,
                end_ns,
            )
            if parsed is None:
                return
            turn = self._current
            if turn is None:
                turn = self._last
                if turn is not None:  # after a turn closed: it joins that turn, which
                    # lasts until the call ended (its span holds the call's)
                    if turn.end_ns is None or turn.end_ns < end_ns:
                        turn.end_ns = end_ns
                else:  # before any turn: one of its own
                    turn = self._turn_for(end_ns - int(parsed.latency_s * 1e9))
            self._tool_calls += 1
            if turn.dropped:  # the last turn, past MAX_TURNS
                self._count_past(parsed)
            elif len(turn.tool_calls) < MAX_CALLS_PER_TURN:
                turn.tool_calls.append(parsed)
            else:
                _past_cap("tool_calls")
                self._count_past(parsed)
        except Exception:
            warn_once("trajectory:tool_call", "rlmetrics: a tool call could not be recorded")

    @not_our_exception
    def reward(self, value: Any, component: Any = None, *, latency_s: Any = None) -> None:
        """A reward check that just ended: inside ``t.turn()`` the turn's, else the whole
        trajectory's. A value that is not a finite number is dropped with a warning."""
        if not self._open:
            _closed("reward()")
            return
        try:
            end_ns = now_ns()
            parsed = _reward(
                {"value": value, "component": component, "latency_s": latency_s}, end_ns
            )
            if parsed is None:
                return
            turn = self._current
            if turn is not None and turn.explicit:
                if len(turn.rewards) < MAX_CALLS_PER_TURN:
                    turn.rewards.append(parsed)
                else:
                    _past_cap("rewards")
            elif len(self._rewards) < MAX_CALLS_PER_TURN:
                self._rewards.append(parsed)
            else:
                _past_cap("rewards", "trajectory (outside its turns)")
        except Exception:
            warn_once("trajectory:reward", "rlmetrics: a reward could not be recorded")

    @not_our_exception
    def finish(
        self,
        outcome: str | None = None,
        *,
        finish_reason: str | None = None,
        reward: float | None = None,
        error: str | BaseException | type[BaseException] | None = None,
        logprob_mismatch: float | None = None,
        importance_ratio: float | None = None,
    ) -> None:
        """Say how the trajectory ended (checked when the block ends): ``outcome`` (one of
        ``success``, ``failure``, ``error``, ``truncated``), why, its total reward (else the
        sum of its rewards), for an error the error's class (its name, or the exception or
        its class), and its off-policy signals
        (the record's ``logprob_mismatch`` and ``importance_ratio``). Outside the open
        block, it warns once and does nothing."""
        if not self._open:
            _closed("finish()")
            return
        if logprob_mismatch is not None:
            self._off_policy = (logprob_mismatch, self._off_policy[1])
        if importance_ratio is not None:
            self._off_policy = (self._off_policy[0], importance_ratio)
        if outcome is not None:
            self.outcome = outcome
        if finish_reason is not None:
            self.finish_reason = finish_reason
        if reward is not None:
            self.reward_total = reward
        if error is not None:
            self.error = _error_class(error)


def trajectory(
    sample_id: Any,
    *,
    group: Any = None,
    env: Any = None,
    agent: Any = None,
    step: Any = None,
    weight_version: Any = None,
    logger: Logger | None = None,
) -> LiveTrajectory:
    """One rollout as it runs: ``with rlmetrics.trajectory(sample_id, group=..., env=...,
    step=..., logger=logger) as t:`` (or ``async with``); see :mod:`.live`. ``step`` defaults
    to the open ``rlmetrics.step``'s (with a logger, else the logger's next); without a
    logger the trajectory has spans and metrics but no row."""
    return LiveTrajectory(
        sample_id,
        group=group,
        env=env,
        agent=agent,
        step=step,
        weight_version=weight_version,
        logger=logger,
    )
