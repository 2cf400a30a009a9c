"""Rollouts, verification, outcomes and rewards: what a Gym agent server and collection driver
record per rollout attempt.

- ``gym.rollout.duration_ms``: one rollout's wall clock, recorded on failure too (a crashed
  rollout still cost its time; dropping it would bias the histogram toward the fast path).
- ``gym.verify.duration_ms`` and ``gym.verify.success_rate``: the rate is the cumulative
  fraction of verification *calls that completed* since telemetry started — not task success:
  a verifier that scores a wrong answer 0 succeeded, one that raised failed.
- ``gym.servers.active``: written by the supervisor only (the one process that knows the fleet
  size): set after startup, zero on shutdown.
- ``gym.rollout.completed_total``: one per attempt the driver finished handling, by outcome
  (``scored``, ``failed``, ``omitted``) and dispatch name; attempts with a failure class also
  carry the class, the kind (registered, ``<server>:<kind>``, else ``unregistered``) and the
  exception class name. Free-text reasons never become attributes.
- ``gym.rollout.rewarded_total``: scored attempts with a numeric reward, by reward range,
  masked flag and dispatch name, counted at the same call as ``completed_total``. A result
  without a numeric reward is unscored, not a zero, and is not counted.

A driver that logs each rollout's result dict through ``rlmetrics.Logger`` under the
:data:`ROLLOUT_PREFIX` prefix gets both counters (and the duration) from the ``log_metrics``
hook; :func:`record_rollout_completed` does the same from code.
"""

from __future__ import annotations

import reprlib
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Final

import rlmetrics
from rlmetrics import (
    OPEN,
    Kind,
    MetricSpec,
    as_number,
    hookimpl,
    is_exporting,
    record,
    resets_process_state,
    warn_once,
)
from rlmetrics.known_keys import ANY, declare_keys
from rlmetrics.spec import MEAN, SUM

from ._attribute_values import (
    DISPATCH_NAME_ATTR,
    FAILURE_CLASS_ATTR,
    FAILURE_KIND_ATTR,
    FAILURE_TYPE_ATTR,
    IDENTIFIER,
    OUTCOME_ATTR,
    SERVER_NAME,
    TYPE_NAME,
    bounded,
    flag,
    member,
)

__all__ = [
    "AGENT_REF_KEY",
    "COMPLETED",
    "DISPATCH_NAME_KEY",
    "DURATION_MS_KEY",
    "FAILURE_CLASS_KEY",
    "FAILURE_KIND_KEY",
    "FAILURE_TYPE_KEY",
    "GROUP",
    "MASKED_ATTR",
    "MASK_SAMPLE_KEY",
    "OUTCOMES",
    "OUTCOME_KEY",
    "REWARDED",
    "REWARD_KEY",
    "REWARD_RANGES",
    "REWARD_RANGE_ATTR",
    "ROLLOUT_DURATION",
    "ROLLOUT_PREFIX",
    "SERVERS_ACTIVE",
    "SPECS",
    "VERIFY_DURATION",
    "VERIFY_SUCCESS_RATE",
    "completed_attributes",
    "failure_kind_value",
    "failure_type_value",
    "log_metrics",
    "record_active_servers",
    "record_rollout_completed",
    "record_rollout_duration",
    "record_verify",
    "register_failure_kinds",
    "registered_failure_kinds",
    "reward_range",
    "rewarded_attributes",
    "telemetry_started",
    "timed_rollout",
    "timed_verify",
    "verify_success_rate",
]

GROUP = "gym.rollouts"

ROLLOUT_DURATION: Final = "gym.rollout.duration_ms"
VERIFY_DURATION: Final = "gym.verify.duration_ms"
VERIFY_SUCCESS_RATE: Final = "gym.verify.success_rate"
SERVERS_ACTIVE: Final = "gym.servers.active"
COMPLETED: Final = "gym.rollout.completed_total"
REWARDED: Final = "gym.rollout.rewarded_total"

REWARD_RANGE_ATTR: Final = "nemo.gym.rollout.reward.range"
MASKED_ATTR: Final = "nemo.gym.rollout.masked"

