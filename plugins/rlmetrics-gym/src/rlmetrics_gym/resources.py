"""Resources operations: expensive work a resources server limits with a semaphore (a verifier
subprocess, a judge call, a tool), and the queue in front of that limit, which no request metric
shows.

::

    async with resources_operation(
        self._semaphore, operation="verify", executor="subprocess"
    ) as op:
        result = await run_the_verifier()
        if it_timed_out:
            op.outcome = "timeout"

- ``gym.resources.operation.queue_duration_ms``: how long one operation waited for its limit
  (recorded when it got the slot; an operation cancelled while queued never ran and records
  no duration).
- ``gym.resources.operation.duration_ms``: how long it ran inside the limit, by outcome:
  ``ok``, ``error``, ``timeout``, ``cancelled`` or ``crashed`` — ``op.outcome`` when the caller
  set it, else from the exception that left the block.
- ``gym.resources.operation.queued`` / ``.active``: operations waiting for / running inside
  their limit, as plain integer counts read at export.

Every point carries ``nemo.gym.resources.operation`` (verify, tool, judge, other) and
``nemo.gym.resources.executor`` (inline, thread, process, subprocess, other); any other value
is counted as ``other``. The semaphore is always acquired and released exactly as an
``async with semaphore`` would; the metrics never raise into the block and never swallow its
exception.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import subprocess
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Final, Protocol

import rlmetrics
from rlmetrics import Kind, MetricSpec, record, resets_process_state, warn_once
from rlmetrics.spec import SUM

from ._attribute_values import member
from ._tally import Tally

__all__ = [
    "ACTIVE",
    "DURATION",
    "EXECUTORS",
    "EXECUTOR_ATTR",
    "GROUP",
    "OPERATIONS",
    "OPERATION_ATTR",
    "OUTCOMES",
    "OUTCOME_ATTR",
    "QUEUED",
    "QUEUE_DURATION",
    "SPECS",
    "Limit",
    "acquire",
    "ResourcesOperation",
    "executor_value",
    "operation_value",
    "outcome_from_exception",
    "resources_operation",
]

GROUP = "gym.resources"
QUEUE_DURATION: Final = "gym.resources.operation.queue_duration_ms"
DURATION: Final = "gym.resources.operation.duration_ms"
QUEUED: Final = "gym.resources.operation.queued"
ACTIVE: Final = "gym.resources.operation.active"

OPERATION_ATTR: Final = "nemo.gym.resources.operation"
EXECUTOR_ATTR: Final = "nemo.gym.resources.executor"
OUTCOME_ATTR: Final = "nemo.gym.resources.operation.outcome"

OPERATIONS: Final = frozenset({"verify", "tool", "judge", "other"})
EXECUTORS: Final = frozenset({"inline", "thread", "process", "subprocess", "other"})
OUTCOMES: Final = frozenset({"ok", "error", "timeout", "cancelled", "crashed"})

# From a free slot (microseconds) to a saturated judge queue (minutes).
_BUCKETS = (
    *(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500),
    *(1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 120_000, 300_000, 600_000),
)

_Key = tuple[str, str]  # (operation, executor)
_queued: Tally[_Key] = Tally(overflow=("other", "other"), group=GROUP)
_active: Tally[_Key] = Tally(overflow=("other", "other"), group=GROUP)


@resets_process_state
def _forget_operations() -> None:
    # Every key ever counted stays exported (at 0 once its operations are done), as an
    # up/down count must; between tests that would carry one test's operations into the next.
    _queued.reset()
    _active.reset()


def _attributes(key: _Key) -> Mapping[str, str]:
    return {OPERATION_ATTR: key[0], EXECUTOR_ATTR: key[1]}


_COMMON = {OPERATION_ATTR: OPERATIONS, EXECUTOR_ATTR: EXECUTORS}

SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        QUEUE_DURATION,
        Kind.HISTOGRAM,
        unit="ms",
        description="Time one resources operation waited for its limit.",
        attributes=_COMMON,
        buckets=_BUCKETS,
        reduce=SUM,
    ),
    MetricSpec(
        DURATION,
        Kind.HISTOGRAM,
        unit="ms",
        description="Time one resources operation ran inside its limit, by outcome.",
        attributes={**_COMMON, OUTCOME_ATTR: OUTCOMES},
        buckets=_BUCKETS,
        reduce=SUM,
    ),
    MetricSpec(
        QUEUED,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="{operation}",
        description="Resources operations waiting for their limit.",
        attributes=_COMMON,
        callback=lambda: _queued.observations(_attributes),
        reduce=SUM,
    ),
    MetricSpec(
        ACTIVE,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="{operation}",
        description="Resources operations running inside their limit.",
        attributes=_COMMON,
        callback=lambda: _active.observations(_attributes),
        reduce=SUM,
    ),
)

rlmetrics.declare(GROUP, SPECS, on_use=True)


# -- pure mappings ------------------------------------------------------------------------------


def operation_value(operation: Any) -> str:
    """``operation`` when it is one of :data:`OPERATIONS`, else ``other``."""
    return operation if member(operation, OPERATIONS) else "other"


def executor_value(executor: Any) -> str:
    """``executor`` when it is one of :data:`EXECUTORS`, else ``other``."""
    return executor if member(executor, EXECUTORS) else "other"


_TIMEOUTS: tuple[type[BaseException], ...] = (
    TimeoutError,  # also asyncio.TimeoutError and concurrent.futures.TimeoutError from 3.11
    asyncio.TimeoutError,
    concurrent.futures.TimeoutError,
    subprocess.TimeoutExpired,
)


def outcome_from_exception(exc: BaseException | None) -> str:
    """The outcome an exception leaving the block stands for.

    None → ``ok``; a cancellation → ``cancelled``; a timeout (``TimeoutError`` and its asyncio,
    concurrent.futures and subprocess cousins) → ``timeout``; the executor dying under the work
    (``concurrent.futures.BrokenExecutor``: a process pool whose worker was killed), a child
    killed by a signal (``CalledProcessError`` with a negative return code) or the interpreter
    going down (``KeyboardInterrupt``, ``SystemExit``) → ``crashed``; any other exception →
    ``error``.
    """
    if exc is None:
        return "ok"
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, _TIMEOUTS):
        return "timeout"
    if isinstance(exc, concurrent.futures.BrokenExecutor):
        return "crashed"
    if isinstance(exc, subprocess.CalledProcessError) and exc.returncode < 0:
        return "crashed"
    if not isinstance(exc, Exception):
        return "crashed"
    return "error"


# -- the context manager ------------------------------------------------------------------------


class Limit(Protocol):
    """What limits an operation: an ``asyncio.Semaphore``, ``BoundedSemaphore`` or ``Lock``."""

    async def acquire(self) -> Any: ...

    def release(self) -> None: ...


async def acquire(limit: Limit) -> None:
    """``await limit.acquire()``, refusing a limit whose ``acquire`` is not asynchronous, or
    that has none (a count where the semaphore belongs).

    A ``threading.Semaphore`` (or ``Lock``) acquires synchronously and returns a bool, which
    cannot be awaited: the permit it took is given back and a ``TypeError`` says what to pass,
    where otherwise nothing would release it and a later acquire would block the event loop.
    """
    if not callable(getattr(limit, "acquire", None)):
        # A count (the configured concurrency): one semaphore per call would limit nothing.
        raise TypeError(
            f"the limit must be an asyncio one (asyncio.Semaphore, BoundedSemaphore or Lock), "
            f"got a {type(limit).__name__} ({limit!r:.40}): make asyncio.Semaphore(n) once "
            "and pass that same one to every call"
        )
    acquiring = limit.acquire()
    if not inspect.isawaitable(acquiring):
        if acquiring:  # it took a permit: give it back
            limit.release()
        raise TypeError(
            f"the limit must be an asyncio one (async acquire(): asyncio.Semaphore, "
            f"BoundedSemaphore or Lock), got a {type(limit).__name__} whose acquire() "
            f"returned a {type(acquiring).__name__}"
        )
    await acquiring


class ResourcesOperation:
    """One operation: ``async with`` it (see :func:`resources_operation`). Set ``outcome``
    inside the block to override the outcome the exit would derive."""

    __slots__ = ("_acquired", "_key", "_limit", "_started", "executor", "operation", "outcome")

    def __init__(self, limit: Limit | None, operation: str, executor: str) -> None:
        self._limit = limit
        self.operation = operation_value(operation)
        self.executor = executor_value(executor)
        self._key: _Key = (self.operation, self.executor)
        #: The outcome to record; None until the caller sets it.
        self.outcome: str | None = None
        self._acquired = False
        self._started = 0.0

    async def __aenter__(self) -> ResourcesOperation:
        limit = self._limit
        if limit is None:  # no limit: nothing to wait for, nothing queued
            self._enter_active(queued_ms=None)
            return self
        key = _queued.add(self._key)
        waited = time.perf_counter()
        try:
            await acquire(limit)
        except BaseException:
            _queued.add(key, -1)  # cancelled while waiting: never ran, nothing to time
            raise
        _queued.add(key, -1)
        self._acquired = True
        self._enter_active(queued_ms=(time.perf_counter() - waited) * 1000.0)
        return self

    def _enter_active(self, queued_ms: float | None) -> None:
        self._key = _active.add(self._key)
        self._started = time.perf_counter()
        if queued_ms is not None:
            record(GROUP, {QUEUE_DURATION: queued_ms}, _attributes(self._key))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        ran_ms = (time.perf_counter() - self._started) * 1000.0
        try:
            _active.add(self._key, -1)
        finally:
            if self._acquired:
                self._acquired = False
                self._limit.release()  # type: ignore[union-attr]
        try:
            outcome = self.outcome
            if outcome is not None and not member(outcome, OUTCOMES):
                warn_once(
                    "gym:resources:outcome",
                    f"rlmetrics-gym: op.outcome must be one of {sorted(OUTCOMES)}, got a "
                    f"{type(outcome).__name__}; the outcome is taken from the exit instead",
                )
                outcome = None
            if outcome is None:
                outcome = outcome_from_exception(exc)
            record(GROUP, {DURATION: ran_ms}, {**_attributes(self._key), OUTCOME_ATTR: outcome})
        except Exception:
            warn_once("gym:resources:record", "rlmetrics-gym: recording an operation failed")


def resources_operation(
    semaphore: Limit | None, operation: str = "other", executor: str = "other"
) -> ResourcesOperation:
    """Wrap limited work: ``async with resources_operation(sem, operation="verify",
    executor="subprocess") as op: ...``.

    Waits for ``semaphore`` (None: no limit) while counted as queued, runs the block while
    counted as active, releases the semaphore on every exit path and records both durations.
    The block's exception propagates unchanged.
    """
    return ResourcesOperation(semaphore, operation, executor)
