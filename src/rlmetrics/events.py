"""Typed payloads of the typed hooks, and their round trip through a flat logger dict.

A training loop can hand rlmetrics either the typed object (``Logger.log_rollout_checkpoint``)
or the dict it already logs under the matching prefix (``Logger.log_metrics``); both reach
the same hook with the same payload. Backends always see the flat dict (``to_metrics``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import attrs

from ._warn import describe_value, warn_once
from .keyplans import KeyPlans
from .values import as_number, as_plain, encodable, key_attribute, readable_items

__all__ = [
    "AGGREGATE_EFFICIENCY_KEYS",
    "ALERT_FIRING",
    "ALERT_RESOLVED",
    "EFFICIENCY_PREFIX",
    "EVALUATION_PREFIXES",
    "ROLLOUT_EVENT_TYPES",
    "SETUP_TIMING_PREFIX",
    "STEP_KEY",
    "TRAIN_PREFIXES",
    "VALIDATION_PREFIX",
    "WALL_TIME_KEY",
    "Alert",
    "CheckpointOutcome",
    "CheckpointRestore",
    "CheckpointSave",
    "EfficiencySummary",
    "RolloutEvent",
    "SetupTimings",
    "ThroughputSample",
    "not_a_payload",
    "rollout_event_from_metrics",
    "setup_phase",
]

#: The prefixes per-step train dicts arrive under (NeMo-RL logs efficiency/* with "").
TRAIN_PREFIXES = ("train", "")
#: The prefix of per-dataset validation dicts (``<dataset>/<metric>`` keys;
#: :mod:`rlmetrics.families.training`).
VALIDATION_PREFIX = "validation"
#: Prefixes of evaluation dicts (a trainer's ``eval_*`` / ``test_*`` keys, as the adapters log
#: them): no series reads them (:mod:`rlmetrics.known_keys`).
EVALUATION_PREFIXES = ("eval", "test")
SETUP_TIMING_PREFIX = "timing/setup"
EFFICIENCY_PREFIX = "efficiency/"
#: Unix wall-clock time: the axis of the rollout-checkpoint streams, never the trainer step.
WALL_TIME_KEY = "telemetry/wall_time_seconds"
#: The explicit trainer-step axis that backends without a native step log as a metric.
STEP_KEY = "rlmetrics/step"

_SECONDS_SUFFIX = "_s"
_STEP_WALL_KEY = EFFICIENCY_PREFIX + "step_wall_time_s"
_RUN_ELAPSED_KEY = EFFICIENCY_PREFIX + "total_wall_time_s"
_PCT_KEY = EFFICIENCY_PREFIX + "efficiency_pct"
_PCT_PER_STEP_KEY = EFFICIENCY_PREFIX + "efficiency_pct_is_per_step"
#: Totals that share the ``efficiency/*_s`` shape but are sums, never categories.
AGGREGATE_EFFICIENCY_KEYS = frozenset(
    {"total_waste", "productive_time", "total_wall_time", "thread_seconds_total"}
)
# The step's wall time shares the shape too; it is the summary's denominator.
_NOT_CATEGORIES = AGGREGATE_EFFICIENCY_KEYS | {"step_wall_time"}


_STR = frozenset({str})
_FLOAT = frozenset({float})


def _fields(metrics: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A logged dict's readable entries with a string key (a field name); never raises."""
    return [(k, v) for k, v in readable_items(metrics) if type(k) is str]


# -- field converters: a payload is built on the training loop's thread, so a bad field is
# dropped with a warning (once per field) and the rest of the event is logged; nothing raises.


def _bad_field(field: str, expected: str, value: Any) -> None:
    warn_once(
        f"payload:{field}",
        f"rlmetrics: {field} must be {expected}, got {describe_value(value)}; that field is "
        "dropped and the rest of the event is logged. Later ones are reported at DEBUG",
    )


def _finite(value: Any, floats: bool) -> float | None:
    """``as_number(value)`` if it fits: with ``floats``, within a float's range (seconds are
    summed and divided), else within int64 (what an exporter can carry)."""
    number = as_number(value)
    if number is None or type(number) is float:
        return number
    if not floats:
        return number if encodable(number) else None
    try:
        float(number)
    except OverflowError:
        return None
    return number


