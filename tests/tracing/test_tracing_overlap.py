"""A wall-clock category timed by overlapping phases (concurrent asyncio tasks, threads)
counts the time it covered, once: the union of the phases' intervals, never their sum. A
thread-seconds category still adds every phase up. Read back from the real SDK's in-memory
metric reader, on a simulated clock (no sleeps)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics.families.efficiency import EfficiencyTimer
from rlmetrics.testing import in_memory_telemetry, in_memory_tracing, points, span_records

STARVED = "idle/buffer_starvation"


class SimulatedClock:
    """Seconds that move only when the test says so. Its origin is small and its steps are
    binary fractions, so every reading in ns is exact and sums compare exactly."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


@contextlib.contextmanager
def telemetry(tracing: bool) -> Iterator[Any]:
    """The reader, with telemetry exporting metrics (and tracing to memory if asked)."""
    if tracing:
        with in_memory_tracing() as (_handle, reader, exporter):
            yield reader, exporter
    else:
        with in_memory_telemetry() as (_handle, reader):
            yield reader, None


def exported(reader: Any, name: str, **attributes: str) -> float:
    [point] = [
        p
        for p in points(reader)
        if p.name == name and all(p.attributes.get(k) == v for k, v in attributes.items())
    ]
    return float(point.value)


def category_seconds(reader: Any, category: str) -> float:
    return exported(reader, "rl.efficiency.seconds", **{"rl.efficiency.category": category})


def step_pct(reader: Any) -> float:
    return exported(reader, "rl.efficiency.pct", **{"rl.efficiency.window": "step"})


@pytest.mark.parametrize("tracing", [False, True], ids=["untraced", "traced"])
def test_concurrent_tasks_idle_together_count_the_wall_time_once(tracing: bool) -> None:
    """Before: 8 asyncio tasks each starved for the same 0.25 s of a 1 s step read 2 s of
    idle/buffer_starvation (and no pct). Now 0.25 s, and the step's pct is 75 %."""
    clock = SimulatedClock()

    async def loop(logger: rlmetrics.Logger) -> None:
        with rlmetrics.run(clock=clock):
            async with rlmetrics.step(1, logger=logger):
                entered, go = 0, asyncio.Event()
                all_in = asyncio.Event()

                async def starve() -> None:
                    nonlocal entered
                    async with rlmetrics.phase(STARVED):
                        entered += 1
                        if entered == 8:
                            all_in.set()
                        await go.wait()

                tasks = [asyncio.create_task(starve()) for _ in range(8)]
                await all_in.wait()
                clock.spend(0.25)
                go.set()
                await asyncio.gather(*tasks)
                clock.spend(0.75)

    with telemetry(tracing) as (reader, exporter):
        logger = rlmetrics.Logger(backends={})
        asyncio.run(loop(logger))
        assert category_seconds(reader, STARVED) == 0.25
        assert step_pct(reader) == 75.0
        if exporter is not None:  # each task's span is still its own 0.25 s
            spans = [s for s in span_records(exporter) if s.name == "rl.idle.buffer_starvation"]
            assert [s.seconds for s in spans] == [0.25] * 8


@pytest.mark.parametrize("tracing", [False, True], ids=["untraced", "traced"])
def test_threads_idle_together_count_the_wall_time_once_thread_seconds_add_up(
    tracing: bool,
) -> None:
    """4 threads, each in a wall-clock category (idle/refit_bubble) and a thread-seconds one
    (idle/buffer_full_backoff) over the same 0.5 s of a 1 s step: the wall-clock category
    covers 0.5 s; the thread-seconds category is 2 thread-seconds, as documented."""
    clock = SimulatedClock()
    inside, done = threading.Barrier(5), threading.Barrier(5)

    def worker() -> None:
        with rlmetrics.phase("idle/refit_bubble"), rlmetrics.phase("idle/buffer_full_backoff"):
            inside.wait(timeout=60)
            done.wait(timeout=60)  # the main thread moves the clock in between

    with telemetry(tracing) as (reader, _exporter):
        logger = rlmetrics.Logger(backends={})
        with rlmetrics.run(clock=clock), rlmetrics.step(1, logger=logger):
            threads = [threading.Thread(target=worker) for _ in range(4)]
            for thread in threads:
                thread.start()
            inside.wait(timeout=60)
            clock.spend(0.5)
            done.wait(timeout=60)
            for thread in threads:
                thread.join(timeout=60)
            clock.spend(0.5)
        assert category_seconds(reader, "idle/refit_bubble") == 0.5
        assert category_seconds(reader, "idle/buffer_full_backoff") == 2.0
        assert step_pct(reader) == 50.0


