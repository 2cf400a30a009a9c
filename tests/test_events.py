"""The typed hook payloads parsed from logged dicts: pure functions, checked as properties."""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from rlmetrics.events import (
    AGGREGATE_EFFICIENCY_KEYS,
    CheckpointOutcome,
    CheckpointSave,
    EfficiencySummary,
    SetupTimings,
    ThroughputSample,
    setup_phase,
)
from rlmetrics.values import as_number

SETUP_DICT = {
    "generation_init_time_s": 30.0,
    "policy_init_time_s": 25.0,
    "parallel_wall_s": 31.0,
    "parallel_init_enabled": 1.0,
    "teacher_model_init_time_s": None,
    "collective_init_time_s": "pending",
    "weight_sync_time_s": 0.0,
}


def test_setup_timings_separate_durations_from_flags() -> None:
    timings = SetupTimings.from_metrics(SETUP_DICT)
    assert timings.seconds == {
        "generation_init": 30.0,
        "policy_init": 25.0,
        "parallel_wall": 31.0,
        "weight_sync": 0.0,
    }
    # Not a duration: the payload carries it apart, so no implementation has to skip it.
    assert timings.flags == {"parallel_init_enabled": 1.0}


def test_setup_phase_examples() -> None:
    assert setup_phase("generation_init_time_s") == "generation_init"
    assert setup_phase("parallel_wall_s") == "parallel_wall"
    assert setup_phase("parallel_init_enabled") is None
    assert setup_phase("_s") is None


_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=20)


@given(phase=_names.filter(lambda p: not p.endswith("_time")))
def test_setup_phase_strips_exactly_one_suffix(phase: str) -> None:
    assert setup_phase(phase + "_time_s") == phase
    assert setup_phase(phase + "_s") == phase


@given(key=st.text(max_size=30))
def test_setup_phase_is_none_exactly_for_non_durations(key: str) -> None:
    phase = setup_phase(key)
    if phase is None:
        assert not key.endswith("_s") or key == "_s"
    else:
        assert phase and key in (phase + "_s", phase + "_time_s")
        if key.endswith("_time_s") and len(key) > len("_time_s"):
            assert key == phase + "_time_s"


_values = st.one_of(st.none(), st.floats(), st.integers(), st.text(max_size=3), st.booleans())


@given(st.dictionaries(st.text(max_size=30), _values, max_size=12))
def test_setup_timings_every_entry_is_a_phase_or_a_flag(metrics: dict[str, Any]) -> None:
    timings = SetupTimings.from_metrics(metrics)
    assert set(timings.flags) == {key for key in metrics if setup_phase(key) is None}
    for phase, seconds in timings.seconds.items():
        assert math.isfinite(seconds) and not isinstance(seconds, bool)
        assert seconds in (metrics.get(phase + "_time_s"), metrics.get(phase + "_s"))


_categories = st.sampled_from(
    ["init/total", "idle/buffer_starvation", "idle/validation", "wasted/failed_trajectory"]
)
_efficiency_keys = st.one_of(
    _categories.map(lambda c: f"efficiency/{c}_s"),
    _categories.map(lambda c: f"efficiency/{c}_pct"),
    st.sampled_from(sorted(AGGREGATE_EFFICIENCY_KEYS)).map(lambda a: f"efficiency/{a}_s"),
    st.text(max_size=12),
)


@given(st.dictionaries(_efficiency_keys, _values, max_size=12))
def test_efficiency_summary_reads_exactly_the_category_seconds(metrics: dict[str, Any]) -> None:
    """Categories are the ``efficiency/<category>_s`` keys with a finite number from 0 (a
    duration), minus the aggregates and the step's wall time, which share that shape."""
    not_categories = AGGREGATE_EFFICIENCY_KEYS | {"step_wall_time", ""}
    expected = {}
    for key, raw in metrics.items():
        category = key.removeprefix("efficiency/").removesuffix("_s")
        shaped = key.startswith("efficiency/") and key.endswith("_s")
        number = as_number(raw)
        if shaped and category not in not_categories and number is not None and number >= 0:
            expected[category] = number
    assert EfficiencySummary.from_metrics(metrics).seconds == expected


def test_a_dict_logged_again_is_read_afresh_whatever_its_keys_order_or_number() -> None:
    step = {"efficiency/idle/validation_s": 1.0, "loss": 0.1, "efficiency/init/total_s": 2.0}
    assert EfficiencySummary.from_metrics(step).seconds == {
        "idle/validation": 1.0,
        "init/total": 2.0,
    }
    again = {**step, "efficiency/idle/validation_s": 5.0}
    assert EfficiencySummary.from_metrics(again).seconds["idle/validation"] == 5.0
    reordered = dict(reversed(list(step.items())))
    assert EfficiencySummary.from_metrics(reordered).seconds == {
        "idle/validation": 1.0,
        "init/total": 2.0,
    }
    # More distinct key sets than the parser remembers: each is still read right.
    for index in range(600):
        keys = {f"efficiency/custom/c{index}_s": float(index), "loss": 0.0}
        assert EfficiencySummary.from_metrics(keys).seconds == {f"custom/c{index}": float(index)}


