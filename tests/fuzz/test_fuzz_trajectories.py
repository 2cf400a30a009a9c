"""``Logger.log_trajectories`` and the live form under hostile input: no exception reaches
the caller, each call returns within a bound, and the good trajectory of the same call lands
in the metrics (read back from the in-memory reader) and in the samples file.

The default run uses the ``suite`` hypothesis profile; the ``fuzz`` tox env runs 10**5
examples a property (docs/testing.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from fuzz_hostile import hostile_dicts, hostile_values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlmetrics
from rlmetrics.testing import in_memory_telemetry, points

CALL_BOUND_S = 5.0
_fuzz = settings(suppress_health_check=list(HealthCheck))
_FIELDS = (
    "sample_id", "group_id", "env", "agent", "outcome", "finish_reason", "weight_version",
    "reward", "latency_s", "end_time", "error", "prompt", "completion", "turns", "rewards",
    "trainer_weight_version", "logprob_mismatch", "importance_ratio",
)  # fmt: skip
GOOD = {
    "sample_id": "good",
    "env": "fuzz-good",
    "outcome": "truncated",
    "turns": [{"generations": [{"model": "m", "output_tokens": 3}], "tool_calls": [{"name": "t"}]}],
}

hostile_records = st.one_of(
    hostile_values,
    hostile_dicts,
    st.dictionaries(st.sampled_from(_FIELDS), hostile_values, max_size=6),
    st.fixed_dictionaries(
        {"turns": st.lists(st.one_of(hostile_dicts, hostile_values), max_size=3)}
    ),
)


@pytest.fixture
def session() -> Iterator[tuple[rlmetrics.Logger, Any]]:
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={})
        yield logger, reader
        logger.finish()


def _good_count(reader: Any) -> float:
    return sum(
        p.value
        for p in points(reader)
        if p.name == "rl.trajectory.completed" and p.attributes.get("rl.env") == "fuzz-good"
    )


def _timed(call: Any) -> None:
    started = time.monotonic()
    call()
    assert time.monotonic() - started < CALL_BOUND_S


def test_fuzz_log_trajectories(session: tuple[rlmetrics.Logger, Any]) -> None:
    logger, reader = session
    landed = [0]

    @_fuzz
    @given(
        records=st.lists(hostile_records, max_size=4), step=st.one_of(st.integers(), hostile_values)
    )
    def check(records: list[Any], step: Any) -> None:
        _timed(lambda: logger.log_trajectories(records, step=step))
        _timed(lambda: logger.log_trajectories([*records, GOOD], step=step))
        landed[0] += 1
        assert _good_count(reader) == landed[0]

    check()


def test_fuzz_live_trajectory(session: tuple[rlmetrics.Logger, Any]) -> None:
    logger, reader = session
    landed = [0]

    @_fuzz
    @given(values=st.lists(hostile_values, min_size=8, max_size=8))
    def check(values: list[Any]) -> None:
        def live() -> None:
            with rlmetrics.trajectory(
                values[0], group=values[1], env="fuzz-good", logger=logger
            ) as t:
                with t.turn():
                    t.generation(values[2], input_tokens=values[3], latency_s=values[4])
                    t.tool_call(values[5], outcome=values[6])
                t.reward(values[7], component=values[1])
                t.finish("truncated", reward=values[7])

        _timed(live)
        landed[0] += 1
        assert _good_count(reader) == landed[0]

    check()