def _numbers(
    field: str, values: Any, floats: bool = False, durations: bool = False
) -> dict[str, float]:
    """``values`` as ``{name: finite number}`` (see :func:`_finite` for ``floats``; with
    ``durations``, from 0 only): entries that are not numbers are dropped (``None``
    silently: nothing was measured), and so is a value that is not a mapping."""
    if (
        type(values) is dict
        and _STR.issuperset(map(type, values))
        and _FLOAT.issuperset(map(type, values.values()))
        # A NaN or an infinity makes the sum one; a finite sum means every value is finite.
        and math.isfinite(sum(values.values()))
        and not (durations and values and min(values.values()) < 0)
    ):
        return dict(values)  # a summary's every-step case, checked in C
    if not isinstance(values, Mapping):
        if values is not None:
            _bad_field(field, "a mapping of names to numbers", values)
        return {}
    out: dict[str, float] = {}
    expected = "a finite number"
    if durations:
        expected = "a finite number of seconds from 0"
    for key, value in values.items() if type(values) is dict else _fields(values):
        number = _finite(value, floats)
        if durations and number is not None and number < 0:
            number = None  # a duration below 0 is no duration (clocks read the wrong way)
        if type(key) is str and number is not None:
            out[key] = number
        elif value is not None:
            _bad_field(f"{field}[...]", f"{expected} under a string key", value)
    return out


def _optional_number(field: str, value: Any, duration: bool = False) -> float | None:
    """``value`` as a finite number within a float's range (with ``duration``, from 0), or
    None (given None, or a value that is not one)."""
    if value is None:
        return None
    converted = _finite(value, floats=True)
    if duration and converted is not None and converted < 0:
        converted = None  # a wall time below 0 is none (a clock read the wrong way)
    if converted is None:
        expected = "a finite number of seconds from 0" if duration else "a finite number"
        _bad_field(field, f"{expected} or None", value)
    return converted


def _optional_flag(field: str, value: Any) -> bool | None:
    """``value`` as a bool, or None: a bool (NumPy's too) or a number as its truth."""
    if value is None or type(value) is bool:
        return value  # type: ignore[no-any-return]
    plain = as_plain(value)
    if isinstance(plain, bool):
        return plain
    number = as_number(plain)
    if number is None:
        _bad_field(field, "a bool, a number or None", value)
        return None
    return bool(number)


def _optional_text(field: str, value: Any) -> str | None:
    """``value`` as a string (a ``str`` subclass as its plain string), or None."""
    if value is None or type(value) is str:
        return value  # type: ignore[no-any-return]
    if isinstance(value, str):
        return str.__str__(value)
    _bad_field(field, "a string or None", value)
    return None


def _wall_clock(value: Any) -> float:
    """A Unix time as a float; anything else (None included: not given) is now."""
    number = as_number(value)
    if number is not None:
        try:
            return float(number)
        except OverflowError:  # an int beyond any float: not a time
            pass
    if value is not None:
        _bad_field("a rollout event's wall_time_s", "a finite Unix time", value)
    return time.time()


# attrs converters (named functions: mypy's attrs plugin reads their types)


def _seconds(value: Any) -> dict[str, float]:
    return _numbers("EfficiencySummary.seconds", value, floats=True, durations=True)


def _step_wall_time(value: Any) -> float | None:
    return _optional_number("EfficiencySummary.step_wall_time_s", value, duration=True)


def _run_elapsed(value: Any) -> float | None:
    return _optional_number("EfficiencySummary.run_elapsed_s", value, duration=True)


def _efficiency_pct(value: Any) -> float | None:
    return _optional_number("EfficiencySummary.efficiency_pct", value)


def _pct_per_step(value: Any) -> bool | None:
    return _optional_flag("EfficiencySummary.pct_per_step", value)


# Longest first: "generation_init_time_s" must lose "_time_s", not just "_s".
_SETUP_SUFFIXES = ("_time_s", "_s")


def setup_phase(key: str) -> str | None:
    """The phase a setup key times (``generation_init_time_s`` → ``generation_init``), or None
    for a key that is not a duration (``parallel_init_enabled``)."""
    for suffix in _SETUP_SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)]
    return None


#: An alert's two states: it started to hold, or it stopped holding.
ALERT_FIRING = "firing"
ALERT_RESOLVED = "resolved"


@attrs.frozen
class Alert:
    """An alert rlmetrics evaluated in this process changed state (the ``on_alert`` hook).

    :param name: the rule, as Prometheus' rule of the same meaning is named
        (``RLStepStalled``).
    :param state: :data:`ALERT_FIRING` or :data:`ALERT_RESOLVED`.
    :param summary: one line saying what holds (or held), for a person.
    :param step: the newest trainer step when it changed state (None before the first).
    :param time_s: when, in Unix seconds.
    """

    name: str
    state: str
    summary: str
    step: int | None
    time_s: float


