"""Rollout checkpointing: save and restore latency by phase, attempt outcomes, throughput.

Four event streams (``rlmetrics.events``) whose axis is Unix wall time, not the trainer step:
they go on through a long step and across a restart. In OpenTelemetry:

- ``rl.rollout.checkpoint.duration``: a histogram of every ``<phase>_seconds`` field of a save
  or restore, by ``rl.rollout.checkpoint.operation`` and ``rl.rollout.checkpoint.phase``;
- ``rl.rollout.checkpoint.attempts``: a counter of scheduled attempts by outcome and reason;
- one gauge per throughput, mutation-pressure, cadence and volume field of the spec.

``ThroughputSampler`` produces the throughput stream on a wall-clock timer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .. import _waiting, hookimpl
from .._warn import describe_value, warn_once
from ..events import (
    CheckpointOutcome,
    CheckpointRestore,
    CheckpointSave,
    RolloutEvent,
    ThroughputSample,
)
from ..registry import declare, is_exporting, record, retract
from ..spec import MAX, OPEN, SUM, Kind, MetricSpec
from ..values import key_attribute

if TYPE_CHECKING:
    from ..logger import Logger

__all__ = [
    "GROUP",
    "REASONS",
    "ThroughputSampler",
    "attempt_attributes",
    "gauge_values",
    "phase_durations",
]

GROUP = "rl.rollout"
DURATION = "rl.rollout.checkpoint.duration"
ATTEMPTS = "rl.rollout.checkpoint.attempts"
OPERATION_ATTR = "rl.rollout.checkpoint.operation"
PHASE_ATTR = "rl.rollout.checkpoint.phase"
OUTCOME_ATTR = "rl.rollout.checkpoint.outcome"
REASON_ATTR = "rl.rollout.checkpoint.reason"

#: Reasons an attempt did not complete; anything else is counted as ``other`` (the logged
#: dict keeps the exact reason for the backends).
REASONS = frozenset(
    {
        "none",
        "in_progress",
        "not_due",
        "no_data",
        "barrier_timeout",
        "storage_error",
        "error",
        "other",
    }
)
_SECONDS_SUFFIX = "_seconds"
# Save and restore latencies span milliseconds (a sidecar write) to many minutes (a cold
# storage load): roughly 1-2.5-5 per decade from 10 ms to 30 min.
_DURATION_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1000,
    1800,
)

# (stream prefix, field) -> (metric name, unit, description). One gauge per field: the units
# differ, and a dashboard reads each on its own.
_GAUGES: dict[tuple[str, str], tuple[str, str, str]] = {
    (ThroughputSample.PREFIX, "generation_output_tokens_per_second"): (
        "rl.rollout.throughput.generation_tokens",
        "{token}/s",
        "Raw backend decoding throughput (absent when the backend has no cumulative counters)",
    ),
    (ThroughputSample.PREFIX, "committed_output_tokens_per_second"): (
        "rl.rollout.throughput.committed_tokens",
        "{token}/s",
        "Output tokens committed for training per second",
    ),
    (ThroughputSample.PREFIX, "committed_groups_per_second"): (
        "rl.rollout.throughput.committed_groups",
        "{group}/s",
        "Rollout groups committed for training per second",
    ),
    (ThroughputSample.PREFIX, "checkpoint_blocked_mutations"): (
        "rl.rollout.checkpoint.blocked_mutations",
        "{mutation}",
        "Live data-plane mutations delayed by an exclusive checkpoint in the interval",
    ),
    (ThroughputSample.PREFIX, "checkpoint_mutation_wait_seconds_p95"): (
        "rl.rollout.checkpoint.mutation_wait.p95",
        "s",
        "95th percentile wait of a mutation behind the checkpoint fence",
    ),
    (ThroughputSample.PREFIX, "checkpoint_mutation_wait_seconds_max"): (
        "rl.rollout.checkpoint.mutation_wait.max",
        "s",
        "Longest wait of a mutation behind the checkpoint fence",
    ),
    (CheckpointSave.PREFIX, "snapshot_rows"): (
        "rl.rollout.checkpoint.snapshot.rows",
        "{row}",
        "Rows captured by the snapshot",
    ),
    (CheckpointSave.PREFIX, "replay_rows"): (
        "rl.rollout.checkpoint.replay.rows",
        "{row}",
        "Replay rows captured by the snapshot",
    ),
    (CheckpointSave.PREFIX, "staging_rows"): (
        "rl.rollout.checkpoint.staging.rows",
        "{row}",
        "Staging rows captured by the snapshot",
    ),
    (CheckpointSave.PREFIX, "replay_groups"): (
        "rl.rollout.checkpoint.replay.groups",
        "{group}",
        "Replay groups captured",
    ),
    (CheckpointSave.PREFIX, "ledger_groups"): (
        "rl.rollout.checkpoint.ledger.groups",
        "{group}",
        "Ledger groups captured",
    ),
    (CheckpointSave.PREFIX, "controller_sidecar_bytes"): (
        "rl.rollout.checkpoint.sidecar.size",
        "By",
        "Controller sidecar bytes written (excludes the native TQ payload)",
    ),
    (CheckpointRestore.PREFIX, "groups_complete_restored"): (
        "rl.rollout.recovery.groups.restored",
        "{group}",
        "Training-ready groups restored without generation",
    ),
    (CheckpointRestore.PREFIX, "groups_unfinished_found"): (
        "rl.rollout.recovery.groups.unfinished",
        "{group}",
        "Unfinished groups found for redispatch",
    ),
    (CheckpointRestore.PREFIX, "siblings_reused"): (
        "rl.rollout.recovery.siblings.reused",
        "{sibling}",
        "Sibling work preserved",
    ),
    (CheckpointRestore.PREFIX, "siblings_rerun"): (
        "rl.rollout.recovery.siblings.rerun",
        "{sibling}",
        "Sibling work rerun after restart",
    ),
    (CheckpointOutcome.PREFIX, "seconds_since_previous_success"): (
        "rl.rollout.checkpoint.success_interval",
        "s",
        "On a completed attempt: time since the previous completed one",
    ),
    (CheckpointOutcome.PREFIX, "seconds_since_last_success"): (
        "rl.rollout.checkpoint.since_last_success",
        "s",
        "Time since the last completed attempt, as of this attempt",
    ),
}


#: Gauges whose run-level value is the worst rank's (waits and ages); the other gauges are
#: throughputs and counts, which add up across ranks.
_WORST_OF_RANKS = frozenset(
    {
        "rl.rollout.checkpoint.mutation_wait.p95",
        "rl.rollout.checkpoint.mutation_wait.max",
        "rl.rollout.checkpoint.success_interval",
        "rl.rollout.checkpoint.since_last_success",
    }
)


def _key(prefix: str, field: str) -> str:
    return f"{prefix}/{field}"


declare(
    GROUP,
    [
        MetricSpec(
            DURATION,
            Kind.HISTOGRAM,
            unit="s",
            description="Latency of one rollout-checkpoint save or restore phase",
            attributes={OPERATION_ATTR: {"save", "restore"}, PHASE_ATTR: OPEN},
            max_series=48,
            buckets=_DURATION_BUCKETS,
            reduce=SUM,
        ),
        MetricSpec(
            ATTEMPTS,
            Kind.COUNTER,
            unit="{attempt}",
            description="Scheduled rollout-checkpoint attempts by outcome and reason",
            attributes={OUTCOME_ATTR: {"completed", "skipped", "failed"}, REASON_ATTR: REASONS},
            reduce=SUM,
        ),
        *(
            MetricSpec(
                name,
                Kind.GAUGE,
                unit=unit,
                description=description,
                key=_key(prefix, field),
                reduce=MAX if name in _WORST_OF_RANKS else SUM,
            )
            for (prefix, field), (name, unit, description) in _GAUGES.items()
        ),
    ],
)

_OPERATIONS = {CheckpointSave.PREFIX: "save", CheckpointRestore.PREFIX: "restore"}


def phase_durations(values: Mapping[str, Any]) -> dict[str, Any]:
    """``{phase: seconds}`` for every ``<phase>_seconds`` field (``tq_save_seconds`` is
    phase ``tq_save``)."""
    return {
        key[: -len(_SECONDS_SUFFIX)]: value
        for key, value in values.items()
        if key.endswith(_SECONDS_SUFFIX) and len(key) > len(_SECONDS_SUFFIX) and value is not None
    }


#: The gauges a throughput sample feeds (each sample holds every rate the controller has).
_SAMPLED = frozenset(
    _key(prefix, field) for prefix, field in _GAUGES if prefix == ThroughputSample.PREFIX
)


def gauge_values(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """``{registry key: value}`` for the fields of a stream that have a gauge."""
    return {
        _key(prefix, field): value
        for field, value in values.items()
        if (prefix, field) in _GAUGES and value is not None
    }


def attempt_attributes(event: CheckpointOutcome) -> dict[str, str]:
    """The attempt's outcome and reason, the reason folded into :data:`REASONS` (an event
    without a valid outcome counts no attempt)."""
    reason = event.reason or "none"
    return {
        OUTCOME_ATTR: event.outcome or "",
        REASON_ATTR: reason if reason in REASONS else "other",
    }


@hookimpl(tee=True)
def on_rollout_checkpoint(event: RolloutEvent) -> None:
    if not is_exporting():
        return
    operation = _OPERATIONS.get(event.prefix)
    if operation is not None:
        for phase, seconds in phase_durations(event.values).items():
            if key_attribute(phase, "checkpoint phase") is not None:
                record(GROUP, {DURATION: seconds}, {OPERATION_ATTR: operation, PHASE_ATTR: phase})
    if isinstance(event, CheckpointOutcome) and event.outcome is not None:
        attributes = attempt_attributes(event)
        if event.reason and attributes[REASON_ATTR] == "other":
            warn_once(
                "rollout:unknown-reason",
                f"rlmetrics: a checkpoint reason ({describe_value(event.reason)}) is not one of "
                f"{sorted(REASONS)}; counted as 'other' (backends keep the exact reason). Later "
                "unknown reasons are reported at DEBUG",
            )
        record(GROUP, {ATTEMPTS: 1}, attributes)
    values = gauge_values(event.prefix, event.values)
    record(GROUP, values)
    if isinstance(event, ThroughputSample):
        # A sample says what the controller exposes now: a rate it no longer gives is absent
        # (the spec: "absent when the backend does not expose compatible cumulative
        # counters"), not the last sample's value.
        for key in _SAMPLED.difference(values):
            retract(GROUP, key)


class ThroughputSampler:
    """Calls ``sample()`` every ``telemetry_interval_s`` seconds on a daemon thread and logs
    what it returns as a :class:`~rlmetrics.events.ThroughputSample`.

    Off when the interval is None (the default, as in the spec's config). ``sample`` returning
    None or an empty dict skips the interval; one that raises is reported once and the
    sampler goes on. ``stop()`` wakes the thread at once and is idempotent.
    """

    def __init__(
        self,
        logger: Logger,
        sample: Callable[[], Mapping[str, Any] | None],
        telemetry_interval_s: float | None = None,
    ) -> None:
        if telemetry_interval_s is not None and telemetry_interval_s <= 0:
            raise ValueError(
                f"telemetry_interval_s must be positive or None (off), got {telemetry_interval_s}"
            )
        self._logger = logger
        self._sample = sample
        self.interval_s = telemetry_interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> ThroughputSampler:
        if self.interval_s is None or self._thread is not None:
            return self
        self._thread = threading.Thread(
            target=self._run, name="rlmetrics-throughput-sampler", daemon=True
        )
        self._thread.start()
        return self

    def _run(self) -> None:
        assert self.interval_s is not None
        while not self._stop.wait(self.interval_s):
            try:
                values = self._sample()
            except Exception:
                warn_once(
                    "rollout:sampler",
                    "rlmetrics: the throughput sample function raised; "
                    "this interval is skipped and sampling goes on",
                )
                continue
            if values:
                self._logger.log_rollout_checkpoint(ThroughputSample(values))

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            _waiting.join(thread, timeout_s)

    def __enter__(self) -> ThroughputSampler:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
