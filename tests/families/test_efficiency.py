from __future__ import annotations

import threading
from typing import Any

import pytest

from rlmetrics.events import EfficiencySummary
from rlmetrics.families.efficiency import (
    CollectorTimer,
    EfficiencyTimer,
    efficiency_pct,
)
from rlmetrics.testing import Point, points

# (category, measurement, window, bucket) as the spec tabulates them.
EXPECTED = {
    "init/total": ("wall_clock", "run", "overhead"),
    "idle/buffer_starvation": ("wall_clock", "step", "idle"),
    "idle/refit_bubble": ("wall_clock", "step", "idle"),
    "idle/validation": ("wall_clock", "step", "idle"),
    "idle/refit_event_wait": ("collector_wall_clock", "run", "idle"),
    "idle/generation_limit_pause": ("collector_wall_clock", "run", "idle"),
    "idle/buffer_full_backoff": ("thread_seconds", "run", "idle"),
    "wasted/failed_trajectory": ("thread_seconds", "run", "wasted"),
}

# What NeMo-RL's print_efficiency_summary logs with prefix "": categories, per-category pct,
# the aggregates that share the _s shape, and the pct with its window flag.
LOGGED = {
    **{f"efficiency/{c}_s": float(i + 1) for i, c in enumerate(EXPECTED)},
    "efficiency/idle/refit_bubble_pct": 3.0,
    "efficiency/total_waste_s": 10.0,
    "efficiency/productive_time_s": 90.0,
    "efficiency/total_wall_time_s": 100.0,
    "efficiency/thread_seconds_total_s": 15.0,
    "efficiency/efficiency_pct": 90.0,
    "efficiency/efficiency_pct_is_per_step": 1.0,
}


def _seconds(found: list[Point]) -> dict[str, Point]:
    return {
        p.attributes["rl.efficiency.category"]: p
        for p in found
        if p.name == "rl.efficiency.seconds"
    }


def _pct(found: list[Point]) -> list[tuple[float | None, dict[str, Any]]]:
    return [(p.value, p.attributes) for p in found if p.name == "rl.efficiency.pct"]


@pytest.mark.parametrize("prefix", ["", "train"])
def test_every_category_is_labelled_with_its_clock_window_and_bucket(
    exporting: Any, prefix: str
) -> None:
    logger, reader = exporting
    logger.log_metrics(LOGGED, step=3, prefix=prefix)
    found = points(reader)
    seconds = _seconds(found)
    assert set(seconds) == set(EXPECTED)  # aggregates never become categories
    for i, (category, (measurement, window, bucket)) in enumerate(EXPECTED.items()):
        point = seconds[category]
        assert (point.kind, point.unit, point.value) == ("gauge", "s", float(i + 1))
        assert point.attributes == {
            "rl.efficiency.category": category,
            "rl.efficiency.measurement": measurement,
            "rl.efficiency.window": window,
            "rl.bucket": bucket,
        }
    [(value, attributes)] = _pct(found)
    assert value == 90.0
    assert attributes == {"rl.efficiency.measurement": "wall_clock", "rl.efficiency.window": "step"}
    assert [p.unit for p in found if p.name == "rl.efficiency.pct"] == ["%"]


@pytest.mark.parametrize(("flag", "window"), [(1.0, "step"), (0.0, "run"), (None, "run")])
def test_pct_window_follows_what_the_caller_passed(
    exporting: Any, flag: float | None, window: str
) -> None:
    logger, reader = exporting
    logged: dict[str, Any] = {"efficiency/efficiency_pct": 42.0}
    if flag is not None:
        logged["efficiency/efficiency_pct_is_per_step"] = flag
    logger.log_metrics(logged, step=1, prefix="")
    assert _pct(points(reader)) == [
        (42.0, {"rl.efficiency.measurement": "wall_clock", "rl.efficiency.window": window})
    ]