@attrs.frozen
class SetupTimings:
    """Startup phase durations of one run, as the ``timing/setup`` dict logged them.

    ``seconds`` maps each phase to its seconds (the key with its ``_time_s`` / ``_s`` suffix
    stripped: ``policy_init_time_s`` is phase ``policy_init``); ``flags`` keeps every other
    entry (``parallel_init_enabled``…), which is not a duration.
    """

    seconds: Mapping[str, float] = attrs.field(factory=dict)
    flags: Mapping[str, Any] = attrs.field(factory=dict)

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any]) -> SetupTimings:
        seconds: dict[str, float] = {}
        flags: dict[str, Any] = {}
        refused: list[str] = []
        for key, value in _fields(metrics):
            phase = setup_phase(key)
            if phase is None:
                flags[key] = value
            elif (number := as_number(value)) is not None and number >= 0:
                seconds[phase] = number
            elif value is not None:  # None: not measured (a phase this run did not have)
                refused.append(phase)
        if refused:
            _refused_durations(refused)
        return cls(seconds=seconds, flags=flags)


def _refused_durations(phases: list[str]) -> None:
    """Say once that setup durations were no number of seconds (NaN, text, a bool, below 0),
    naming the first phase only when it is safe to print (a logged key is data)."""
    first = phases[0]
    named = repr(first) if key_attribute(first) is not None else describe_value(first)
    warn_once(
        "setup:not-a-duration",
        f"rlmetrics: {len(phases)} setup duration(s), first {named}, are no number of seconds "
        "from 0 (NaN, text, a bool, a negative number); each is not exported (the backends "
        "keep its key). Later ones are reported at DEBUG",
    )


def _category(key: Any) -> str | None:
    """The efficiency category an ``efficiency/<category>_s`` key times, else None."""
    if type(key) is str and key.startswith(EFFICIENCY_PREFIX) and key.endswith(_SECONDS_SUFFIX):
        name = key[len(EFFICIENCY_PREFIX) : -len(_SECONDS_SUFFIX)]
        if name and name not in _NOT_CATEGORIES:
            return name
    return None


def _category_keys(keys: tuple[Any, ...]) -> tuple[bool, tuple[tuple[str, str], ...]]:
    """Whether a dict with these keys has any ``efficiency/*`` key, and ``(key, category)``
    for each of its category keys, in order."""
    efficiency = any(type(key) is str and key.startswith(EFFICIENCY_PREFIX) for key in keys)
    return efficiency, tuple((key, c) for key in keys if (c := _category(key)) is not None)


#: Which keys of a dict are categories, worked out once per key sequence.
_category_plan = KeyPlans(_category_keys)


def _given(value: Any) -> Any:
    """A field's logged value as the summary's converter takes it: a finite float as it is
    (the converter reads it again), anything else as the number it stands for, or None (so a
    value that is not a number is absent, as it always was, not reported as a bad field)."""
    return value if type(value) is float and value - value == 0 else as_number(value)


def _names(value: Iterable[Any]) -> frozenset[str]:
    return frozenset(name for name in value if type(name) is str)


