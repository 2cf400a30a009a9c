"""Agent turns and tool calls in a rollout, as OpenTelemetry's GenAI conventions name them.

- ``gen_ai.invoke_agent.duration`` (histogram, ``s``): one agent invocation — in Gym, one
  agent server's ``/run`` turn loop for one rollout — with ``gen_ai.agent.name``;
- ``gen_ai.execute_tool.duration`` (histogram, ``s``): one tool call, with ``gen_ai.tool.name``.

Both carry ``gen_ai.operation.name`` (``invoke_agent`` / ``execute_tool``, as the conventions
say) and, when the call raised, ``error.type`` (the exception class name). A duration is
recorded whether the call returned or raised: a failed tool call cost its time too.

The names come from the agent's configuration and from the model's tool calls, so they are
bounded: a name outside ``[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`` is ``other``, and past
:data:`MAX_TOOLS` distinct tools (:data:`MAX_AGENTS` agents) in a telemetry session every new
one is ``other`` too. Buckets are the conventions' own for GenAI operation durations (10 ms
doubling to 82 s), extended to 11 minutes for sandboxed tools and long agent turns.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, Final, TypeVar

import attrs

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec, declare, hookimpl, is_exporting, record, warn_once
from rlmetrics.blocks import Block
from rlmetrics.spec import SUM
from rlmetrics.trajectories import LiveTrajectory
from rlmetrics.values import OTHER, BoundedValues

from ._attribute_values import SERVER_NAME, TYPE_NAME, bounded
from ._context import reset_context_var
from .trajectories import run_env, run_ids

__all__ = [
    "AGENT_NAME_ATTR",
    "ERROR_TYPE_ATTR",
    "GROUP",
    "INVOKE_AGENT_DURATION",
    "MAX_AGENTS",
    "MAX_TOOLS",
    "OPERATION_ATTR",
    "TOOL_DURATION",
    "TOOL_NAME_ATTR",
    "record_agent_invocation",
    "record_tool_call",
    "timed_agent_invocation",
    "timed_tool_call",
]

GROUP = "gym.gen_ai"
TOOL_DURATION: Final = "gen_ai.execute_tool.duration"
INVOKE_AGENT_DURATION: Final = "gen_ai.invoke_agent.duration"
OPERATION_ATTR: Final = "gen_ai.operation.name"
TOOL_NAME_ATTR: Final = "gen_ai.tool.name"
AGENT_NAME_ATTR: Final = "gen_ai.agent.name"
ERROR_TYPE_ATTR: Final = "error.type"
MAX_TOOLS = 64
MAX_AGENTS = 32
#: ``error.type`` values a session tells apart (exception classes); later ones are ``other``.
MAX_ERROR_TYPES = 32

# The conventions' GenAI duration buckets (0.01 s doubling to 81.92 s), then minutes.
_BUCKETS = (
    *(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92),
    *(163.84, 327.68, 655.36),
)

declare(
    GROUP,
    [
        MetricSpec(
            TOOL_DURATION,
            Kind.HISTOGRAM,
            unit="s",
            description="Duration of one tool call an agent made in a rollout",
            attributes={
                OPERATION_ATTR: {"execute_tool"},
                TOOL_NAME_ATTR: OPEN,
                ERROR_TYPE_ATTR: OPEN,
            },
            max_series=(MAX_TOOLS + 1) * (MAX_ERROR_TYPES + 2),
            buckets=_BUCKETS,
            reduce=SUM,
        ),
        MetricSpec(
            INVOKE_AGENT_DURATION,
            Kind.HISTOGRAM,
            unit="s",
            description="Duration of one agent invocation (an agent server's turn loop for one "
            "rollout)",
            attributes={
                OPERATION_ATTR: {"invoke_agent"},
                AGENT_NAME_ATTR: OPEN,
                ERROR_TYPE_ATTR: OPEN,
            },
            max_series=(MAX_AGENTS + 1) * (MAX_ERROR_TYPES + 2),
            buckets=_BUCKETS,
            reduce=SUM,
        ),
    ],
)

_tools = BoundedValues(MAX_TOOLS)
_agents = BoundedValues(MAX_AGENTS)
_errors = BoundedValues(MAX_ERROR_TYPES)


def _name(value: Any, names: BoundedValues) -> str:
    return names(bounded(value, SERVER_NAME, OTHER))


#: What a call that failed can say it raised: the exception, its class or its class name (a
#: call measured elsewhere, a sandbox's, reports it by name).
Error = BaseException | type[BaseException] | str


def _error_name(error: Any) -> str:
    """The class name of what ``error`` stands for, ``other`` if it is not one."""
    if isinstance(error, type):
        name: Any = error.__name__
    elif isinstance(error, str):
        name = error
    else:
        name = type(error).__name__
    return bounded(name, TYPE_NAME, OTHER)


def _attributes(operation: str, key: str, name: str, error: Any) -> dict[str, str]:
    attributes = {OPERATION_ATTR: operation, key: name}
    if error is not None:
        attributes[ERROR_TYPE_ATTR] = _errors(_error_name(error))
    return attributes


#: The trajectory of the agent invocation this task is inside (``run=`` given), if any.
_trajectory: ContextVar[LiveTrajectory | None] = ContextVar(
    "rlmetrics_gym_trajectory", default=None
)


def record_tool_call(tool: Any, seconds: float, error: Error | None = None) -> None:
    """Record one tool call of ``seconds``; ``error`` is what it raised, if it did (the
    exception, its class or its class name). Inside an
    agent invocation given ``run=``, the call is also one of its trajectory's. Never raises;
    the histogram is a no-op unless telemetry is exporting."""
    _record_tool_call(tool, seconds, error, _trajectory.get())


def _record_tool_call(
    tool: Any, seconds: float, error: Error | None, trajectory: LiveTrajectory | None
) -> None:
    if is_exporting():
        record(
            GROUP,
            {TOOL_DURATION: seconds},
            _attributes("execute_tool", TOOL_NAME_ATTR, _name(tool, _tools), error),
        )
    if trajectory is not None:
        trajectory.tool_call(
            tool,
            latency_s=seconds,
            outcome=None if error is None else "error",
            error=None if error is None else _error_name(error),
        )


def record_agent_invocation(agent: Any, seconds: float, error: Error | None = None) -> None:
    """Record one agent invocation of ``seconds``; ``error`` is what it raised, if it did (the
    exception, its class or its class name).
    Never raises; a no-op unless telemetry is exporting."""
    if is_exporting():
        record(
            GROUP,
            {INVOKE_AGENT_DURATION: seconds},
            _attributes("invoke_agent", AGENT_NAME_ATTR, _name(agent, _agents), error),
        )


_Self = TypeVar("_Self", bound="_Timed")


class _Timed(Block):
    __slots__ = ("_name", "_started")

    def __init__(self, name: Any) -> None:
        self._name = name
        self._started = 0.0

    def _record(self, seconds: float, error: BaseException | None) -> None:
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        self._started = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._record(time.perf_counter() - self._started, exc)


class timed_tool_call(_Timed):
    """Time one tool call (``with timed_tool_call("search"): ...``, or ``async with``);
    recorded when the block exits, with ``error.type`` when it raised. The exception
    propagates unchanged."""

    __slots__ = ("_trajectory",)

    def __enter__(self) -> timed_tool_call:
        # The invocation it is inside is the one it was entered in: a block left from another
        # task (a streaming generator closed by asyncio's finalizer) no longer sees it.
        self._trajectory = _trajectory.get()
        return super().__enter__()

    def _record(self, seconds: float, error: BaseException | None) -> None:
        _record_tool_call(self._name, seconds, error, self._trajectory)


class timed_agent_invocation(_Timed):
    """Time one agent invocation (``with timed_agent_invocation("simple_agent"): ...``, or
    ``async with``), as :class:`timed_tool_call` does a tool call.

    Given ``run=`` (the ``/run`` request body), the invocation is also a live trajectory
    (``rlmetrics.trajectory``): its sample and group ids from the body's
    ``_ng_task_index`` / ``_ng_rollout_index``, its env ``env`` (else the body's
    ``agent_ref.name``), the agent the invocation's name; the tool calls timed inside it are
    its tool calls, ``invocation.trajectory`` takes its generations, rewards and outcome, and
    an exception leaving the block makes it an ``error``. ``step`` and ``logger`` are the
    trajectory's (with a logger it is a row of the ``trajectories`` samples table too).

    The body is a mapping, or what stands for one: a pydantic model (read with
    ``model_dump(by_alias=True)``, the names it has on the wire), a dataclass or an attrs
    instance. Any other body is said once (with its type) and gives no ids or env, and the
    invocation is a trajectory all the same. Without ``run=``, ``trajectory`` is None.
    """

    __slots__ = ("_options", "_token", "trajectory")

    def __init__(
        self,
        name: Any,
        *,
        run: Any = None,
        env: Any = None,
        step: Any = None,
        logger: Any = None,
    ) -> None:
        super().__init__(name)
        self._options = (run, env, step, logger)
        self._token: Token[LiveTrajectory | None] | None = None
        #: The invocation's trajectory, while it runs (None without ``run=``).
        self.trajectory: LiveTrajectory | None = None

    def __enter__(self) -> timed_agent_invocation:
        super().__enter__()
        run, env, step, logger = self._options
        if run is not None:
            sample_id, group, body_env = _run_fields(run)
            trajectory = rlmetrics.trajectory(
                sample_id,
                group=group,
                env=env if env is not None else body_env,
                agent=self._name,
                step=step,
                logger=logger,
            )
            self.trajectory = trajectory.__enter__()
            self._token = _trajectory.set(trajectory)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        super().__exit__(exc_type, exc, tb)
        token, trajectory = self._token, self.trajectory
        if token is not None and trajectory is not None:
            self._token = None
            reset_context_var(_trajectory, token)
            trajectory.__exit__(exc_type, exc, tb)

    def _record(self, seconds: float, error: BaseException | None) -> None:
        record_agent_invocation(self._name, seconds, error)


def _run_fields(run: Any) -> tuple[Any, Any, Any]:
    """``(sample_id, group_id, env)`` of a ``/run`` body; Nones for a body it cannot read."""
    body = _as_mapping(run)
    if body is None:
        warn_once(
            "gym:agent:run",
            f"rlmetrics-gym: timed_agent_invocation(run=...) got a {type(run).__name__}, "
            "which is neither a mapping nor a pydantic model, dataclass or attrs instance; the "
            "trajectory has no ids or env from it (pass the /run body as a dict, and env= for "
            "its env; later such bodies are logged at DEBUG)",
            expected=True,
        )
        return None, None, None
    try:
        sample_id, group = run_ids(body)
        return sample_id, group, run_env(body)
    except Exception:
        warn_once(
            "gym:agent:run-fields",
            "rlmetrics-gym: the ids and env of a /run body could not be read; its trajectory "
            "has none",
        )
        return None, None, None


def _as_mapping(run: Any) -> Mapping[str, Any] | None:
    """The mapping a ``/run`` body stands for, or None."""
    if isinstance(run, Mapping):
        return run
    try:
        dump = getattr(run, "model_dump", None)
        if callable(dump):  # pydantic: the names the body has on the wire
            try:
                mapping = dump(by_alias=True)
            except TypeError:
                mapping = dump()
        elif dataclasses.is_dataclass(run) and not isinstance(run, type):
            mapping = dataclasses.asdict(run)
        elif attrs.has(type(run)):
            mapping = attrs.asdict(run)
        else:
            return None
    except Exception:
        return None
    return mapping if isinstance(mapping, Mapping) else None


@hookimpl
def telemetry_started() -> None:
    # Each session tells apart its own first tools, agents and error types.
    for names in (_tools, _agents, _errors):
        names.clear()