def test_none_or_non_numeric_category_drops_only_itself(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_metrics(
        {
            "efficiency/idle/refit_bubble_s": None,
            "efficiency/idle/validation_s": "slow",
            "efficiency/init/total_s": 12.0,
            "efficiency/idle/made_up_s": 1.0,
        },
        step=1,
        prefix="",
    )
    assert {c: p.value for c, p in _seconds(points(reader)).items()} == {"init/total": 12.0}


def test_thread_seconds_can_exceed_the_wall_time_and_stay_labelled(exporting: Any) -> None:
    # Eight threads backing off 10 s in the same 10 s window: 80 thread-seconds, not 10.
    logger, reader = exporting
    collector = CollectorTimer()
    workers = [
        threading.Thread(target=collector.record, args=("idle/buffer_full_backoff", 10.0))
        for _ in range(8)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    logger.log_efficiency_summary(
        EfficiencySummary(seconds=collector.snapshot(), step_wall_time_s=10.0)
    )
    found = points(reader)
    point = _seconds(found)["idle/buffer_full_backoff"]
    assert point.value == 80.0
    assert point.attributes["rl.efficiency.measurement"] == "thread_seconds"
    assert point.attributes["rl.efficiency.window"] == "run"
    # ... and it does not count against the step's productive share.
    assert _pct(found)[0][0] == 100.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_timers_produce_the_summary_and_the_step_pct(exporting: Any) -> None:
    logger, reader = exporting
    clock = FakeClock()
    driver, collector = EfficiencyTimer(clock), CollectorTimer(clock)
    with driver.time("init/total"):
        clock.now += 50.0
    driver.start_step()
    with driver.time("idle/refit_bubble"):
        clock.now += 2.0
    with collector.time("idle/refit_event_wait"):
        clock.now += 3.0
    driver.record("idle/validation", 1.0)
    clock.now += 5.0  # productive work
    summary = driver.step_summary(collector)
    assert summary.seconds == {
        "init/total": 50.0,
        "idle/refit_bubble": 2.0,
        "idle/validation": 1.0,
        "idle/refit_event_wait": 3.0,
    }
    assert (summary.step_wall_time_s, summary.run_elapsed_s) == (10.0, 60.0)
    logger.log_efficiency_summary(summary, step=1)
    # Numerator: the step-window categories only (2 + 1 of 10 s); init/total and the
    # collector's clock are excluded.
    assert _pct(points(reader)) == [
        (70.0, {"rl.efficiency.measurement": "wall_clock", "rl.efficiency.window": "step"})
    ]

    # Next step: per-step categories were reset, init/total is republished, collector
    # values are cumulative.
    with collector.time("idle/refit_event_wait"):
        clock.now += 1.0
    second = driver.step_summary(collector)
    assert second.seconds == {"init/total": 50.0, "idle/refit_event_wait": 4.0}
    assert second.step_wall_time_s == 1.0


def test_timers_refuse_a_category_of_the_other_clock() -> None:
    with pytest.raises(ValueError, match="EfficiencyTimer times"):
        EfficiencyTimer().record("idle/buffer_full_backoff", 1.0)
    with pytest.raises(ValueError, match="CollectorTimer times"):
        CollectorTimer().record("idle/refit_bubble", 1.0)


@pytest.mark.parametrize(
    ("summary", "expected"),
    [
        (EfficiencySummary(seconds={"idle/validation": 5.0}, run_elapsed_s=50.0), (90.0, "run")),
        (EfficiencySummary(seconds={"init/total": 60.0}, run_elapsed_s=50.0), (0.0, "run")),
        (EfficiencySummary(seconds={"init/total": 60.0}, step_wall_time_s=10.0), (100.0, "step")),
        (EfficiencySummary(step_wall_time_s=0.0), (100.0, "step")),
        (EfficiencySummary(seconds={"idle/validation": 5.0}), None),
    ],
)
def test_efficiency_pct(summary: EfficiencySummary, expected: Any) -> None:
    assert efficiency_pct(summary) == expected


def test_a_step_window_category_absent_from_a_step_reports_zero(exporting: Any) -> None:
    """The driver's timer resets every step: a category timed in step 1 and absent in step 2
    spent no time in step 2. Reporting step 1's 0.5 again would disagree with step 2's own
    pct and count the 0.5 s twice when summed across steps."""
    logger, reader = exporting
    logger.log_metrics(
        {"efficiency/idle/validation_s": 0.5, "efficiency/step_wall_time_s": 10.0}, step=1
    )
    logger.log_metrics(
        {"efficiency/idle/buffer_starvation_s": 1.0, "efficiency/step_wall_time_s": 10.0}, step=2
    )
    found = points(reader)
    seconds = {category: p.value for category, p in _seconds(found).items()}
    assert seconds == {
        "idle/validation": 0.0,
        "idle/buffer_starvation": 1.0,
        "idle/refit_bubble": 0.0,
    }
    [(pct, _attributes)] = _pct(found)
    assert pct == 90.0  # 1.0 s of 10 idle: the same step the seconds describe


@pytest.mark.parametrize("unmeasured", [None, float("nan"), "n/a"])
def test_a_category_logged_without_a_number_is_a_gap_not_a_zero(
    exporting: Any, unmeasured: Any
) -> None:
    """Before: exported 0.0 for the step, over step 1's good value — a plausible-looking zero
    where the spec wants a visible gap (the tee skips None and what is no number) — and a
    step pct computed as if it were 0. Absent, it is still 0 (the step's timer spent nothing
    in it); given without a number, the step's seconds for it are unknown, and so is the pct
    computed from them."""
    logger, reader = exporting
    wall = {"efficiency/step_wall_time_s": 10.0, "efficiency/idle/buffer_starvation_s": 2.0}
    logger.log_metrics({**wall, "efficiency/idle/refit_bubble_s": 1.0}, step=1)
    found = points(reader)
    assert _seconds(found)["idle/refit_bubble"].value == 1.0
    assert [value for value, _ in _pct(found)] == [70.0]
    logger.log_metrics({**wall, "efficiency/idle/refit_bubble_s": unmeasured}, step=2)
    found = points(reader)
    seconds = {category: p.value for category, p in _seconds(found).items()}
    assert "idle/refit_bubble" not in seconds
    assert seconds["idle/buffer_starvation"] == 2.0 and seconds["idle/validation"] == 0.0
    assert _pct(found) == []
    logger.log_metrics(wall, step=3)
    found = points(reader)
    assert _seconds(found)["idle/refit_bubble"].value == 0.0
    assert [value for value, _ in _pct(found)] == [80.0]


def test_a_step_without_a_pct_leaves_none_of_the_last_step_s(exporting: Any) -> None:
    """Before: step 1's per-step pct (70) was still exported at step 2, whose dict gave
    neither a pct nor the wall time to compute one: the last step's value, as this one's."""
    logger, reader = exporting
    categories = {"efficiency/idle/buffer_starvation_s": 2.0, "efficiency/idle/refit_bubble_s": 1.0}
    logger.log_metrics({**categories, "efficiency/step_wall_time_s": 10.0}, step=1)
    assert [value for value, _ in _pct(points(reader))] == [70.0]
    logger.log_metrics(categories, step=2)
    found = points(reader)
    assert _pct(found) == []
    assert _seconds(found)["idle/refit_bubble"].value == 1.0


def test_the_timers_report_zero_for_a_category_not_timed_in_a_step(exporting: Any) -> None:
    logger, reader = exporting
    now = [0.0]
    driver = EfficiencyTimer(clock=lambda: now[0])
    driver.record("idle/validation", 0.5)
    now[0] = 10.0
    logger.log_efficiency_summary(driver.step_summary(), step=1)
    now[0] = 20.0
    logger.log_efficiency_summary(driver.step_summary(), step=2)
    assert _seconds(points(reader))["idle/validation"].value == 0.0


@pytest.mark.parametrize("unmeasured", [float("nan"), float("inf"), -5.0, "n/a"])
def test_a_typed_summary_s_category_without_seconds_is_a_gap_not_a_zero_or_negative(
    exporting: Any, unmeasured: Any
) -> None:
    """Before: ``EfficiencySummary(seconds={"idle/refit_bubble": nan})`` dropped the field and
    the step's zero-fill exported 0.0 for it (a plausible zero), and -5.0 was exported as
    negative idle seconds with a step pct of 150%. Now such a category is unknown for the
    step, as when a logged dict gives it without a number: a gap, and no pct from it."""
    logger, reader = exporting
    logger.log_efficiency_summary(
        EfficiencySummary(
            seconds={"idle/buffer_starvation": 2.0, "idle/refit_bubble": unmeasured},
            step_wall_time_s=10.0,
        ),
        step=1,
    )
    found = points(reader)
    seconds = {category: p.value for category, p in _seconds(found).items()}
    assert seconds == {"idle/buffer_starvation": 2.0, "idle/validation": 0.0}
    assert _pct(found) == []


@pytest.mark.parametrize("bad", [None, "1.5", float("nan"), float("inf"), -3.0, 2**2000])
def test_seconds_recorded_that_are_no_duration_drop_only_themselves(
    exporting: Any, bad: Any, caplog: Any
) -> None:
    """Before: ``CollectorTimer.record(category, None)`` (or text, an int past a float) was
    taken, and the next ``step_summary`` raised TypeError / OverflowError into the loop; a NaN
    or negative value, added to the never-reset run totals, made the category unknown (NaN)
    or wrong for the rest of the run, as ``rlmetrics.account`` did. Now such a value is
    dropped, said once; the seconds around it still add up."""
    import logging

    import rlmetrics

    logger, reader = exporting
    driver, collector = EfficiencyTimer(), CollectorTimer()
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        collector.record("idle/buffer_full_backoff", 1.0)
        collector.record("idle/buffer_full_backoff", bad)
        driver.record("idle/refit_bubble", bad)
        rlmetrics.account("wasted/failed_trajectory", 2.0)
        rlmetrics.account("wasted/failed_trajectory", bad)
        summary = driver.step_summary(collector)
        with rlmetrics.step(1, logger=logger):
            pass
    assert summary.seconds["idle/buffer_full_backoff"] == 1.0
    assert "idle/refit_bubble" not in summary.seconds  # its one recording was no duration
    assert _seconds(points(reader))["wasted/failed_trajectory"].value == 2.0
    assert "no number of seconds" in caplog.text


def test_a_negative_wall_time_computes_no_pct(exporting: Any) -> None:
    """Before: efficiency/step_wall_time_s of -1 (a clock read the wrong way) exported a step
    pct of 100%, as for a step of no time. A wall time below 0 is now no wall time: no pct is
    computed from it (the categories are still exported)."""
    logger, reader = exporting
    logger.log_metrics(
        {"efficiency/idle/refit_bubble_s": 2.0, "efficiency/step_wall_time_s": -1.0}, step=1
    )
    found = points(reader)
    assert _pct(found) == []
    assert _seconds(found)["idle/refit_bubble"].value == 2.0


def test_step_categories_timed_at_once_past_the_step_are_said_not_read_as_0(
    exporting: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Three asyncio tasks of one step wait at once, each in another step-window category:
    their seconds add up (3 s) past the step's wall time (1 s). Before, the step's pct was
    clamped to 0 %, silently: a run's goodput read 0 where the driver had in fact waited the
    whole step, or any share of it. Now the pct is unknown for that step (no point) and the
    reason said once. (Overlapping phases of *one* category count once:
    tests/tracing/test_tracing_overlap.py.)"""
    import asyncio

    import rlmetrics

    logger, reader = exporting
    now = [1_700_000_000.0]
    categories = ("idle/buffer_starvation", "idle/refit_bubble", "idle/validation")

    async def wait(category: str, ready: asyncio.Event) -> None:
        with rlmetrics.phase(category):
            await ready.wait()

    async def step() -> None:
        ready = asyncio.Event()
        async with rlmetrics.step(1, logger=logger):
            waits = [asyncio.create_task(wait(c, ready)) for c in categories]
            await asyncio.sleep(0)  # each task is in its phase
            now[0] += 1.0
            ready.set()
            await asyncio.gather(*waits)

    with rlmetrics.run(clock=lambda: now[0]):
        asyncio.run(step())
    found = points(reader)
    assert {c: _seconds(found)[c].value for c in categories} == dict.fromkeys(categories, 1.0)
    assert _pct(found) == []
    said = [r.getMessage() for r in caplog.records if "more than the step's" in r.getMessage()]
    assert len(said) == 1
    assert "idle/buffer_starvation" in said[0] and "different categories" in said[0]
