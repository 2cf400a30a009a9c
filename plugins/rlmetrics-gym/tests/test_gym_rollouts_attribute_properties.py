"""Whatever the input, no attribute value of the part-1 Gym families leaves its closed set or
template: hypothesis over failure classes, kinds and types, dispatch and server names, stages,
outcomes, operations, executors, destinations and check ids — both through the pure mappings
and through the real reader."""

from __future__ import annotations

import re
from typing import Any

from gym_support_client import find
from hypothesis import given, settings
from hypothesis import strategies as st
from rlmetrics_gym import health, http_client, resources, rollouts, startup
from rlmetrics_gym._attribute_values import IDENTIFIER, SERVER_NAME, TYPE_NAME, flag, member

from rlmetrics.testing import in_memory_telemetry, isolated_state, points

# Anything a config, a result row or an exception could hand over.
ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz_:0123456789.-", max_size=80),
    st.sampled_from(["scored", "failed", "omitted", "ok", "verify", "thread", "init_ray"]),
    st.binary(),
    st.builds(Exception),
    st.builds(TimeoutError),
    st.sampled_from([ValueError, KeyError, MemoryError]),
    st.lists(st.text(), max_size=3),
)

KIND_TEMPLATE = re.compile(rf"(?:{SERVER_NAME.pattern}):(?:{IDENTIFIER.pattern})")


def kind_ok(value: str) -> bool:
    return (
        value == "unregistered"
        or value in rollouts.registered_failure_kinds()
        or bool(KIND_TEMPLATE.fullmatch(value))
    )


@given(ANYTHING, ANYTHING, ANYTHING, ANYTHING, ANYTHING)
def test_completed_attributes_stay_in_their_sets(
    outcome: Any, dispatch: Any, failure_class: Any, kind: Any, error: Any
) -> None:
    attributes = rollouts.completed_attributes(
        outcome, dispatch, failure_class=failure_class, failure_kind=kind, failure_type=error
    )
    if not member(outcome, rollouts.OUTCOMES):
        assert attributes is None
        return
    assert attributes is not None
    assert attributes["nemo.gym.rollout.outcome"] in rollouts.OUTCOMES
    assert SERVER_NAME.fullmatch(attributes["nemo.gym.rollout.dispatch.name"])
    if failure_class is None:
        assert set(attributes) == {"nemo.gym.rollout.outcome", "nemo.gym.rollout.dispatch.name"}
        return
    assert IDENTIFIER.fullmatch(attributes["nemo.gym.failure_class"])
    assert kind_ok(attributes["nemo.gym.failure_kind"])
    assert TYPE_NAME.fullmatch(attributes["nemo.gym.failure_type"])
    assert all(isinstance(v, str) and len(v) <= 129 for v in attributes.values())


@given(ANYTHING, ANYTHING, ANYTHING, ANYTHING)
def test_rewarded_attributes_stay_in_their_sets(
    outcome: Any, reward: Any, masked: Any, dispatch: Any
) -> None:
    attributes = rollouts.rewarded_attributes(outcome, reward, masked, dispatch)
    if attributes is None:
        assert outcome != "scored" or rollouts.reward_range(reward) is None
        return
    assert attributes["nemo.gym.rollout.reward.range"] in rollouts.REWARD_RANGES
    assert attributes["nemo.gym.rollout.masked"] in {"true", "false"}
    assert SERVER_NAME.fullmatch(attributes["nemo.gym.rollout.dispatch.name"])


@given(ANYTHING)
def test_flag_is_true_or_false(value: Any) -> None:
    assert flag(value) in {"true", "false"}


@given(ANYTHING, ANYTHING, ANYTHING, ANYTHING)
def test_stage_attributes_stay_in_their_sets(
    stage: Any, name: Any, server_type: Any, worker: Any
) -> None:
    attributes = startup.stage_attributes(stage, name, server_type, worker)
    if not member(stage, startup.STAGES):
        assert attributes is None
        return
    assert attributes is not None
    assert attributes["nemo.gym.startup.stage"] in startup.STAGES
    assert SERVER_NAME.fullmatch(attributes["nemo.gym.server.name"])
    assert attributes["nemo.gym.server.type"] in startup.SERVER_TYPES
    assert attributes["nemo.gym.server.worker"] in {"true", "false"}


@given(ANYTHING, ANYTHING)
def test_operation_and_executor_stay_in_their_sets(operation: Any, executor: Any) -> None:
    assert resources.operation_value(operation) in resources.OPERATIONS
    assert resources.executor_value(executor) in resources.EXECUTORS


@given(st.one_of(st.none(), st.builds(BaseException), st.builds(Exception), st.builds(OSError)))
def test_every_exception_maps_to_an_outcome(error: Any) -> None:
    assert resources.outcome_from_exception(error) in resources.OUTCOMES


@given(ANYTHING)
def test_destinations_stay_in_the_template(name: Any) -> None:
    value = http_client.destination_value(name)
    assert SERVER_NAME.fullmatch(value)
    assert value == name or value in {http_client.EXTERNAL, http_client.OVERFLOW}


@given(ANYTHING)
def test_check_ids_are_identifiers_or_refused(check_id: Any) -> None:
    try:
        check = health.TrajectoryCheck(check_id, lambda rollout: [])
    except ValueError:
        return
    assert IDENTIFIER.fullmatch(check.id) and check.id != health.CHECK_EXECUTION_ERROR


@settings(max_examples=25)
@given(st.lists(st.tuples(ANYTHING, ANYTHING, ANYTHING, ANYTHING), min_size=1, max_size=6))
def test_exported_points_carry_only_declared_values(calls: list[tuple[Any, ...]]) -> None:
    """Through rlmetrics itself: whatever is passed, every exported point's attributes are in
    the declared sets or templates (the registry would drop a point outside a closed set; this
    shows the mapping never produces one)."""
    with isolated_state(), in_memory_telemetry() as (_, reader):
        for outcome, dispatch, failure_class, stage in calls:
            rollouts.record_rollout_completed(
                outcome if member(outcome, rollouts.OUTCOMES) else "failed",
                dispatch_name=dispatch,
                reward=failure_class,
                failure_class=failure_class,
                failure_kind=dispatch,
                failure_type=stage,
            )
            startup.record_stage(
                "init_server", 1.0, server_name=dispatch, server_type=stage, worker=outcome
            )
        found = points(reader)
    completed = find(found, rollouts.COMPLETED)
    assert sum(p.value or 0 for p in completed) == len(calls)
    for point in completed:
        assert point.attributes["nemo.gym.rollout.outcome"] in rollouts.OUTCOMES
        assert SERVER_NAME.fullmatch(point.attributes["nemo.gym.rollout.dispatch.name"])
        if "nemo.gym.failure_class" in point.attributes:
            assert IDENTIFIER.fullmatch(point.attributes["nemo.gym.failure_class"])
            assert kind_ok(point.attributes["nemo.gym.failure_kind"])
            assert TYPE_NAME.fullmatch(point.attributes["nemo.gym.failure_type"])
    stages = find(found, startup.STAGE_DURATION)
    assert sum(p.count or 0 for p in stages) == len(calls)
    for point in stages:
        assert SERVER_NAME.fullmatch(point.attributes["nemo.gym.server.name"])
        assert point.attributes["nemo.gym.server.type"] in startup.SERVER_TYPES