OUTCOMES: Final = frozenset({"scored", "failed", "omitted"})
REWARD_RANGES: Final = frozenset({"negative", "zero", "partial", "full", "above_one"})

#: The dispatch name when a call gives none or one outside the server-name template.
UNKNOWN_DISPATCH: Final = "unknown"
#: A failure class outside the identifier template (free text, say) collapses to this.
OTHER_CLASS: Final = "other"
UNREGISTERED_KIND: Final = "unregistered"
#: The failure type of an attempt with a failure class but no exception.
NO_EXCEPTION: Final = "none"
OTHER_TYPE: Final = "other"
_MAX_FAILURE_KINDS = 256

# Rollouts run from well under a second (a cached single-turn answer) to an hour (a long agentic
# task): 1-2.5-5 per decade from 10 ms, then minutes.
_ROLLOUT_BUCKETS = (
    *(10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000),
    *(100_000, 300_000, 600_000, 1_200_000, 1_800_000, 3_600_000),
)
# A verification is anything from a string compare (<1 ms) to a judge model call or a sandboxed
# test run (minutes).
_VERIFY_BUCKETS = (
    *(0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000),
    *(30_000, 60_000, 300_000, 600_000),
)

_COMPLETED_ATTRIBUTES = {
    OUTCOME_ATTR: OUTCOMES,
    DISPATCH_NAME_ATTR: OPEN,
    FAILURE_CLASS_ATTR: OPEN,
    FAILURE_KIND_ATTR: OPEN,
    FAILURE_TYPE_ATTR: OPEN,
}
_REWARDED_ATTRIBUTES = {
    REWARD_RANGE_ATTR: REWARD_RANGES,
    MASKED_ATTR: {"true", "false"},
    DISPATCH_NAME_ATTR: OPEN,
}


def _success_rate() -> list[tuple[float, Mapping[str, str]]]:
    rate = verify_success_rate()
    return [] if rate is None else [(rate, {})]


SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        ROLLOUT_DURATION,
        Kind.HISTOGRAM,
        unit="ms",
        description="Wall-clock duration of one rollout (the agent server's /run), failed "
        "rollouts included.",
        buckets=_ROLLOUT_BUCKETS,
        reduce=SUM,
    ),
    MetricSpec(
        VERIFY_DURATION,
        Kind.HISTOGRAM,
        unit="ms",
        description="Wall-clock duration of one verification.",
        buckets=_VERIFY_BUCKETS,
        reduce=SUM,
    ),
    MetricSpec(
        VERIFY_SUCCESS_RATE,
        Kind.OBSERVABLE_GAUGE,
        unit="1",
        description="Cumulative fraction of verification calls that completed (did not raise) "
        "since telemetry started in this process; not task success.",
        callback=_success_rate,
        reduce=MEAN,
    ),
    MetricSpec(
        SERVERS_ACTIVE,
        Kind.GAUGE,
        unit="{server}",
        description="Servers the supervisor started (written by the supervisor only).",
        reduce=SUM,
    ),
    MetricSpec(
        COMPLETED,
        Kind.COUNTER,
        unit="{rollout}",
        description="Rollout attempts the collection driver finished handling, by outcome.",
        attributes=_COMPLETED_ATTRIBUTES,
        max_series=1000,
        reduce=SUM,
    ),
    MetricSpec(
        REWARDED,
        Kind.COUNTER,
        unit="{rollout}",
        description="Scored rollout attempts that carry a numeric reward, by reward range.",
        attributes=_REWARDED_ATTRIBUTES,
        max_series=500,
        reduce=SUM,
    ),
)

rlmetrics.declare(GROUP, SPECS, on_use=True)

# -- the log_metrics route: one rollout result dict -------------------------------------------

