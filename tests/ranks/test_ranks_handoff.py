"""The hand-off from the loop's thread to the merger's: jobs run in order on a thread of its
own; a full queue waits once, bounded, then says no; a drain is bounded and hands back what
it will not run."""

from __future__ import annotations

import threading
from typing import Any

from rlmetrics.ranks import Handoff
from rlmetrics.testing import wait_until


def test_jobs_run_in_the_order_they_were_handed_over_on_the_handoff_s_thread() -> None:
    done: list[tuple[int, str]] = []
    handoff = Handoff(lambda job: done.append((job, threading.current_thread().name)), "t1")
    assert all(handoff.put(job) for job in range(200))
    assert handoff.drain(10.0) == []
    assert done == [(job, "t1") for job in range(200)]
    assert not handoff.thread.is_alive()


def test_a_full_queue_waits_once_then_says_no_and_a_drain_hands_back_what_is_left() -> None:
    release = threading.Event()
    done: list[Any] = []

    def work(job: Any) -> None:
        release.wait(30)
        done.append(job)

    handoff = Handoff(work, "t2", max_pending=2, full_wait_s=0.05)
    assert handoff.put(0)
    wait_until(lambda: handoff.pending == 1 and handoff._queue.qsize() == 0, 10, "job 0 taken")
    assert handoff.put(1) and handoff.put(2)  # queued behind the running one
    assert not handoff.put(3)  # full after the wait
    assert not handoff.put(4)  # still full: no second wait
    assert handoff.pending == 3
    left = handoff.drain(0.05)  # job 0 is still running: bounded, and 1 and 2 not started
    assert left == [1, 2]
    assert not handoff.put(5)  # closed
    release.set()
    handoff.thread.join(10)
    assert not handoff.thread.is_alive()
    assert done == [0]


def test_a_job_that_raises_does_not_stop_the_thread() -> None:
    done: list[int] = []

    def work(job: int) -> None:
        if job == 1:
            raise RuntimeError("boom")
        done.append(job)

    handoff = Handoff(work, "t3")
    for job in range(3):
        handoff.put(job)
    assert handoff.drain(10.0) == []
    assert done == [0, 2]


def test_pending_counts_every_job_when_two_threads_store_their_counts_out_of_order() -> None:
    """Loggers on two threads: the first draws its number, the second draws, stores and
    queues before the first stores. ``pending`` still counts both jobs. White box: the
    interleaving is forced through the count the puts draw from (``_count``), the one place
    it can be, since it is a race of two bytecodes."""
    gate = threading.Event()
    handoff = Handoff(lambda job: gate.wait(30), "t4")
    drawn, stored = threading.Event(), threading.Event()
    count = handoff._count

    class HeldAfterDrawing:
        """The first thread's draw, held until the second thread's put is done."""

        def __next__(self) -> int:
            number = next(count)
            if threading.current_thread().name == "first":
                drawn.set()
                stored.wait(30)
            return number

    handoff._count = HeldAfterDrawing()  # type: ignore[assignment]
    first = threading.Thread(target=handoff.put, args=("a",), name="first")
    try:
        first.start()
        assert drawn.wait(30)
        assert handoff.put("b")  # draws 2, stores it and queues, while the first holds 1
        stored.set()
        first.join(30)
        assert handoff.pending == 2
    finally:
        stored.set()
        gate.set()
        handoff.drain(10.0)
