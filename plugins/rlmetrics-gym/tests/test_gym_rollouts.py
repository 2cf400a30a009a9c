"""gym.rollout.*, gym.verify.* and gym.servers.active, read back from the in-memory reader."""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import pytest
from gym_support_client import find, total, value_of
from hypothesis import given
from hypothesis import strategies as st
from rlmetrics_gym import rollouts
from rlmetrics_gym.rollouts import (
    COMPLETED,
    REWARD_RANGES,
    REWARDED,
    ROLLOUT_DURATION,
    SERVERS_ACTIVE,
    VERIFY_DURATION,
    VERIFY_SUCCESS_RATE,
    record_active_servers,
    record_rollout_completed,
    register_failure_kinds,
    reward_range,
    timed_rollout,
    timed_verify,
)

import rlmetrics
from rlmetrics.testing import in_memory_telemetry, isolated_state, points

OUTCOME = "nemo.gym.rollout.outcome"
DISPATCH = "nemo.gym.rollout.dispatch.name"
RANGE = "nemo.gym.rollout.reward.range"
MASKED = "nemo.gym.rollout.masked"
CLASS = "nemo.gym.failure_class"
KIND = "nemo.gym.failure_kind"
TYPE = "nemo.gym.failure_type"
EPS = 1e-9


# -- durations and verification -----------------------------------------------------------------


def test_rollout_duration_is_recorded_for_failed_rollouts_too(telemetry: Any) -> None:
    _, reader = telemetry
    with timed_rollout():
        pass
    with pytest.raises(RuntimeError), timed_rollout():
        raise RuntimeError("the agent crashed")
    found = points(reader)
    (point,) = find(found, ROLLOUT_DURATION)
    assert (point.unit, point.kind, point.count) == ("ms", "histogram", 2)
    assert point.attributes == {}
    assert point.sum is not None and point.sum >= 0


def test_verify_success_rate_is_the_fraction_of_calls_that_completed(telemetry: Any) -> None:
    _, reader = telemetry
    assert find(points(reader), VERIFY_SUCCESS_RATE) == []  # no verification yet: no value
    for score in (1.0, 0.0, 0.0):  # a verifier scoring a wrong answer 0 still completed
        with timed_verify():
            _ = score
    with pytest.raises(ValueError), timed_verify():
        raise ValueError("verifier broke")
    with pytest.raises(asyncio.CancelledError), timed_verify():
        raise asyncio.CancelledError  # stopped, not failed: not in the rate
    found = points(reader)
    (rate,) = find(found, VERIFY_SUCCESS_RATE)
    assert (rate.unit, rate.kind, rate.value) == ("1", "gauge", 0.75)
    assert total(found, VERIFY_DURATION)[0] == 5


def test_verify_success_rate_starts_again_with_each_telemetry_session() -> None:
    with isolated_state(), in_memory_telemetry() as (_, reader):
        with pytest.raises(KeyError), timed_verify():
            raise KeyError("x")
        assert value_of(reader, VERIFY_SUCCESS_RATE) == 0.0
    with isolated_state(), in_memory_telemetry() as (_, reader):
        assert value_of(reader, VERIFY_SUCCESS_RATE) is None
        rollouts.record_verify(3.0, succeeded=True)
        assert value_of(reader, VERIFY_SUCCESS_RATE) == 1.0


def test_servers_active_is_the_supervisors_last_value(telemetry: Any) -> None:
    _, reader = telemetry
    record_active_servers(4)
    (point,) = find(points(reader), SERVERS_ACTIVE)
    assert (point.value, point.unit, point.kind) == (4, "{server}", "gauge")
    record_active_servers(0)  # shutdown
    assert value_of(reader, SERVERS_ACTIVE) == 0