#: The prefix a driver logs one rollout's result dict under.
ROLLOUT_PREFIX: Final = "gym/rollout"
OUTCOME_KEY: Final = "outcome"
DISPATCH_NAME_KEY: Final = "dispatch_name"
REWARD_KEY: Final = "reward"
# Every field of a rollout row is the row's (its response, flattened, included): no key of it
# is a typo for Logger(unknown_keys=...).
declare_keys([ANY], prefixes=[ROLLOUT_PREFIX], note="a rollout result row")
#: Gym's own field for "this reward is not a valid measurement".
MASK_SAMPLE_KEY: Final = "mask_sample"
FAILURE_CLASS_KEY: Final = "failure_class"
FAILURE_KIND_KEY: Final = "failure_kind"
FAILURE_TYPE_KEY: Final = "failure_type"
DURATION_MS_KEY: Final = "duration_ms"
#: The agent that ran the rollout (``{"type": ..., "name": ...}``): the dispatch name of a row
#: that names no environment server.
AGENT_REF_KEY: Final = "agent_ref"

# -- pure mappings ------------------------------------------------------------------------------


def reward_range(reward: Any) -> str | None:
    """The range a reward falls in, or None for a value that is not a finite number.

    ``negative`` (< 0), ``zero``, ``partial`` (strictly between 0 and 1), ``full`` (exactly 1),
    ``above_one``. Bools, strings, None, NaN and infinities are not rewards: None.
    """
    number = as_number(reward)
    if number is None:
        return None
    if number < 0:
        return "negative"
    if number == 0:
        return "zero"
    if number < 1:
        return "partial"
    if number == 1:
        return "full"
    return "above_one"


_failure_kinds: frozenset[str] = frozenset()
_kinds_lock = threading.Lock()


def register_failure_kinds(*kinds: str) -> None:
    """Register global failure kinds, exported as themselves.

    A kind must be a snake_case identifier (at most 64 characters); a bad one raises ValueError
    here, at registration, not later on the recording path. Namespaced ``<server>:<kind>``
    kinds need no registration.
    """
    bad = [kind for kind in kinds if not (isinstance(kind, str) and IDENTIFIER.fullmatch(kind))]
    if bad:
        raise ValueError(
            f"failure kinds must be snake_case identifiers of at most 64 characters "
            f"([a-z][a-z0-9_]*), got {bad!r}"
        )
    global _failure_kinds
    with _kinds_lock:
        merged = _failure_kinds | frozenset(kinds)
        if len(merged) > _MAX_FAILURE_KINDS:
            raise ValueError(
                f"at most {_MAX_FAILURE_KINDS} failure kinds can be registered; use "
                "namespaced '<server>:<kind>' kinds instead of registering per-value kinds"
            )
        _failure_kinds = merged


def registered_failure_kinds() -> frozenset[str]:
    return _failure_kinds


def failure_kind_value(kind: Any) -> str:
    """A registered kind, a ``<server>:<kind>`` namespaced kind, else ``unregistered``."""
    if not isinstance(kind, str):
        return UNREGISTERED_KIND
    if kind in _failure_kinds:
        return kind
    server, sep, name = kind.partition(":")
    if sep and SERVER_NAME.fullmatch(server) and IDENTIFIER.fullmatch(name):
        return kind
    return UNREGISTERED_KIND


def failure_type_value(error: Any) -> str:
    """The exception class name of ``error`` (an exception, an exception class or a name),
    ``none`` for None, ``other`` for anything that is not a class name."""
    if error is None:
        return NO_EXCEPTION
    if isinstance(error, BaseException):
        name: Any = type(error).__name__
    elif isinstance(error, type):
        name = error.__name__
    else:
        name = error
    return bounded(name, TYPE_NAME, OTHER_TYPE)


def completed_attributes(
    outcome: str,
    dispatch_name: Any = None,
    *,
    failure_class: Any = None,
    failure_kind: Any = None,
    failure_type: Any = None,
) -> dict[str, str] | None:
    """The attributes of one ``completed_total`` point, or None for an outcome outside
    :data:`OUTCOMES` (a caller's mistake: nothing is counted rather than a guess)."""
    if not member(outcome, OUTCOMES):
        return None
    attributes = {
        OUTCOME_ATTR: outcome,
        DISPATCH_NAME_ATTR: bounded(dispatch_name, SERVER_NAME, UNKNOWN_DISPATCH),
    }
    if failure_class is not None:
        attributes[FAILURE_CLASS_ATTR] = bounded(failure_class, IDENTIFIER, OTHER_CLASS)
        attributes[FAILURE_KIND_ATTR] = failure_kind_value(failure_kind)
        attributes[FAILURE_TYPE_ATTR] = failure_type_value(failure_type)
    return attributes


