"""The rendezvous rules of the Ray reducer's buffer, as plain Python (no Ray): a step is
released when every expected rank pushed it, or once it waited ``late_after_s`` (a clock
given here stands in for time); a rank that missed a step is not waited for again until it
pushes; steps leave in step order; a late row is reported, not merged."""

from __future__ import annotations

import asyncio

from rlmetrics_ray.step_buffer import StepBuffer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_step_leaves_when_every_rank_pushed_it_and_not_before() -> None:
    buffer = StepBuffer(world_size=2, late_after_s=10.0, clock=Clock())
    buffer.push(0, "train", 0, "train", {"x": 1.0})
    assert buffer.release().gathered == []
    buffer.push(1, "train", 0, "train", {"x": 2.0})
    (step,) = buffer.release().gathered
    assert (step.step, step.rows, step.missing) == (0, {0: {"x": 1.0}, 1: {"x": 2.0}}, ())


def test_a_missing_rank_costs_one_wait_then_is_not_waited_for_until_it_pushes() -> None:
    clock = Clock()
    buffer = StepBuffer(world_size=3, late_after_s=5.0, clock=clock)
    for rank in (0, 1):
        buffer.push(rank, "train", 0, "train", {"x": 1.0})
    clock.now = 4.9
    assert buffer.release().gathered == []
    clock.now = 5.0
    (step0,) = buffer.release().gathered
    assert step0.missing == (2,)
    # Rank 2 is absent now: the next step leaves as soon as ranks 0 and 1 pushed it.
    for rank in (0, 1):
        buffer.push(rank, "train", 1, "train", {"x": 1.0})
    (step1,) = buffer.release().gathered
    assert step1.missing == (2,)
    # Its row of step 0 comes late: reported, not merged; it is waited for again.
    buffer.push(2, "train", 0, "train", {"x": 9.0})
    taken = buffer.release()
    assert taken.late == [(2, "train", 0)]
    assert buffer.expected() == {0, 1, 2}


def test_steps_of_a_stream_leave_in_step_order() -> None:
    clock = Clock()
    buffer = StepBuffer(world_size=2, late_after_s=5.0, clock=clock)
    buffer.push(0, "train", 0, "train", {"x": 1.0})
    buffer.push(0, "train", 1, "train", {"x": 1.0})
    buffer.push(1, "train", 1, "train", {"x": 1.0})
    assert buffer.release().gathered == []  # step 1 is complete, but step 0 is not yet
    buffer.push(1, "train", 0, "train", {"x": 1.0})
    assert [g.step for g in buffer.release().gathered] == [0, 1]


def test_without_a_world_size_the_joined_ranks_are_expected() -> None:
    buffer = StepBuffer(late_after_s=5.0, clock=Clock())
    assert [buffer.join(), buffer.join(), buffer.join(5)] == [0, 1, 5]
    assert buffer.join(world_size=6) == 2 and buffer.world_size == 6
    assert buffer.expected() == set(range(6))


def test_take_waits_for_the_step_to_complete_and_flush_releases_what_is_pending() -> None:
    async def scenario() -> tuple[list[int], list[tuple[int, ...]]]:
        buffer = StepBuffer(world_size=2, late_after_s=60.0)
        buffer.push(0, "train", 0, "train", {"x": 1.0})
        waiting = asyncio.ensure_future(buffer.take(wait_s=30.0))
        await asyncio.sleep(0)
        buffer.push(1, "train", 0, "train", {"x": 2.0})
        first = await asyncio.wait_for(waiting, 30.0)
        buffer.push(0, "train", 1, "train", {"x": 1.0})
        flushed = await buffer.take(wait_s=30.0, flush=True)
        return [g.step for g in first.gathered], [g.missing for g in flushed.gathered]

    steps, missing = asyncio.run(scenario())
    assert steps == [0]
    assert missing == [(1,)]


def test_a_worker_learns_the_drivers_run_even_when_it_asks_first() -> None:
    """The driver names its run as its Logger binds; a worker that asks before that answer
    reached the buffer (the two race once the buffer is alive) waits for it."""

    async def scenario() -> tuple[object, object]:
        buffer = StepBuffer(late_after_s=60.0)
        asking = asyncio.ensure_future(buffer.run(wait_s=30.0))
        await asyncio.sleep(0)
        buffer.set_run("run-42", True)
        return await asyncio.wait_for(asking, 30.0), await buffer.run(wait_s=0.0)

    assert asyncio.run(scenario()) == (("run-42", True), ("run-42", True))


def test_a_buffer_whose_driver_named_no_run_answers_none_after_the_wait() -> None:
    assert asyncio.run(StepBuffer().run(wait_s=0.01)) is None


