"""resources_operation with real asyncio semaphores: queueing, ok, error, timeout, cancellation
(inside the limit and while queued), a crashed process-pool worker, and the outcome a caller
sets."""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import subprocess
import sys
import threading
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import pytest
from gym_support_client import eventually, find, run, total, value_of
from gym_support_client_workers import crash_worker, square_worker
from rlmetrics_gym.driver import RESIDENT, driver_rollout
from rlmetrics_gym.resources import (
    ACTIVE,
    DURATION,
    QUEUE_DURATION,
    QUEUED,
    outcome_from_exception,
    resources_operation,
)

from rlmetrics.testing import isolated_state, points

OPERATION = "nemo.gym.resources.operation"
EXECUTOR = "nemo.gym.resources.executor"
OUTCOME = "nemo.gym.resources.operation.outcome"
VERIFY = {OPERATION: "verify", EXECUTOR: "subprocess"}


def outcomes(reader: Any) -> dict[str, int]:
    return {p.attributes[OUTCOME]: p.count or 0 for p in find(points(reader), DURATION)}


def test_queued_and_active_while_operations_wait_for_the_limit(telemetry: Any) -> None:
    _, reader = telemetry

    async def main() -> None:
        semaphore = asyncio.Semaphore(1)
        release = asyncio.Event()
        entered: list[int] = []

        async def operation(index: int) -> None:
            async with resources_operation(semaphore, operation="verify", executor="subprocess"):
                entered.append(index)
                await release.wait()

        tasks = [asyncio.create_task(operation(i)) for i in range(3)]
        await eventually(lambda: value_of(reader, QUEUED, **VERIFY) == 2, "two queued")
        assert entered == [0]
        assert value_of(reader, ACTIVE, **VERIFY) == 1
        release.set()
        await asyncio.gather(*tasks)
        assert entered == [0, 1, 2]
        assert not semaphore.locked()

    run(main())
    found = points(reader)
    (queued,) = find(found, QUEUED, **VERIFY)
    assert (queued.value, queued.unit, queued.kind, queued.monotonic) == (
        0,
        "{operation}",
        "sum",
        False,
    )
    assert value_of(reader, ACTIVE, **VERIFY) == 0
    count, waited = total(found, QUEUE_DURATION, **VERIFY)
    assert count == 3 and waited > 0  # the second and third waited for the first
    (ran,) = find(found, DURATION, **VERIFY)
    assert (ran.count, ran.unit, ran.attributes) == (3, "ms", {**VERIFY, OUTCOME: "ok"})


def test_outcomes_from_the_exception_that_left_the_block(telemetry: Any) -> None:
    _, reader = telemetry

    async def main() -> None:
        semaphore = asyncio.Semaphore(2)
        with pytest.raises(ValueError):
            async with resources_operation(semaphore, operation="judge", executor="inline"):
                raise ValueError("the judge answered garbage")
        with pytest.raises(asyncio.TimeoutError):
            async with resources_operation(semaphore, operation="judge", executor="inline"):
                await asyncio.wait_for(asyncio.Event().wait(), timeout=0.01)
        # The caller's outcome wins over the exit: a verifier that reported its own timeout.
        async with resources_operation(semaphore, operation="judge", executor="inline") as op:
            op.outcome = "timeout"
        # An outcome outside the set is ignored (with a warning): the exit decides.
        async with resources_operation(semaphore, operation="judge", executor="inline") as op:
            op.outcome = "slow"
        assert not semaphore.locked()  # every path released its slot
        async with semaphore, semaphore:  # both slots are free again
            pass

    run(main())
    assert outcomes(reader) == {"error": 1, "timeout": 2, "ok": 1}


def test_cancelled_inside_the_limit_and_while_queued(telemetry: Any) -> None:
    _, reader = telemetry

    async def main() -> None:
        semaphore = asyncio.Semaphore(1)
        running = asyncio.Event()

        async def hold() -> None:
            async with resources_operation(semaphore, operation="tool", executor="thread"):
                running.set()
                await asyncio.Event().wait()

        async def queued() -> None:
            async with resources_operation(semaphore, operation="tool", executor="thread"):
                raise AssertionError("never admitted")

        holder = asyncio.create_task(hold())
        await running.wait()
        waiter = asyncio.create_task(queued())
        tool = {OPERATION: "tool", EXECUTOR: "thread"}
        await eventually(lambda: value_of(reader, QUEUED, **tool) == 1, "one queued")
        waiter.cancel()  # leaves the queue: never ran, no duration, no slot taken
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert value_of(reader, QUEUED, **tool) == 0
        holder.cancel()
        with pytest.raises(asyncio.CancelledError):
            await holder
        assert not semaphore.locked()

    run(main())
    found = points(reader)
    assert outcomes(reader) == {"cancelled": 1}
    assert total(found, QUEUE_DURATION)[0] == 1  # only the operation that got the slot
    assert value_of(reader, ACTIVE, **{OPERATION: "tool", EXECUTOR: "thread"}) == 0