def rewarded_attributes(
    outcome: str, reward: Any, masked: Any = False, dispatch_name: Any = None
) -> dict[str, str] | None:
    """The attributes of one ``rewarded_total`` point, or None when the attempt is not counted
    (not scored, or no numeric reward)."""
    if outcome != "scored":
        return None
    bucket = reward_range(reward)
    if bucket is None:
        return None
    return {
        REWARD_RANGE_ATTR: bucket,
        MASKED_ATTR: flag(masked),
        DISPATCH_NAME_ATTR: bounded(dispatch_name, SERVER_NAME, UNKNOWN_DISPATCH),
    }


# -- recording ------------------------------------------------------------------------------


def record_rollout_completed(
    outcome: str,
    *,
    dispatch_name: str | None = None,
    reward: Any = None,
    masked: Any = False,
    failure_class: str | None = None,
    failure_kind: str | None = None,
    failure_type: BaseException | type[BaseException] | str | None = None,
) -> None:
    """Count one rollout attempt the driver finished handling, and its reward when scored.

    Call once per attempt, after the attempt was written (``scored`` to the main output,
    ``failed`` to the failures sidecar) or deliberately omitted (``omitted``). ``reward`` and
    ``masked`` (the result's ``mask_sample``) matter only for scored attempts. A no-op unless
    telemetry is exporting; never raises.
    """
    if not is_exporting():
        return
    try:
        attributes = completed_attributes(
            outcome,
            dispatch_name,
            failure_class=failure_class,
            failure_kind=failure_kind,
            failure_type=failure_type,
        )
        if attributes is None:
            warn_once(
                "gym:rollouts:outcome",
                f"rlmetrics-gym: rollout outcome must be one of {sorted(OUTCOMES)}, got "
                f"{_shown(outcome)}; the attempt is not counted",
            )
            return
        record(GROUP, {COMPLETED: 1}, attributes)
        rewarded = rewarded_attributes(outcome, reward, masked, dispatch_name)
        if rewarded is not None:
            record(GROUP, {REWARDED: 1}, rewarded)
    except Exception:
        warn_once("gym:rollouts:completed", "rlmetrics-gym: counting a rollout attempt failed")


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 64


def _shown(value: Any) -> str:
    """A caller's value for a warning: its repr cut to about 64 characters, and its type."""
    try:
        return f"{_SHOWN.repr(value)} (a {type(value).__name__})"
    except Exception:
        return f"a {type(value).__name__}"


def record_rollout_duration(duration_ms: float) -> None:
    """Record one rollout's wall clock in milliseconds. Never raises."""
    record(GROUP, {ROLLOUT_DURATION: duration_ms})


class timed_rollout:
    """Time a rollout (``with timed_rollout(): ...``); recorded when the block exits, whether
    it returned or raised. The exception, if any, propagates unchanged."""

    __slots__ = ("_started",)

    def __enter__(self) -> timed_rollout:
        self._started = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        record_rollout_duration((time.perf_counter() - self._started) * 1000.0)