def test_the_driver_timers_overlapping_phases_count_once() -> None:
    """``EfficiencyTimer.time(category)`` from concurrent tasks is the same wall clock."""
    clock = SimulatedClock()
    driver = EfficiencyTimer(clock=clock)
    first, second = driver.time(STARVED), driver.time(STARVED)
    first.__enter__()
    clock.spend(1.0)
    second.__enter__()
    clock.spend(1.0)
    first.__exit__(None, None, None)
    clock.spend(1.0)
    second.__exit__(None, None, None)
    assert driver.step_summary().seconds[STARVED] == 3.0


class Summaries:
    """What a Logger's ``log_efficiency_summary`` is given, kept per step."""

    def __init__(self) -> None:
        self.seconds: dict[int, dict[str, float]] = {}

    def log_efficiency_summary(self, summary: Any, step: int) -> None:
        self.seconds[step] = dict(summary.seconds)


def union_measure(intervals: list[tuple[int, int]]) -> int:
    """The length of the union of ``intervals`` (ticks)."""
    covered, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            covered += end - start
            reach = end
        elif end > reach:
            covered += end - reach
            reach = end
    return covered


# Intervals on a grid of 1/64 s: readings in ns are exact, so equality is exact.
intervals = st.lists(
    st.tuples(st.integers(0, 200), st.integers(0, 40)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=12,
)


@given(wall=intervals, thread_seconds=intervals)
def test_a_wall_clock_category_is_the_measure_of_its_phases_union(
    wall: list[tuple[int, int]], thread_seconds: list[tuple[int, int]]
) -> None:
    """For any set of phases of a wall-clock category, entered and exited in time order (in
    any nesting), the step accounts the measure of their union; a thread-seconds category's
    phases add up."""
    tick = 1 / 64
    clock = SimulatedClock()
    summaries = Summaries()
    with (
        rlmetrics.run(clock=clock),
        rlmetrics.step(1, logger=summaries),  # type: ignore[arg-type]
    ):
        start = clock.now
        edges = []
        for i, (begin, end) in enumerate(wall):
            phase = rlmetrics.phase("idle/refit_bubble")
            edges += [(begin, 1, i, phase), (end, 0, i, phase)]
        for i, (begin, end) in enumerate(thread_seconds):
            phase = rlmetrics.phase("idle/buffer_full_backoff")
            edges += [(begin, 1, 100 + i, phase), (end, 0, 100 + i, phase)]
        # Enter before exit at one instant only for the same phase (its own 0-length span).
        for at, entering, _i, phase in sorted(edges, key=lambda e: (e[0], e[2], -e[1])):
            clock.now = start + at * tick
            if entering:
                phase.__enter__()
            else:
                phase.__exit__(None, None, None)
        clock.now = start + 250 * tick
    seconds = summaries.seconds[1]
    assert seconds.get("idle/refit_bubble", 0.0) == union_measure(wall) * tick
    backoff = sum(end - begin for begin, end in thread_seconds) * tick  # the run's, so far
    assert seconds.get("idle/buffer_full_backoff", 0.0) == backoff


def test_a_wall_clock_phase_open_across_a_step_end_splits_at_it() -> None:
    """A collector thread's refit wait begun in step 1 and ended in step 2: step 1 counts it
    up to its end, step 2 the rest; together they are the wait, once. A thread-seconds phase
    across the same end counts whole in the step it ends in, as before."""
    clock = SimulatedClock()
    summaries = Summaries()
    wall = rlmetrics.phase("idle/refit_bubble")
    backoff = rlmetrics.phase("idle/buffer_full_backoff")
    with rlmetrics.run(clock=clock):
        with rlmetrics.step(1, logger=summaries):  # type: ignore[arg-type]
            clock.spend(1.0)
            wall.__enter__()
            backoff.__enter__()
            clock.spend(2.0)
        with rlmetrics.step(2, logger=summaries):  # type: ignore[arg-type]
            clock.spend(0.5)
            wall.__exit__(None, None, None)
            backoff.__exit__(None, None, None)
            clock.spend(0.5)
    assert summaries.seconds[1].get("idle/refit_bubble") == 2.0
    assert summaries.seconds[2].get("idle/refit_bubble") == 0.5
    assert "idle/buffer_full_backoff" not in summaries.seconds[1]
    assert summaries.seconds[2]["idle/buffer_full_backoff"] == 2.5


@pytest.mark.parametrize("tracing", [False, True], ids=["untraced", "traced"])
def test_a_phase_begun_before_the_step_overlapping_one_inside_counts_once(tracing: bool) -> None:
    """A collector thread waits for the refit from before the step begins (no step open: its
    phase is the next step's) while the driver waits inside the step: the step's category is
    the union of the two, once. It read the overlap twice (4 s of a 3 s stretch)."""
    clock = SimulatedClock()
    waiting, step_open, ended = threading.Event(), threading.Event(), threading.Event()

    def collector() -> None:
        with rlmetrics.phase("idle/refit_bubble"):  # 1000 to 1003
            waiting.set()
            step_open.wait(timeout=60)
        ended.set()

    with telemetry(tracing) as (reader, _exporter):
        logger = rlmetrics.Logger(backends={})
        with rlmetrics.run(clock=clock):
            thread = threading.Thread(target=collector)
            thread.start()
            assert waiting.wait(timeout=60)
            clock.spend(1.0)
            with rlmetrics.step(1, logger=logger):  # 1001 to 1004
                clock.spend(0.5)
                with rlmetrics.phase("idle/refit_bubble"):  # 1001.5 to 1002.5
                    clock.spend(1.0)
                clock.spend(0.5)
                step_open.set()
                assert ended.wait(timeout=60)
                thread.join(timeout=60)
                clock.spend(1.0)
        assert category_seconds(reader, "idle/refit_bubble") == 3.0


_INTERVALS = st.lists(
    st.tuples(st.integers(0, 200), st.integers(0, 40)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=8,
)


@given(ours=_INTERVALS, theirs=_INTERVALS)
def test_two_accountings_stretches_overlap_by_what_both_cover(
    ours: list[tuple[int, int]], theirs: list[tuple[int, int]]
) -> None:
    """The step's own stretches and those timed outside it, each a union's, minus the time
    both cover: the union of all the phases."""
    from rlmetrics.tracing.accounting import PhaseSeconds, overlap_ns

    stretches: list[dict[str, list[tuple[int, int]]]] = []
    for phases in (ours, theirs):
        accounts = PhaseSeconds()
        wall = accounts.wall_clock("idle/refit_bubble")
        for start, end in phases:
            wall.starts.append(start)
            wall.ends.append(end)
        stretches.append({})
        accounts.take(now=250, stretches=stretches[-1])
    a, b = (s.get("idle/refit_bubble", []) for s in stretches)
    assert union_measure(a) + union_measure(b) - overlap_ns(a, b) == union_measure(ours + theirs)


def test_many_overlapping_phases_past_the_pending_bound_still_count_once() -> None:
    """More edges than a timer holds unread (so they are read in several batches), every
    phase overlapping the first: the category is still the first phase's length."""
    from rlmetrics.tracing.accounting import MAX_PENDING

    clock = SimulatedClock()
    driver = EfficiencyTimer(clock=clock)
    outer = driver.time(STARVED)
    outer.__enter__()
    for _ in range(MAX_PENDING):
        with driver.time(STARVED):
            clock.spend(1 / 1024)
    clock.spend(1.0)
    outer.__exit__(None, None, None)
    assert driver.step_summary().seconds[STARVED] == MAX_PENDING / 1024 + 1.0


@given(
    phases=st.lists(
        st.tuples(st.integers(0, 200), st.integers(0, 40)).map(lambda t: (t[0], t[0] + t[1])),
        max_size=12,
    ),
    reads=st.lists(st.tuples(st.integers(0, 250), st.booleans()), max_size=6),
)
def test_reading_between_phases_neither_loses_nor_counts_twice(
    phases: list[tuple[int, int]], reads: list[tuple[int, bool]]
) -> None:
    """A timer read (``take``, which starts from zero, ending the window at that moment or
    not) at any moment, however its phases overlap: the windows together are the measure of
    the phases' union, nothing lost at a read and nothing counted twice."""
    tick = 1 / 64
    clock = SimulatedClock()
    driver = EfficiencyTimer(clock=clock)
    start = clock.now
    events: list[tuple[int, int, Any]] = []
    for begin, end in phases:
        phase = driver.time(STARVED)
        events += [(begin, 1, phase), (end, 3, phase)]
    events += [(at, 2, split) for at, split in reads]  # at one instant: starts, reads, ends
    windows: list[float] = []
    for at, what, item in sorted(events, key=lambda e: (e[0], e[1])):
        clock.now = start + at * tick
        if what == 1:
            item.__enter__()
        elif what == 3:
            item.__exit__(None, None, None)
        else:
            now = round(clock.now * 1e9) if item else None
            windows.append(driver.take(now=now).get(STARVED, 0.0))
    windows.append(driver.take().get(STARVED, 0.0))
    assert sum(windows) == union_measure(phases) * tick


@pytest.mark.parametrize("tracing", [False, True], ids=["untraced", "traced"])
def test_a_clock_that_runs_back_in_a_phase_counts_it_as_no_time(
    tracing: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A simulation's clock that runs back inside a phase (run window: the collector loop's
    wall-clock wait, and a thread-seconds backoff). Before: the wall-clock category's
    accounting stayed open for good (no step reported it again), and the thread-seconds one
    added -5 s to the run's total, which every later summary then dropped with a warning
    about the event. Now that phase is 0 s, said once, and the later phases count."""
    import logging

    clock = SimulatedClock()
    summaries = Summaries()
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        in_memory_tracing() if tracing else contextlib.nullcontext(),
        rlmetrics.run(clock=clock),
    ):
        with rlmetrics.phase("idle/refit_event_wait"), rlmetrics.phase("idle/buffer_full_backoff"):
            clock.spend(-5.0)
        for n in (1, 2):
            with rlmetrics.step(n, logger=summaries):  # type: ignore[arg-type]
                with rlmetrics.phase("idle/refit_event_wait"):
                    clock.spend(1.0)
                with rlmetrics.phase("idle/buffer_full_backoff"):
                    clock.spend(0.5)
    assert summaries.seconds[1]["idle/refit_event_wait"] == 1.0
    assert summaries.seconds[2]["idle/refit_event_wait"] == 2.0
    assert summaries.seconds[2]["idle/buffer_full_backoff"] == 1.0
    said = [r.getMessage() for r in caplog.records if "ran back" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]


def test_a_driver_timers_wait_open_across_its_step_summary_splits_at_it() -> None:
    """The driver's timer, as ``rlmetrics.step``: a wall-clock wait still open when the
    step's summary is taken counts up to then in that step and the rest in the next. Before,
    it counted whole in the next step (3 s of a 2 s step there, and no pct)."""
    clock = SimulatedClock()
    driver = EfficiencyTimer(clock=clock)
    wait = driver.time(STARVED)
    clock.spend(1.0)
    wait.__enter__()
    clock.spend(2.0)
    first = driver.step_summary()
    clock.spend(1.0)
    wait.__exit__(None, None, None)
    clock.spend(1.0)
    second = driver.step_summary()
    assert (first.seconds[STARVED], first.step_wall_time_s) == (2.0, 3.0)
    assert (second.seconds[STARVED], second.step_wall_time_s) == (1.0, 2.0)


def test_a_first_phase_of_a_name_arriving_while_a_step_is_read_loses_nothing() -> None:
    """Another thread's first phase of a wall-clock name adds that name's readings without
    the lock, possibly while the step's accounting is being read (here: during the read of
    the other name). Before, the read raised "dictionary changed size during iteration" and
    the step's summary was lost; now both are read (the newcomer when it is due)."""
    from rlmetrics.tracing.accounting import PhaseSeconds, WallClock

    accounts = PhaseSeconds()

    class Interleaved(WallClock):
        __slots__ = ()

        def sweep(self, stretches: list[tuple[int, int]] | None = None) -> int | None:
            late = accounts.wall_clock("idle/validation")  # the other thread's first phase
            late.starts.append(10)
            late.ends.append(15)
            return super().sweep(stretches)

    accounts._walls["idle/refit_bubble"] = early = Interleaved()
    early.starts.append(0)
    early.ends.append(4)
    first = accounts.take(now=20)
    second = accounts.take(now=30)
    assert first.get("idle/refit_bubble") == 4e-9
    assert first.get("idle/validation", 0.0) + second.get("idle/validation", 0.0) == 5e-9
