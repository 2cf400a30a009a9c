from __future__ import annotations

import math

from rlmetrics.backends import as_step, full_key


def test_full_key_leaves_axis_keys_unprefixed() -> None:
    assert full_key("train", "loss") == "train/loss"
    assert full_key("", "loss") == "loss"
    assert full_key("train", "rlmetrics/step") == "rlmetrics/step"
    assert full_key("rollout/throughput", "telemetry/wall_time_seconds") == (
        "telemetry/wall_time_seconds"
    )


def test_as_step_takes_finite_numbers_only() -> None:
    class Scalar:
        def item(self) -> int:
            return 7

    assert [as_step(v) for v in (3, 3.0, Scalar())] == [3, 3, 7]
    assert [as_step(v) for v in (None, True, "3", math.nan, math.inf)] == [None] * 5