def test_a_worker_process_that_dies_is_crashed(telemetry: Any) -> None:
    _, reader = telemetry

    async def main() -> None:
        semaphore = asyncio.Semaphore(1)
        loop = asyncio.get_running_loop()
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
            async with resources_operation(semaphore, operation="verify", executor="process"):
                assert await loop.run_in_executor(pool, square_worker, 7) == 49
            with pytest.raises(BrokenProcessPool):
                async with resources_operation(semaphore, operation="verify", executor="process"):
                    await loop.run_in_executor(pool, crash_worker, 1)
        # A verifier subprocess killed by a signal, reported the subprocess way.
        with pytest.raises(subprocess.CalledProcessError):
            async with resources_operation(semaphore, operation="verify", executor="subprocess"):
                child = await asyncio.create_subprocess_exec(
                    sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
                )
                code = await child.wait()
                raise subprocess.CalledProcessError(code, "verifier")
        assert not semaphore.locked()

    run(main(), timeout_s=60)
    by_executor = {
        (p.attributes[EXECUTOR], p.attributes[OUTCOME]): p.count
        for p in find(points(reader), DURATION)
    }
    assert by_executor == {
        ("process", "ok"): 1,
        ("process", "crashed"): 1,
        ("subprocess", "crashed"): 1,
    }


def test_other_values_are_counted_as_other_and_none_means_no_limit(telemetry: Any) -> None:
    _, reader = telemetry

    async def main() -> None:
        async with resources_operation(None, operation="sandbox", executor="k8s") as op:
            assert (op.operation, op.executor) == ("other", "other")

    run(main())
    found = points(reader)
    (ran,) = find(found, DURATION)
    assert ran.attributes == {OPERATION: "other", EXECUTOR: "other", OUTCOME: "ok"}
    assert find(found, QUEUE_DURATION) == []  # no limit, no wait


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (None, "ok"),
        (ValueError(), "error"),
        (asyncio.CancelledError(), "cancelled"),
        (TimeoutError(), "timeout"),
        (asyncio.TimeoutError(), "timeout"),
        (concurrent.futures.TimeoutError(), "timeout"),
        (subprocess.TimeoutExpired("v", 1), "timeout"),
        (BrokenProcessPool(), "crashed"),
        (subprocess.CalledProcessError(-9, "v"), "crashed"),
        (subprocess.CalledProcessError(1, "v"), "error"),
        (KeyboardInterrupt(), "crashed"),
        (MemoryError(), "error"),
    ],
)
def test_outcome_from_exception(error: BaseException | None, outcome: str) -> None:
    assert outcome_from_exception(error) == outcome


def test_the_semaphore_works_the_same_without_telemetry() -> None:
    async def main() -> list[int]:
        semaphore = asyncio.Semaphore(1)
        order: list[int] = []

        async def operation(index: int) -> None:
            async with resources_operation(semaphore, operation="verify"):
                order.append(index)
                await asyncio.sleep(0)
                order.append(index)

        await asyncio.gather(*(operation(i) for i in range(3)))
        assert not semaphore.locked()
        return order

    with isolated_state():
        assert run(main()) == [0, 0, 1, 1, 2, 2]  # never two inside the limit at once


@pytest.mark.parametrize("enter", ["resources_operation", "driver_rollout"])
def test_a_thread_semaphore_is_refused_loudly_and_keeps_its_permit(
    telemetry: Any, enter: str
) -> None:
    """A ``threading.Semaphore`` acquires synchronously: awaiting what it returns fails after
    it took a permit, which nothing gave back, so the next operations found it taken and
    blocked the event loop itself. It is a mistake to say, with the permit given back."""
    _, reader = telemetry
    semaphore = threading.Semaphore(1)

    async def main() -> None:
        block = (
            resources_operation(semaphore, operation="verify")  # type: ignore[arg-type]
            if enter == "resources_operation"
            else driver_rollout(semaphore)  # type: ignore[arg-type]
        )
        async with block:
            pass

    with pytest.raises(TypeError, match="asyncio"):
        run(main())
    assert semaphore.acquire(blocking=False)  # its one permit is free
    levels = [p.value for p in points(reader) if p.name in (QUEUED, ACTIVE, RESIDENT)]
    assert set(levels) <= {0}


@pytest.mark.parametrize("enter", ["resources_operation", "driver_rollout"])
@pytest.mark.parametrize("limit", [32, "8"], ids=["a count", "a count as text"])
def test_a_count_given_for_the_limit_is_refused_saying_to_make_one_semaphore(
    telemetry: Any, enter: str, limit: Any
) -> None:
    """The docs' ``driver_rollout(concurrency)`` reads like a number: given one, an opaque
    AttributeError ("'int' object has no attribute 'acquire'") reached the driver. The
    TypeError now says what to pass, and the levels stay at zero."""
    _, reader = telemetry

    async def main() -> None:
        block = (
            resources_operation(limit, operation="verify")
            if enter == "resources_operation"
            else driver_rollout(limit)
        )
        async with block:
            pass

    with pytest.raises(TypeError, match=r"asyncio\.Semaphore\(.*\) once"):
        run(main())
    levels = [p.value for p in points(reader) if p.name in (QUEUED, ACTIVE, RESIDENT)]
    assert set(levels) <= {0}