@pytest.mark.parametrize("count", [-1, 2.5, "3", math.nan, True])
def test_servers_active_refuses_a_count_that_is_no_number_of_servers(
    telemetry: Any, count: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _, reader = telemetry
    record_active_servers(3)
    record_active_servers(count)
    assert value_of(reader, SERVERS_ACTIVE) == 3  # the last real count stands
    assert "gym.servers.active" in caplog.text


# -- outcomes -----------------------------------------------------------------------------------


def test_completed_total_by_outcome_with_failure_attributes(telemetry: Any) -> None:
    _, reader = telemetry
    register_failure_kinds("sandbox_oom")
    record_rollout_completed("scored", dispatch_name="math_with_judge", reward=1.0)
    record_rollout_completed("scored", dispatch_name="math_with_judge", reward=0.0)
    record_rollout_completed(
        "failed",
        dispatch_name="math_with_judge",
        failure_class="agent_request_failed",
        failure_kind="math_with_judge:sympy_timeout",
        failure_type=TimeoutError("read timed out"),
    )
    record_rollout_completed(
        "omitted",
        dispatch_name="simple_agent",
        failure_class="kill_shaped",
        failure_kind="sandbox_oom",
        failure_type=MemoryError,
    )
    record_rollout_completed(
        "failed", dispatch_name="simple_agent", failure_class="environment_server_failure"
    )
    found = points(reader)
    scored = find(found, COMPLETED, **{OUTCOME: "scored"})
    assert [(p.value, p.attributes) for p in scored] == [
        (2, {OUTCOME: "scored", DISPATCH: "math_with_judge"})
    ]
    assert scored[0].unit == "{rollout}" and scored[0].monotonic is True
    failed = {p.attributes[DISPATCH]: p for p in find(found, COMPLETED, **{OUTCOME: "failed"})}
    assert failed["math_with_judge"].attributes == {
        OUTCOME: "failed",
        DISPATCH: "math_with_judge",
        CLASS: "agent_request_failed",
        KIND: "math_with_judge:sympy_timeout",
        TYPE: "TimeoutError",
    }
    assert failed["simple_agent"].attributes[KIND] == "unregistered"
    assert failed["simple_agent"].attributes[TYPE] == "none"
    (omitted,) = find(found, COMPLETED, **{OUTCOME: "omitted"})
    assert (omitted.attributes[KIND], omitted.attributes[TYPE]) == ("sandbox_oom", "MemoryError")


def test_free_text_never_becomes_an_attribute(telemetry: Any) -> None:
    _, reader = telemetry
    reason = "Timeout on reading data from socket after 30 s (host 10.0.0.3)"
    record_rollout_completed(
        "failed",
        dispatch_name=reason,
        failure_class=reason,
        failure_kind=reason,
        failure_type=reason,
    )
    (point,) = find(points(reader), COMPLETED)
    assert point.attributes == {
        OUTCOME: "failed",
        DISPATCH: "unknown",
        CLASS: "other",
        KIND: "unregistered",
        TYPE: "other",
    }
    assert all(reason not in value for value in point.attributes.values())


def test_an_unknown_outcome_counts_nothing(telemetry: Any, caplog: Any) -> None:
    _, reader = telemetry
    record_rollout_completed("dropped", dispatch_name="env", reward=1.0)
    assert find(points(reader), COMPLETED) == [] and find(points(reader), REWARDED) == []
    assert "rollout outcome must be one of" in caplog.text


def test_an_unknown_outcome_is_named_at_warning_the_first_time_and_at_debug_after(
    telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/gym.md, Outcomes: "a warning names it" — its value, shortened."""
    caplog.set_level(logging.DEBUG, logger="rlmetrics")
    for outcome in ("succeeded", "x" * 1000, "dropped"):
        record_rollout_completed(outcome, dispatch_name="env")
    said = [r for r in caplog.records if "rollout outcome must be one of" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert "'succeeded'" in said[0].getMessage() and "'dropped'" in said[2].getMessage()
    assert len(said[1].getMessage()) < 300  # a long value is cut


def test_register_failure_kinds_refuses_non_identifiers() -> None:
    with pytest.raises(ValueError, match="snake_case"):
        register_failure_kinds("Bad Kind")
    with pytest.raises(ValueError, match="snake_case"):
        register_failure_kinds("ok_kind", 3)  # type: ignore[arg-type]
    assert "ok_kind" not in rollouts.registered_failure_kinds()


# -- rewards ------------------------------------------------------------------------------------

BOUNDARIES: list[tuple[Any, str | None]] = [
    (-EPS, "negative"),
    (-1, "negative"),
    (0, "zero"),
    (-0.0, "zero"),
    (EPS, "partial"),
    (0.5, "partial"),
    (1 - EPS, "partial"),
    (1, "full"),
    (1.0, "full"),
    (1 + EPS, "above_one"),
    (7, "above_one"),
    (math.nan, None),
    (math.inf, None),
    (-math.inf, None),
    (None, None),
    (True, None),
    (False, None),
    ("0.5", None),
    ("", None),
    ([1.0], None),
]


@pytest.mark.parametrize(("reward", "expected"), BOUNDARIES)
def test_reward_range_boundaries(reward: Any, expected: str | None) -> None:
    assert reward_range(reward) == expected


def test_rewarded_total_counts_scored_numeric_rewards_by_range_and_mask(telemetry: Any) -> None:
    _, reader = telemetry
    for reward, _ in BOUNDARIES:
        record_rollout_completed("scored", dispatch_name="env", reward=reward)
    record_rollout_completed("scored", dispatch_name="env", reward=1.0, masked=True)
    record_rollout_completed("scored", dispatch_name="env", reward=0.25, masked="true")
    record_rollout_completed("scored", dispatch_name="env", reward=0.25, masked=None)
    # Failed and omitted attempts have no reward, whatever the row says.
    record_rollout_completed("failed", dispatch_name="env", reward=1.0, failure_class="x")
    record_rollout_completed("omitted", dispatch_name="env", reward=0.0)
    found = points(reader)
    counts = {(p.attributes[RANGE], p.attributes[MASKED]): p.value for p in find(found, REWARDED)}
    assert counts == {
        ("negative", "false"): 2,
        ("zero", "false"): 2,
        ("partial", "false"): 4,  # ε, 0.5, 1-ε, and 0.25 with mask None
        ("full", "false"): 2,
        ("above_one", "false"): 2,
        ("full", "true"): 1,
        ("partial", "true"): 1,
    }
    assert {p.attributes[DISPATCH] for p in find(found, REWARDED)} == {"env"}
    # Every attempt is in completed_total, rewarded or not (unscored is not a zero).
    assert value_of(reader, COMPLETED, **{OUTCOME: "scored"}) == len(BOUNDARIES) + 3


@given(
    st.one_of(
        st.floats(allow_nan=False, allow_infinity=False),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.fractions().map(float),
    )
)
def test_every_finite_reward_lands_in_exactly_one_range(reward: float) -> None:
    bucket = reward_range(reward)
    assert bucket in REWARD_RANGES
    holds = {
        "negative": reward < 0,
        "zero": reward == 0,
        "partial": 0 < reward < 1,
        "full": reward == 1,
        "above_one": reward > 1,
    }
    assert [name for name, ok in holds.items() if ok] == [bucket]


@given(
    st.one_of(
        st.none(),
        st.booleans(),
        st.text(),
        st.binary(),
        st.just(math.nan),
        st.just(math.inf),
        st.just(-math.inf),
        st.lists(st.floats()),
        st.dictionaries(st.text(), st.floats()),
    )
)
def test_no_non_numeric_reward_lands_in_a_range(reward: Any) -> None:
    assert reward_range(reward) is None


# -- the log_metrics route ----------------------------------------------------------------------


def test_a_logged_rollout_result_dict_counts_the_attempt(telemetry: Any) -> None:
    _, reader = telemetry
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics(
        {
            "outcome": "scored",
            "dispatch_name": "math_with_judge",
            "reward": 0.5,
            "mask_sample": False,
            "duration_ms": 1234.5,
            "response": {"output": []},
        },
        step=1,
        prefix="gym/rollout",
    )
    logger.log_metrics(
        {"outcome": "failed", "failure_class": "agent_request_failed", "duration_ms": 50},
        step=2,
        prefix="gym/rollout",
    )
    logger.log_metrics({"outcome": "scored", "reward": 1.0}, step=3, prefix="train")  # not ours
    found = points(reader)
    assert value_of(reader, COMPLETED, **{OUTCOME: "scored"}) == 1
    (failed,) = find(found, COMPLETED, **{OUTCOME: "failed"})
    assert failed.attributes[CLASS] == "agent_request_failed"
    assert failed.attributes[DISPATCH] == "unknown"
    (rewarded,) = find(found, REWARDED)
    assert rewarded.attributes == {RANGE: "partial", MASKED: "false", DISPATCH: "math_with_judge"}
    assert total(found, ROLLOUT_DURATION) == (2, 1284.5)


def test_a_logged_row_without_an_outcome_is_said_once_not_dropped_unsaid(
    telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A Gym result row as the rollout collection writes it carries no ``outcome``: logged
    under gym/rollout as it is, its attempt and its reward were counted nowhere and nothing
    said so. Its duration still lands; the missing outcome is said once."""
    _, reader = telemetry
    logger = rlmetrics.Logger(backends={})
    row = {"reward": 1.0, "duration_ms": 40.0, "response": {"output": []}}
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        for step in range(3):
            logger.log_metrics(row, step=step, prefix="gym/rollout")
    found = points(reader)
    assert find(found, COMPLETED) == [] and find(found, REWARDED) == []
    assert total(found, ROLLOUT_DURATION) == (3, 120.0)
    said = [r.getMessage() for r in caplog.records if "outcome" in r.getMessage()]
    assert len(said) == 1, said
    assert "scored" in said[0] and "failed" in said[0] and "omitted" in said[0]


def test_a_logged_row_naming_no_dispatch_is_counted_under_its_agent(telemetry: Any) -> None:
    """The specification: every point carries the dispatch name, the environment server or,
    when rows name none, the agent. A Gym result row names its agent in ``agent_ref``."""
    _, reader = telemetry
    logger = rlmetrics.Logger(backends={})
    row = {"agent_ref": {"type": "responses_api_agents", "name": "math_simple_agent"}}
    logger.log_metrics({"outcome": "scored", "reward": 1.0, **row}, step=1, prefix="gym/rollout")
    logger.log_metrics(
        {"outcome": "scored", "reward": 0.0, "dispatch_name": "math_with_judge", **row},
        step=2,
        prefix="gym/rollout",
    )
    found = points(reader)
    assert {p.attributes[DISPATCH]: p.value for p in find(found, COMPLETED)} == {
        "math_simple_agent": 1,
        "math_with_judge": 1,
    }
    assert {p.attributes[DISPATCH] for p in find(found, REWARDED)} == {
        "math_simple_agent",
        "math_with_judge",
    }


def test_nothing_is_recorded_or_raised_without_telemetry() -> None:
    with isolated_state():
        before = rollouts.verify_success_rate()
        record_rollout_completed("scored", reward=1.0)
        record_rollout_completed("nonsense")
        record_active_servers(3)
        with pytest.raises(ValueError), timed_verify():
            raise ValueError("not counted: telemetry is off")
        with timed_rollout():
            pass
        assert rollouts.verify_success_rate() == before
        assert not rlmetrics.is_exporting()