def test_a_rank_that_left_is_not_waited_for_and_its_number_is_given_out_again() -> None:
    """Before: a worker whose Logger finished (a task that logs one step) stayed a joined
    rank, so every later step waited late_after_s for it and named it missing, and each new
    task took a new number."""
    buffer = StepBuffer(late_after_s=60.0, clock=Clock())
    assert buffer.join() == 0
    buffer.push(0, "train", 0, "train", {"x": 1.0})
    assert [g.step for g in buffer.release().gathered] == [0]
    buffer.leave(0)
    assert buffer.join() == 0  # the next task's Logger
    buffer.push(0, "train", 1, "train", {"x": 2.0})
    (step,) = buffer.release().gathered
    assert (step.step, step.missing) == (1, ())


def test_a_rank_leaving_completes_the_step_only_it_was_awaited_for() -> None:
    buffer = StepBuffer(late_after_s=60.0, clock=Clock())
    assert [buffer.join(), buffer.join()] == [0, 1]
    buffer.push(0, "train", 0, "train", {"x": 1.0})
    assert buffer.release().gathered == []
    buffer.leave(1)  # finished without logging step 0
    (step,) = buffer.release().gathered
    assert (step.step, step.missing) == (0, ())


def test_a_rank_two_workers_hold_at_once_is_reported_to_the_driver() -> None:
    """Ray passes the driver's environment to its workers: a RANK the driver was launched with
    makes every worker the same rank, whose rows then overwrite each other's."""
    buffer = StepBuffer(late_after_s=60.0, clock=Clock())
    assert [buffer.join(0), buffer.join(0)] == [0, 0]
    assert buffer.release().joined_twice == [0]
    assert buffer.release().joined_twice == []
    buffer.leave(0)
    buffer.leave(0)
    assert buffer.join(0) == 0  # a worker after the others finished: no clash
    assert buffer.release().joined_twice == []


def test_a_late_row_that_arrives_during_a_long_poll_is_handed_over() -> None:
    """Before: a row of a step not yet complete woke the poll, whose release took the late row
    along with nothing to log; the poll went on waiting and its next release replaced that
    one, so the late row was never reported."""

    async def scenario() -> list[tuple[int, str, int]]:
        buffer = StepBuffer(world_size=2, late_after_s=60.0)
        for rank in (0, 1):
            buffer.push(rank, "train", 0, "train", {"x": 1.0})
        assert [g.step for g in (await buffer.take(wait_s=0.0)).gathered] == [0]
        waiting = asyncio.ensure_future(buffer.take(wait_s=5.0))
        await asyncio.sleep(0)
        buffer.push(1, "train", 0, "train", {"x": 2.0})  # step 0 again: late
        buffer.push(0, "train", 1, "train", {"x": 3.0})  # step 1, rank 1 still to come
        return (await asyncio.wait_for(waiting, 30.0)).late

    assert asyncio.run(scenario()) == [(1, "train", 0)]


def test_steps_pushed_out_of_order_leave_in_step_order() -> None:
    """A Ray async actor does not keep one caller's calls in order: a rank's push of step 2
    can reach the buffer before its push of step 1. Before, the step that arrived first left
    first, so with a rank gone (each step waiting out its bound) the tracker got steps 0, 2, 1
    (failed a real-cluster test in CI); now the lowest pending step of a stream leaves first."""
    clock = Clock()
    buffer = StepBuffer(world_size=3, late_after_s=5.0, clock=clock)
    for rank in (0, 1, 2):
        buffer.push(rank, "train", 0, "train", {"x": 1.0})
    assert [g.step for g in buffer.release().gathered] == [0]
    clock.now = 1.0
    buffer.push(0, "train", 2, "train", {"x": 1.0})  # step 2's first row arrives first
    clock.now = 2.0
    buffer.push(0, "train", 1, "train", {"x": 1.0})
    buffer.push(1, "train", 2, "train", {"x": 1.0})
    buffer.push(1, "train", 1, "train", {"x": 1.0})
    clock.now = 6.5  # step 2 has waited out its bound for rank 2, step 1 not yet
    assert buffer.release().gathered == []
    clock.now = 7.0
    assert [g.step for g in buffer.release().gathered] == [1, 2]


def test_a_step_every_rank_of_which_exports_its_own_values_says_so() -> None:
    """Workers given ``ray_rank(export_own=True)`` export their own series, which the recording
    rules merge by run id: the driver must then not export the merged row as well, so the
    step says whether every rank that gave it exports its own."""
    buffer = StepBuffer(world_size=2, late_after_s=10.0, clock=Clock())
    for step, exported in ((0, (True, True)), (1, (True, False)), (2, (False, False))):
        for rank in range(2):
            buffer.push(rank, "train", step, "train", {"x": 1.0}, exported[rank])
    assert [(s.step, s.exported) for s in buffer.release().gathered] == [
        (0, True),
        (1, False),
        (2, False),
    ]
