from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import rlmetrics
from rlmetrics.events import CheckpointOutcome, CheckpointRestore, CheckpointSave, ThroughputSample
from rlmetrics.families.rollout_checkpoint import ThroughputSampler, phase_durations
from rlmetrics.plugins import register
from rlmetrics.testing import points, single

SAVE = {
    "total_save_seconds": 4.0,
    "tq_save_seconds": 2.0,
    "barrier_wait_seconds": 0.5,
    "exclusive_hold_seconds": 0.75,
    "sidecar_save_seconds": 0.2,
    "snapshot_commit_seconds": 0.05,
    "snapshot_rows": 1000,
    "replay_rows": 200,
    "staging_rows": 30,
    "replay_groups": 20,
    "ledger_groups": 25,
    "controller_sidecar_bytes": 4096,
}
RESTORE = {
    "snapshot_resolution_seconds": 0.1,
    "dataloader_load_seconds": 1.0,
    "tq_load_seconds": 3.0,
    "replay_metadata_load_seconds": 0.4,
    "recovery_prepare_seconds": 0.5,
    "total_load_seconds": 5.0,
    "redispatch_schedule_seconds": 0.01,
    "groups_complete_restored": 12,
    "groups_unfinished_found": 3,
    "siblings_reused": 40,
    "siblings_rerun": 8,
}
THROUGHPUT = {
    "generation_output_tokens_per_second": 5000.0,
    "committed_output_tokens_per_second": 4000.0,
    "committed_groups_per_second": 2.5,
    "checkpoint_blocked_mutations": 7,
    "checkpoint_mutation_wait_seconds_p95": 0.3,
    "checkpoint_mutation_wait_seconds_max": 1.2,
    "vllm_kv_cache_usage_mean": 0.4,  # a drill-down field: backends only
}
GAUGES = {
    "rl.rollout.throughput.generation_tokens": ("{token}/s", 5000.0),
    "rl.rollout.throughput.committed_tokens": ("{token}/s", 4000.0),
    "rl.rollout.throughput.committed_groups": ("{group}/s", 2.5),
    "rl.rollout.checkpoint.blocked_mutations": ("{mutation}", 7),
    "rl.rollout.checkpoint.mutation_wait.p95": ("s", 0.3),
    "rl.rollout.checkpoint.mutation_wait.max": ("s", 1.2),
    "rl.rollout.checkpoint.snapshot.rows": ("{row}", 1000),
    "rl.rollout.checkpoint.replay.rows": ("{row}", 200),
    "rl.rollout.checkpoint.staging.rows": ("{row}", 30),
    "rl.rollout.checkpoint.replay.groups": ("{group}", 20),
    "rl.rollout.checkpoint.ledger.groups": ("{group}", 25),
    "rl.rollout.checkpoint.sidecar.size": ("By", 4096),
    "rl.rollout.recovery.groups.restored": ("{group}", 12),
    "rl.rollout.recovery.groups.unfinished": ("{group}", 3),
    "rl.rollout.recovery.siblings.reused": ("{sibling}", 40),
    "rl.rollout.recovery.siblings.rerun": ("{sibling}", 8),
}


def _durations(found: list[Any]) -> dict[tuple[str, str], tuple[int | None, float | None]]:
    return {
        (
            p.attributes["rl.rollout.checkpoint.operation"],
            p.attributes["rl.rollout.checkpoint.phase"],
        ): (p.count, p.sum)
        for p in found
        if p.name == "rl.rollout.checkpoint.duration"
    }


@pytest.mark.parametrize("typed", [True, False])
def test_each_stream_is_mirrored(exporting: Any, typed: bool) -> None:
    logger, reader = exporting
    events = [CheckpointSave(SAVE), CheckpointRestore(RESTORE), ThroughputSample(THROUGHPUT)]
    for event in events:
        if typed:
            logger.log_rollout_checkpoint(event)
        else:
            logger.log_metrics(event.to_metrics(), step=9, prefix=event.prefix)
    found = points(reader)
    durations = _durations(found)
    assert durations == {
        **{
            ("save", k.removesuffix("_seconds")): (1, v)
            for k, v in SAVE.items()
            if k.endswith("_seconds")
        },
        **{
            ("restore", k.removesuffix("_seconds")): (1, v)
            for k, v in RESTORE.items()
            if k.endswith("_seconds")
        },
    }
    histogram = next(p for p in found if p.name == "rl.rollout.checkpoint.duration")
    assert (histogram.kind, histogram.unit) == ("histogram", "s")
    assert histogram.bounds[0] == 0.01 and histogram.bounds[-1] == 1800
    for name, (unit, value) in GAUGES.items():
        point = single(found, name)
        assert (point.kind, point.unit, point.value, point.attributes) == ("gauge", unit, value, {})
    assert not [p for p in found if "kv_cache" in p.name]


