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