@attrs.frozen(init=False)
class EfficiencySummary:
    """Where one step's (and the run's) wall time went, per efficiency category.

    ``seconds`` maps a category (``idle/buffer_starvation``) to seconds as its timer measured
    them. ``step_wall_time_s`` is this step's wall time when the caller has it;
    ``run_elapsed_s`` the time since the run started. ``efficiency_pct`` and ``pct_per_step``
    carry a percentage the caller already computed (from a logged dict); when absent, the
    efficiency family computes it from the categories.
    """

    seconds: Mapping[str, float] = attrs.field(factory=dict, converter=_seconds)
    step_wall_time_s: float | None = attrs.field(default=None, converter=_step_wall_time)
    run_elapsed_s: float | None = attrs.field(default=None, converter=_run_elapsed)
    efficiency_pct: float | None = attrs.field(default=None, converter=_efficiency_pct)
    pct_per_step: bool | None = attrs.field(default=None, converter=_pct_per_step)
    #: Categories a logged dict gave without a number (None, NaN, text): their seconds this
    #: step are unknown — a gap to the efficiency family, not the 0 of a category absent.
    #: Not part of the summary's value (a backend logs what ``seconds`` holds).
    unmeasured: frozenset[str] = attrs.field(factory=frozenset, converter=_names, eq=False)

    def __init__(
        self,
        seconds: Any = None,
        step_wall_time_s: Any = None,
        run_elapsed_s: Any = None,
        efficiency_pct: Any = None,
        pct_per_step: Any = None,
        unmeasured: Iterable[Any] = frozenset(),
    ) -> None:
        self.__attrs_init__(
            {} if seconds is None else seconds,
            step_wall_time_s,
            run_elapsed_s,
            efficiency_pct,
            pct_per_step,
            unmeasured,
        )
        # A category given without seconds (None, NaN, text, below 0) is unknown this step,
        # built in code as from a logged dict: a gap to the efficiency family, not the 0 of
        # a category absent (nor a negative idle time that makes the step's pct above 100).
        if isinstance(seconds, Mapping) and len(self.seconds) < len(seconds):
            given = _names(key for key in seconds if key not in self.seconds)
            object.__setattr__(self, "unmeasured", self.unmeasured | given)

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any]) -> EfficiencySummary:
        """Read the ``efficiency/*`` keys of a flat logger dict; other keys are ignored."""
        found = cls.in_metrics(metrics)
        return cls() if found is None else found

    @classmethod
    def in_metrics(cls, metrics: Mapping[str, Any]) -> EfficiencySummary | None:
        """:meth:`from_metrics`, or None for a dict with no ``efficiency/*`` key at all (every
        field is read from one): most train dicts, found out without building a summary."""
        fields = metrics if type(metrics) is dict else dict(_fields(metrics))
        efficiency, categories = _category_plan(tuple(fields))
        if not efficiency:
            return None
        seconds = {category: fields[key] for key, category in categories}
        per_step = as_number(fields.get(_PCT_PER_STEP_KEY))
        return cls(  # a category the converter finds no number in is unmeasured
            seconds=seconds,
            step_wall_time_s=_given(fields.get(_STEP_WALL_KEY)),
            run_elapsed_s=_given(fields.get(_RUN_ELAPSED_KEY)),
            efficiency_pct=_given(fields.get(_PCT_KEY)),
            pct_per_step=None if per_step is None else bool(per_step),
        )

    def to_metrics(self) -> dict[str, float]:
        """The flat ``efficiency/*`` dict a backend logs."""
        out: dict[str, float] = {
            f"{EFFICIENCY_PREFIX}{category}{_SECONDS_SUFFIX}": value
            for category, value in self.seconds.items()
        }
        if self.run_elapsed_s is not None:
            out[_RUN_ELAPSED_KEY] = self.run_elapsed_s
        if self.step_wall_time_s is not None:
            out[_STEP_WALL_KEY] = self.step_wall_time_s
        if self.efficiency_pct is not None:
            out[_PCT_KEY] = self.efficiency_pct
            out[_PCT_PER_STEP_KEY] = float(bool(self.pct_per_step))
        return out


def _wall_time(fields: Mapping[str, Any]) -> float:
    """The dict's Unix wall time, or now for a dict logged without a usable one."""
    wall = as_number(fields.get(WALL_TIME_KEY))
    try:
        return time.time() if wall is None else float(wall)
    except OverflowError:  # an int beyond any float: not a time
        return time.time()


def _event_values(value: Any) -> dict[str, float]:
    return _numbers("a rollout event's values", value)


@attrs.frozen
class RolloutEvent:
    """One sample of a rollout-checkpoint stream, stamped with Unix wall time.

    ``values`` holds the stream's numeric fields (``total_save_seconds``, ``snapshot_rows``…)
    as the spec names them. The wall time, not the trainer step, is the stream's axis: these
    samples continue through a long step and across a restart.
    """

    PREFIX: ClassVar[str] = ""

    values: Mapping[str, float] = attrs.field(factory=dict, converter=_event_values)
    wall_time_s: float = attrs.field(factory=time.time, converter=_wall_clock)

    @property
    def prefix(self) -> str:
        return self.PREFIX

    def to_metrics(self) -> dict[str, float]:
        return {**self.values, WALL_TIME_KEY: self.wall_time_s}

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any]) -> RolloutEvent:
        fields = dict(_fields(metrics))
        values = {k: v for k, v in fields.items() if k != WALL_TIME_KEY}
        return cls(values=values, wall_time_s=_wall_time(fields))


@attrs.frozen
class CheckpointSave(RolloutEvent):
    """A rollout checkpoint was saved: phase latencies (``*_seconds``) and captured volume."""

    PREFIX: ClassVar[str] = "timing/rollout_checkpoint"


@attrs.frozen
class CheckpointRestore(RolloutEvent):
    """Rollout state was restored: phase latencies (``*_seconds``) and reused work."""

    PREFIX: ClassVar[str] = "timing/rollout_recovery"


@attrs.frozen
class ThroughputSample(RolloutEvent):
    """One wall-clock sample of generation and committed-rollout throughput."""

    PREFIX: ClassVar[str] = "rollout/throughput"


OUTCOMES = ("completed", "skipped", "failed")
_REASON_PREFIX = "reason_"


