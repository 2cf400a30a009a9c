"""The liveness family: the newest step, when it arrived and the median interval, exported as
``rl.step.*`` on a clock the tests move by hand."""

from __future__ import annotations

import statistics
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import rlmetrics
from rlmetrics import liveness
from rlmetrics.testing import in_memory_telemetry, points, single


@pytest.fixture
def exporting(clock: Any) -> Iterator[tuple[rlmetrics.Logger, Any]]:
    with in_memory_telemetry() as (_handle, reader):
        yield rlmetrics.Logger(backends={}), reader


def _step_points(reader: Any) -> dict[str, float | None]:
    found = [p for p in points(reader) if p.name.startswith("rl.step.")]
    assert all(p.kind == "gauge" and p.attributes == {} for p in found)
    return {p.name: p.value for p in found}


def test_each_new_step_exports_its_number_and_when_it_arrived(exporting: Any, clock: Any) -> None:
    logger, reader = exporting
    logger.log_metrics({"reward": 0.5}, step=1, prefix="train")
    first = clock.now
    clock.now += 30.0
    logger.log_metrics({"loss": 0.1}, step=1, prefix="train")  # the same step again
    assert _step_points(reader) == {"rl.step.number": 1, "rl.step.last_timestamp": first}
    logger.log_metrics({"reward": 0.6}, step=2, prefix="train")
    assert _step_points(reader) == {"rl.step.number": 2, "rl.step.last_timestamp": clock.now}
    assert single(points(reader), "rl.step.last_timestamp").unit == "s"
    assert single(points(reader), "rl.step.number").unit == "{step}"


def test_any_prefix_counts_but_setup_and_wall_clock_streams_do_not(
    exporting: Any, clock: Any
) -> None:
    logger, reader = exporting
    logger.log_setup_timing({"policy_init_time_s": 3.0})
    logger.log_metrics(
        {"total_save_seconds": 2.0, "telemetry/wall_time_seconds": clock.now},
        step=40,
        prefix="timing/rollout_checkpoint",
    )
    assert _step_points(reader) == {}
    logger.log_metrics({"accuracy": 0.9}, step=np.int64(3), prefix="validation")
    assert _step_points(reader)["rl.step.number"] == 3
    clock.now += 5.0
    logger.log_metrics({"reward": 0.1}, step=2, prefix="train")  # an older step: no change
    logger.log_metrics({"reward": 0.1}, step="4", prefix="train")  # not a step: ignored
    assert _step_points(reader)["rl.step.number"] == 3
    assert _step_points(reader)["rl.step.last_timestamp"] == clock.now - 5.0


def test_the_median_interval_appears_once_twenty_intervals_are_known(
    exporting: Any, clock: Any
) -> None:
    logger, reader = exporting
    intervals = [float(3 + (i * 7) % 11) for i in range(25)]
    logger.log_metrics({"reward": 0.0}, step=0, prefix="train")
    for step, interval in enumerate(intervals, start=1):
        clock.now += interval
        logger.log_metrics({"reward": 0.0}, step=step, prefix="train")
        median = _step_points(reader).get("rl.step.interval.median")
        if step < liveness.MEDIAN_WINDOW:
            assert median is None, step
        else:
            window = intervals[step - liveness.MEDIAN_WINDOW : step]
            assert median == statistics.median(window), step


def test_a_new_session_starts_from_no_step(clock: Any) -> None:
    with in_memory_telemetry():
        rlmetrics.Logger(backends={}).log_metrics({"reward": 1.0}, step=50, prefix="train")
    with in_memory_telemetry() as (_handle, reader):
        assert liveness.liveness.snapshot().step is None
        rlmetrics.Logger(backends={}).log_metrics({"reward": 1.0}, step=1, prefix="train")
        assert _step_points(reader)["rl.step.number"] == 1


def test_threads_logging_new_steps_at_once_leave_the_newest(exporting: Any) -> None:
    logger, reader = exporting
    barrier = threading.Barrier(4)

    def log(offset: int) -> None:
        barrier.wait()
        for step in range(offset, 400, 4):
            logger.log_metrics({"reward": 0.0}, step=step, prefix="train")

    threads = [threading.Thread(target=log, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _step_points(reader)["rl.step.number"] == 399


def test_nothing_is_recorded_unless_exporting(clock: Any) -> None:
    rlmetrics.Logger(backends={}).log_metrics({"reward": 1.0}, step=9, prefix="train")
    with in_memory_telemetry() as (_handle, reader):
        assert _step_points(reader) == {}


def test_a_collection_after_many_steps_reads_the_newest_step_and_the_last_twenty_intervals(
    exporting: Any, clock: Any
) -> None:
    # The series are read from the state when a collection asks, not written on every step:
    # whatever happened between two collections, the next one shows where the run is now.
    logger, reader = exporting
    intervals = [float(1 + (i * 5) % 13) for i in range(45)]
    logger.log_metrics({"reward": 0.0}, step=0, prefix="train")
    for step, interval in enumerate(intervals, start=1):
        clock.now += interval
        logger.log_metrics({"reward": 0.0}, step=step, prefix="train")
        logger.log_metrics({"loss": 0.0}, step=step, prefix="train")  # the same step again
    assert _step_points(reader) == {
        "rl.step.number": 45,
        "rl.step.last_timestamp": clock.now,
        "rl.step.interval.median": statistics.median(intervals[-liveness.MEDIAN_WINDOW :]),
    }
    assert _step_points(reader)["rl.step.number"] == 45  # read again: the same


def test_a_loop_timed_with_rlmetrics_step_and_no_logger_is_making_progress(
    exporting: Any, clock: Any
) -> None:
    """Before: a loop whose steps are ``with rlmetrics.step(n):`` (the summary to the
    ``on_efficiency_summary`` hook, no Logger, as docs/traces.md offers) never reached the
    liveness state: no ``rl.step.*``, and /health and RLStepStalled called it stalled once
    600 s had passed since telemetry started, while it stepped. A step that ends is a trainer
    step, as its summary's step is."""
    from rlmetrics.health import health

    _logger, reader = exporting
    for n in (1, 2):
        with rlmetrics.step(n):
            clock.now += 400.0
    assert _step_points(reader) == {"rl.step.number": 2, "rl.step.last_timestamp": clock.now}
    clock.now += 300.0
    status, body = health(liveness.StallRule())
    assert (status, body["status"]) == (200, "ok")