@given(st.dictionaries(st.text(max_size=6), _values, max_size=8))
@example({"a": 1e308, "b": 1e308})  # finite values whose sum is not
@example({"a": 1.0, "b": float("nan")})
@example({"a": 1.0, "b": float("-inf")})
@example({"a": 1.0, "b": -1.0})  # below 0: no duration
def test_a_summary_keeps_exactly_its_finite_seconds(seconds: dict[str, Any]) -> None:
    kept = {k: n for k, v in seconds.items() if (n := as_number(v)) is not None and n >= 0}
    summary = EfficiencySummary(seconds=seconds)
    assert summary.seconds == kept
    assert summary.unmeasured == set(seconds) - set(kept)  # unknown, not 0


@pytest.mark.parametrize(
    ("build", "field", "kept"),
    [
        (
            lambda bad: EfficiencySummary({"a": 1.0}, step_wall_time_s=bad),
            "EfficiencySummary.step_wall_time_s",
            {"efficiency/a_s": 1.0},
        ),
        (
            lambda bad: EfficiencySummary({"a": 1.0}, run_elapsed_s=bad),
            "EfficiencySummary.run_elapsed_s",
            {"efficiency/a_s": 1.0},
        ),
        (
            lambda bad: EfficiencySummary({"a": 1.0, "b": bad}),
            "EfficiencySummary.seconds",
            {"efficiency/a_s": 1.0},
        ),
        (
            lambda bad: CheckpointSave({"rows": 3, "bad": bad}, wall_time_s=5.0),
            "a rollout event's values",
            {"rows": 3, "telemetry/wall_time_seconds": 5.0},
        ),
        (
            lambda bad: CheckpointOutcome({}, wall_time_s=5.0, outcome=bad),
            "CheckpointOutcome.outcome",
            {"completed": 0.0, "skipped": 0.0, "failed": 0.0, "telemetry/wall_time_seconds": 5.0},
        ),
        (
            lambda bad: CheckpointOutcome({}, wall_time_s=5.0, outcome="skipped", reason=bad),
            "CheckpointOutcome.reason",
            {"completed": 0.0, "skipped": 1.0, "failed": 0.0, "telemetry/wall_time_seconds": 5.0},
        ),
    ],
)
@pytest.mark.parametrize("bad", [[1.0, 2.0], math.nan, 10**400, object()], ids=repr)
def test_a_bad_payload_field_is_dropped_alone_with_a_warning(
    build: Any, field: str, kept: dict[str, Any], bad: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        payload = build(bad)
    assert payload.to_metrics() == kept
    assert f"{field}" in caplog.text and "the rest of the event is logged" in caplog.text


def test_a_bad_wall_time_is_the_time_of_the_call(caplog: pytest.LogCaptureFixture) -> None:
    before = time.time()
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        event = ThroughputSample({"x": 1.0}, wall_time_s="yesterday")
    assert before <= event.wall_time_s <= time.time()
    assert "wall_time_s must be a finite Unix time" in caplog.text
    assert ThroughputSample({}, wall_time_s=None).wall_time_s >= before  # not given: now


def test_a_numpy_flag_and_a_string_subclass_are_read_as_plain_values() -> None:
    np = pytest.importorskip("numpy")
    summary = EfficiencySummary(efficiency_pct=np.float32(50.0), pct_per_step=np.bool_(True))
    assert summary.pct_per_step is True and summary.efficiency_pct == 50.0
    assert CheckpointOutcome(outcome="failed", reason=np.str_("tq_error")).reason == "tq_error"


@pytest.mark.parametrize(
    "metrics",
    [
        {"loss": 0.5, "reward": 1.0},
        {},
        {"efficiency/efficiency_pct": 42.0},
        {"efficiency/idle/validation_s": 1.0, "loss": 0.5},
        {"efficiency/total_waste_s": 3.0},  # an aggregate only: an efficiency key, no field
        {"efficiency/efficiency_pct": float("nan"), "efficiency/step_wall_time_s": "slow"},
    ],
)
def test_in_metrics_is_from_metrics_or_none_without_an_efficiency_key(
    metrics: dict[str, Any],
) -> None:
    found = EfficiencySummary.in_metrics(metrics)
    if any(key.startswith("efficiency/") for key in metrics):
        assert found == EfficiencySummary.from_metrics(metrics)
    else:
        assert found is None
        assert EfficiencySummary.from_metrics(metrics) == EfficiencySummary()


@pytest.mark.parametrize(
    ("call", "given", "expected"),
    [
        ("log_efficiency_summary", {"efficiency/idle/refit_bubble_s": 1.0}, "EfficiencySummary"),
        ("log_rollout_checkpoint", {"completed": 1}, "CheckpointOutcome"),
        ("log_rollout_checkpoint", None, "CheckpointSave"),
    ],
)
def test_a_typed_call_given_no_event_says_what_to_pass_without_a_traceback(
    call: str, given: Any, expected: str, caplog: Any
) -> None:
    """Before: an AttributeError traceback ('dict' object has no attribute 'to_metrics') under
    'Logger.log_... failed', which names no mistake. Now one line saying what the call takes
    and how to log the dict instead."""
    import rlmetrics

    logger = rlmetrics.Logger(backends={})
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        getattr(logger, call)(given)
    logger.finish()
    [record] = [r for r in caplog.records if call in r.getMessage()]
    assert not record.exc_info  # no traceback
    assert expected in record.getMessage() and "log_metrics" in record.getMessage()