class _VerifyTally:
    """Completed and total verification calls, under a lock (verifiers run on several
    threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.completed = 0
        self.total = 0


_verify = _VerifyTally()


@resets_process_state
def _forget_kinds_and_verifications() -> None:
    global _failure_kinds
    with _kinds_lock:
        _failure_kinds = frozenset()
    with _verify.lock:
        _verify.completed = _verify.total = 0


def record_verify(duration_ms: float | None, succeeded: bool) -> None:
    """Record one verification call: its duration, and whether it completed (``succeeded``
    is False only when the verifier raised). Counted only while telemetry is exporting, so
    the rate describes the exported session. Never raises."""
    if not is_exporting():
        return
    rlmetrics.activate(GROUP)  # the success rate's gauge: only a process that verifies reports it
    with _verify.lock:
        _verify.total += 1
        _verify.completed += 1 if flag(succeeded) == "true" else 0
    if duration_ms is not None:
        record(GROUP, {VERIFY_DURATION: duration_ms})


class timed_verify:
    """Time one verification call (``with timed_verify(): score = verifier(...)``) and count
    it: completed when the block returns, failed when it raises an ``Exception``. A
    cancellation or interpreter exit is neither (the call was stopped, it did not fail): its
    duration is recorded, the rate is left alone. The exception propagates unchanged."""

    __slots__ = ("_started",)

    def __enter__(self) -> timed_verify:
        self._started = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        elapsed_ms = (time.perf_counter() - self._started) * 1000.0
        if exc_type is None or issubclass(exc_type, Exception):
            record_verify(elapsed_ms, succeeded=exc_type is None)
        else:
            record(GROUP, {VERIFY_DURATION: elapsed_ms})


def verify_success_rate() -> float | None:
    """The cumulative completed fraction so far, or None before the first verification."""
    with _verify.lock:
        return _verify.completed / _verify.total if _verify.total else None


def record_active_servers(count: int) -> None:
    """Set ``gym.servers.active``. Call from the supervisor only: after startup with the number
    of servers it started, and with 0 on shutdown. A count that is no number of servers
    (negative, fractional) is not recorded, said once. Never raises."""
    number = as_number(count)  # what is no number at all, the core refuses and says
    if number is not None and (number < 0 or number != int(number)):
        warn_once(
            "gym:rollouts:servers",
            f"rlmetrics-gym: {SERVERS_ACTIVE} is a whole number of servers from 0, got "
            f"{_shown(count)}; not recorded",
        )
        return
    record(GROUP, {SERVERS_ACTIVE: count})


# -- hooks ----------------------------------------------------------------------------------


@hookimpl
def telemetry_started() -> None:
    # The success rate is cumulative over one exported session: a new session starts at 0/0.
    with _verify.lock:
        _verify.completed = _verify.total = 0


def _agent_name(row: Mapping[str, Any]) -> Any:
    """The row's ``agent_ref.name`` (``agent_ref/name`` once the Logger flattened it)."""
    flat = row.get(f"{AGENT_REF_KEY}/name")
    if flat is not None:
        return flat
    ref = row.get(AGENT_REF_KEY)
    return ref.get("name") if isinstance(ref, Mapping) else None


@hookimpl(tee=True, prefixes=[ROLLOUT_PREFIX])
def log_metrics(metrics: Mapping[str, Any], prefix: str) -> None:
    """A rollout result dict logged under :data:`ROLLOUT_PREFIX`: the attempt's outcome
    counters and, when it carries ``duration_ms``, the rollout duration."""
    if prefix != ROLLOUT_PREFIX or not is_exporting():
        return
    outcome = metrics.get(OUTCOME_KEY)
    if outcome is not None:
        dispatch_name = metrics.get(DISPATCH_NAME_KEY)
        record_rollout_completed(
            outcome,
            # The environment server, or the agent when the row names none (the spec's rule).
            dispatch_name=_agent_name(metrics) if dispatch_name is None else dispatch_name,
            reward=metrics.get(REWARD_KEY),
            masked=metrics.get(MASK_SAMPLE_KEY, False),
            failure_class=metrics.get(FAILURE_CLASS_KEY),
            failure_kind=metrics.get(FAILURE_KIND_KEY),
            failure_type=metrics.get(FAILURE_TYPE_KEY),
        )
    else:
        # A result row as the collection writes it carries no outcome: the driver knows it.
        warn_once(
            "gym:rollouts:no-outcome",
            f"rlmetrics-gym: a row logged under {ROLLOUT_PREFIX!r} has no {OUTCOME_KEY!r}, so "
            "its attempt (and its reward) is counted nowhere; log it with outcome 'scored', "
            "'failed' or 'omitted' (its duration_ms is still recorded)",
            expected=True,
        )
    duration = metrics.get(DURATION_MS_KEY)
    if duration is not None:
        record_rollout_duration(duration)