def _reason(value: Any) -> str | None:
    return _optional_text("CheckpointOutcome.reason", value)


def _outcome(value: Any) -> str | None:
    if value is None:  # no outcome flag set: a cadence sample, no attempt
        return None
    if type(value) is str and value in OUTCOMES:
        return value
    _bad_field("CheckpointOutcome.outcome", f"one of {OUTCOMES}", value)
    return None


def _flag_set(value: Any) -> bool:
    """Whether a logged flag is set: True, or a number other than 0 (NaN is none)."""
    if value is True:
        return True
    number = as_number(value)
    return number is not None and number == number and number != 0


@attrs.frozen
class CheckpointOutcome(RolloutEvent):
    """The result of one scheduled checkpoint attempt, with the reason when not completed.

    As a dict: ``completed``/``skipped``/``failed`` (one of them 1 or True) and
    ``reason_<reason>=1``, plus cadence fields such as ``seconds_since_previous_success`` in
    ``values``; a dict with no outcome flag set counts no attempt (its cadence fields are
    still recorded). Built in code, the outcome defaults to ``completed``.
    """

    PREFIX: ClassVar[str] = "rollout/checkpoint_outcome"

    #: None when the outcome given was not one of :data:`OUTCOMES` (then no attempt is counted).
    outcome: str | None = attrs.field(default="completed", converter=_outcome)
    reason: str | None = attrs.field(default=None, converter=_reason)

    def to_metrics(self) -> dict[str, float]:
        out = {name: float(name == self.outcome) for name in OUTCOMES}
        if self.reason:
            out[_REASON_PREFIX + self.reason] = 1.0
        return {**out, **super().to_metrics()}

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, Any]) -> CheckpointOutcome:
        fields = dict(_fields(metrics))
        # The flag set (1, or True: a controller may log bools) is the attempt's outcome;
        # a dict with none set (a cadence sample, or all three 0) is no attempt.
        outcomes = [o for o in OUTCOMES if _flag_set(fields.get(o))]
        reasons = [
            k[len(_REASON_PREFIX) :]
            for k, v in fields.items()
            if k.startswith(_REASON_PREFIX) and _flag_set(v)
        ]
        for what, given in (("outcome", outcomes), ("reason", reasons)):
            if len(given) > 1:
                _contradictory(what, given)
        outcome = outcomes[0] if outcomes else None
        reason = reasons[0] if reasons else None
        rest = {
            k: v
            for k, v in fields.items()
            if k not in OUTCOMES and not k.startswith(_REASON_PREFIX) and k != WALL_TIME_KEY
        }
        return cls(
            values=rest,
            wall_time_s=_wall_time(fields),
            outcome=outcome,
            reason=reason,
        )


def not_a_payload(value: Any, kind: type, call: str) -> bool:
    """Whether ``value``, given to the typed call ``call``, is no ``kind`` (a dict the loop
    logs, None): said once, with what the call takes and where the dict goes instead."""
    try:
        if isinstance(value, kind):
            return False
    except Exception:  # a __class__ that raises: no event of ours
        pass
    kinds = "CheckpointSave, CheckpointRestore, CheckpointOutcome or ThroughputSample"
    takes = kinds if kind is RolloutEvent else kind.__name__
    warn_once(
        f"payload:{call}",
        f"rlmetrics: Logger.{call} takes an rlmetrics.events {takes}, got "
        f"{describe_value(value)}; nothing logged. Log a dict with Logger.log_metrics(dict, "
        "step, prefix), which reads the same event from its keys",
    )
    return True


def _contradictory(what: str, given: list[str]) -> None:
    """Say once that a checkpoint outcome dict set several ``what`` flags; the first counts."""
    names = [name if key_attribute(name) is not None else describe_value(name) for name in given]
    warn_once(
        f"payload:checkpoint-{what}s",
        f"rlmetrics: a rollout/checkpoint_outcome dict set {len(given)} {what} flags {names}; "
        f"one attempt is counted, under {what} {names[0]!r} (the backends keep every flag). "
        "Set one per attempt. Later ones are reported at DEBUG",
    )


ROLLOUT_EVENT_TYPES: dict[str, type[RolloutEvent]] = {
    t.PREFIX: t for t in (CheckpointSave, CheckpointRestore, CheckpointOutcome, ThroughputSample)
}


def rollout_event_from_metrics(prefix: str, metrics: Mapping[str, Any]) -> RolloutEvent | None:
    """The typed event a dict logged under a rollout-checkpoint prefix stands for."""
    event_type = ROLLOUT_EVENT_TYPES.get(prefix)
    return None if event_type is None else event_type.from_metrics(metrics)