def test_attempts_are_counted_by_outcome_and_reason(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_rollout_checkpoint(CheckpointOutcome({"seconds_since_previous_success": 30.0}))
    logger.log_rollout_checkpoint(CheckpointOutcome({"seconds_since_previous_success": 31.0}))
    logger.log_rollout_checkpoint(CheckpointOutcome(outcome="skipped", reason="in_progress"))
    # From the dict a controller logs: the outcome flag and a reason_* flag.
    logger.log_metrics(
        {
            "failed": 1,
            "completed": 0,
            "skipped": 0,
            "reason_disk_on_fire": 1,
            "seconds_since_last_success": 95.0,
        },
        step=4,
        prefix="rollout/checkpoint_outcome",
    )
    found = points(reader)
    attempts = {
        (
            p.attributes["rl.rollout.checkpoint.outcome"],
            p.attributes["rl.rollout.checkpoint.reason"],
        ): p.value
        for p in found
        if p.name == "rl.rollout.checkpoint.attempts"
    }
    assert attempts == {
        ("completed", "none"): 2,
        ("skipped", "in_progress"): 1,
        ("failed", "other"): 1,
    }
    counter = next(p for p in found if p.name == "rl.rollout.checkpoint.attempts")
    assert (counter.kind, counter.monotonic, counter.unit) == ("sum", True, "{attempt}")
    assert single(found, "rl.rollout.checkpoint.success_interval").value == 31.0
    assert single(found, "rl.rollout.checkpoint.since_last_success").value == 95.0


@pytest.mark.parametrize(
    ("logged", "expected"),
    [
        # Before: as_number refuses a bool, so a flag given as True was no flag and the
        # attempt fell back to completed, its reason lost.
        ({"skipped": True, "reason_not_due": True}, {("skipped", "not_due"): 1}),
        ({"completed": False, "failed": True, "reason_no_data": 1}, {("failed", "no_data"): 1}),
        # Before: a row with no outcome flag set (a cadence sample, or all three 0) was
        # counted as one more completed attempt.
        ({"seconds_since_last_success": 40.0}, {}),
        ({"completed": 0, "skipped": 0, "failed": 0}, {}),
    ],
)
def test_an_attempt_is_counted_by_the_outcome_flag_it_sets_and_only_then(
    exporting: Any, logged: dict[str, Any], expected: dict[tuple[str, str], int]
) -> None:
    logger, reader = exporting
    logger.log_metrics(logged, step=4, prefix="rollout/checkpoint_outcome")
    attempts = {
        (
            p.attributes["rl.rollout.checkpoint.outcome"],
            p.attributes["rl.rollout.checkpoint.reason"],
        ): p.value
        for p in points(reader)
        if p.name == "rl.rollout.checkpoint.attempts"
    }
    assert attempts == expected


def test_a_throughput_field_a_sample_no_longer_has_is_absent_not_stale(exporting: Any) -> None:
    """Before: the gauge kept the last sample's 5000 tokens/s next to a live committed rate.
    The spec: "the raw metric is absent when the backend does not expose compatible
    cumulative counters"; each sample says what the controller exposes now."""
    logger, reader = exporting
    logger.log_rollout_checkpoint(ThroughputSample(THROUGHPUT))
    later = {k: v for k, v in THROUGHPUT.items() if k != "generation_output_tokens_per_second"}
    logger.log_rollout_checkpoint(ThroughputSample({**later, "committed_groups_per_second": 3.0}))
    found = {p.name: p.value for p in points(reader) if p.name.startswith("rl.rollout.throughput")}
    assert found == {
        "rl.rollout.throughput.committed_tokens": 4000.0,
        "rl.rollout.throughput.committed_groups": 3.0,
    }


def test_non_numeric_field_drops_only_itself(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_metrics(
        {
            "total_save_seconds": "n/a",
            "tq_save_seconds": 1.0,
            "snapshot_rows": None,
            "replay_rows": 5,
        },
        step=1,
        prefix="timing/rollout_checkpoint",
    )
    found = points(reader)
    assert _durations(found) == {("save", "tq_save"): (1, 1.0)}
    assert single(found, "rl.rollout.checkpoint.replay.rows").value == 5
    assert not [p for p in found if p.name == "rl.rollout.checkpoint.snapshot.rows"]


def test_phase_durations_is_pure() -> None:
    assert phase_durations({"a_seconds": 1, "_seconds": 2, "b": 3, "c_seconds": None}) == {"a": 1}


class _Collecting:
    """A backend that counts rows and signals once it has ``want`` of them."""

    def __init__(self, want: int) -> None:
        self.rows: list[tuple[int, str, dict[str, Any]]] = []
        self.want = want
        self.enough = threading.Event()

    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        self.rows.append((step, prefix, dict(metrics)))
        if len(self.rows) >= self.want:
            self.enough.set()

    def finish(self) -> None: ...


def test_sampler_logs_what_the_function_returns(exporting: Any) -> None:
    _logger, reader = exporting
    backend = _Collecting(want=3)

    class Plugin:
        @rlmetrics.hookimpl
        def register_backends(self, register: Any) -> None:
            register("collecting", lambda: backend)

    register(Plugin(), "collecting-plugin")
    logger = rlmetrics.Logger(backends={"collecting": {}})
    calls = iter(range(1000))

    def sample() -> dict[str, float] | None:
        n = next(calls)
        if n == 1:
            raise RuntimeError("backend counters unavailable")  # reported, sampling goes on
        if n == 2:
            return None  # nothing this interval
        return {"committed_groups_per_second": float(n)}

    with ThroughputSampler(logger, sample, telemetry_interval_s=0.01) as sampler:
        assert backend.enough.wait(timeout=10)
    assert not sampler.running
    steps, prefixes, values = zip(*backend.rows[:3], strict=True)
    assert steps == (0, 1, 2) and set(prefixes) == {"rollout/throughput"}
    assert [v["committed_groups_per_second"] for v in values] == [0.0, 3.0, 4.0]
    wall = [v["telemetry/wall_time_seconds"] for v in values]
    assert wall == sorted(wall) and abs(wall[-1] - time.time()) < 60
    assert single(points(reader), "rl.rollout.throughput.committed_groups").value >= 4.0


def test_sampler_is_off_by_default_and_stops_promptly() -> None:
    logger = rlmetrics.Logger(backends={})
    off = ThroughputSampler(logger, dict).start()
    assert not off.running
    off.stop()
    sampler = ThroughputSampler(logger, dict, telemetry_interval_s=3600).start()
    assert sampler.running
    started = time.monotonic()
    sampler.stop()
    sampler.stop()
    assert not sampler.running
    # A stop that waited for the sampler's next tick would take an hour; a minute is slack
    # no loaded machine needs.
    assert time.monotonic() - started < 60


def test_sampler_refuses_a_bad_interval() -> None:
    with pytest.raises(ValueError, match="positive or None"):
        ThroughputSampler(rlmetrics.Logger(backends={}), dict, telemetry_interval_s=0)


def test_a_phase_outside_the_safe_charset_is_dropped(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_rollout_checkpoint(
        CheckpointSave({"total_save_seconds": 1.0, "bad phase!_seconds": 2.0}, wall_time_s=1.0)
    )
    phases = {
        p.attributes["rl.rollout.checkpoint.phase"]
        for p in points(reader)
        if p.name == "rl.rollout.checkpoint.duration"
    }
    assert phases == {"total_save"}


def test_a_dict_setting_two_outcomes_or_two_reasons_is_counted_once_and_said(
    exporting: Any, caplog: Any
) -> None:
    """Before: a dict with completed=1 and failed=1 (or two reason_* flags) was counted under
    the first flag in order, the other dropped unsaid. The attempt is still counted once, as
    before; the contradiction is said, naming the flags."""
    import logging

    logger, reader = exporting
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger.log_metrics(
            {"completed": 1, "failed": 1, "reason_error": 1, "reason_storage_error": 1},
            step=0,
            prefix="rollout/checkpoint_outcome",
        )
    attempts = [p for p in points(reader) if p.name == "rl.rollout.checkpoint.attempts"]
    assert sum(p.value for p in attempts) == 1
    assert "['completed', 'failed']" in caplog.text
    assert "['error', 'storage_error']" in caplog.text
