"""A trajectory's total reward is the same number in its three outputs: the span's
``rl.reward``, the row's ``reward`` and what ``rl.trajectory.reward.summed`` / ``.count`` add
under ``total``; a reward without a component (component ``total``) is a part of that total,
never counted twice. Negative rewards (a format penalty) count like any other. Read back from
the SDK's spans and points and a tracker's rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import rlmetrics
from rlmetrics.testing import points
from rlmetrics.testing.traces import in_memory_tracing, span_records

from ._records import Rows


def _live_with_a_total(logger: rlmetrics.Logger) -> None:
    with rlmetrics.trajectory("t", env="math", step=1, logger=logger) as t:
        t.reward(1.0)  # a format bonus, say: no component given
        t.finish("success", reward=3.0)  # the rollout's total


def _live_alone(logger: rlmetrics.Logger) -> None:
    with rlmetrics.trajectory("t", env="math", step=1, logger=logger) as t:
        t.reward(1.0)


def _record(**fields: Any) -> Callable[[rlmetrics.Logger], None]:
    def log(logger: rlmetrics.Logger) -> None:
        logger.log_trajectories([{"sample_id": "t", "env": "math", **fields}], step=1)

    return log


CASES = {
    # Before: the span and the row said 3.0, rl.trajectory.reward{total} 1.0.
    "a component-less reward and a total": (_live_with_a_total, 3.0, {}),
    "a component-less reward alone": (_live_alone, 1.0, {}),
    "a component-less reward and a component": (
        _record(rewards=[{"value": 1.0}, {"value": 0.5, "component": "correct"}]),
        1.5,
        {"correct": [0.5]},
    ),
    # Before: no total point at all (the span and the row said 1.5).
    "components only": (
        _record(
            rewards=[{"value": 1.0, "component": "correct"}, {"value": 0.5, "component": "fmt"}]
        ),
        1.5,
        {"correct": [1.0], "fmt": [0.5]},
    ),
    "a total and a reward named total": (
        _record(reward=2.0, turns=[{"rewards": [{"value": 1.0, "component": "total"}]}]),
        2.0,
        {},
    ),
    "no reward": (_record(), None, {}),
    # Before: rl.trajectory.reward was a histogram, whose instrument drops a negative value
    # (said once): a penalty never reached the metric, and its mean was that of the rest.
    "negative rewards": (
        _record(
            rewards=[{"value": -1.0, "component": "format"}, {"value": 0.5, "component": "ok"}]
        ),
        -0.5,
        {"format": [-1.0], "ok": [0.5]},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_total_is_the_same_in_the_span_the_row_and_the_metric(rows: Rows, case: str) -> None:
    log, total, components = CASES[case]
    with in_memory_tracing() as (_handle, reader, exporter):
        logger = rlmetrics.Logger(backends={"rows": {}})
        log(logger)
        logger.finish()  # a live trajectory's row is held until its step ends, or this
        spans = span_records(exporter)
        found = points(reader)
    [agent] = [s for s in spans if s.name == "invoke_agent"]
    [row] = rows.rows
    sums = {
        p.attributes["rl.reward.component"]: p.value
        for p in found
        if p.name == "rl.trajectory.reward.summed"
    }
    by_component = {
        p.attributes["rl.reward.component"]: (p.value, sums[p.attributes["rl.reward.component"]])
        for p in found
        if p.name == "rl.trajectory.reward.count"
    }
    assert set(sums) == set(by_component)
    assert agent.attributes.get("rl.reward") == total
    assert row["reward"] == total
    expected = {c: (len(v), sum(v)) for c, v in components.items()}
    if total is not None:
        expected["total"] = (1, total)
    assert by_component == expected
    # The row's reward/<component> columns are the components'; its total is "reward".
    assert {k: v for k, v in row.items() if k.startswith("reward/")} == {
        f"reward/{c}": sum(v) for c, v in components.items()
    }
