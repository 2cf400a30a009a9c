"""The step a trajectory is logged at, read back from its span's ``rl.iteration``: given,
else the open ``rlmetrics.step``'s, else the Logger's next; in both forms alike."""

from __future__ import annotations

from typing import Any

import pytest

import rlmetrics
from rlmetrics.testing.traces import in_memory_tracing, span_records

from ._records import warned


def _steps(spans: list[Any]) -> dict[str, int]:
    return {
        s.attributes["rl.sample.id"]: s.attributes["rl.iteration"]
        for s in spans
        if s.name == "invoke_agent"
    }


def test_log_trajectories_without_a_step_takes_the_step_the_live_form_takes() -> None:
    """Before: ``logger.log_trajectories(records)`` raised TypeError into the loop (``step``
    was required), while ``log_metrics`` and the live form default it."""
    with in_memory_tracing() as (_handle, _reader, exporter):
        logger = rlmetrics.Logger(backends={})
        with rlmetrics.step(3, logger=logger, summary=False):
            logger.log_trajectories([{"sample_id": "in-step"}])
            with rlmetrics.trajectory("live-in-step", logger=logger):
                pass
        logger.log_metrics({"x": 1.0})  # step 4, the one after the last
        logger.log_trajectories([{"sample_id": "after"}], step=None)  # 5
        with rlmetrics.trajectory("live-after", logger=logger):  # 6
            pass
        logger.log_trajectories([{"sample_id": "given"}], step=2)
        spans = span_records(exporter)
    assert _steps(spans) == {
        "in-step": 3,
        "live-in-step": 3,
        "after": 5,
        "live-after": 6,
        "given": 2,
    }


@pytest.mark.parametrize("step", [5.0, "7", -1])
def test_a_bad_step_is_said_naming_the_call_it_was_given_to(
    warnings_seen: pytest.LogCaptureFixture, step: Any
) -> None:
    """Before: a bad step given to ``log_trajectories`` or to a live trajectory with a logger
    was said as "log_metrics' step", a call the loop never made there."""
    with in_memory_tracing() as (_handle, _reader, exporter):
        logger = rlmetrics.Logger(backends={})
        with rlmetrics.step(3, logger=logger, summary=False):
            logger.log_trajectories([{"sample_id": "batch"}], step=step)
            with rlmetrics.trajectory("live", step=step, logger=logger):
                pass
        spans = span_records(exporter)
    assert _steps(spans) == {"batch": 3, "live": 3}  # as if none were given
    assert warned(warnings_seen, "step given to Logger.log_trajectories must be an integer")
    assert warned(warnings_seen, "step given to rlmetrics.trajectory must be an integer")
    assert warned(warnings_seen, "(at the open rlmetrics.step's, else the step after the last)")
    assert not warned(warnings_seen, "log_metrics' step")
