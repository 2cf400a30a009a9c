"""A phase timed in an executor's thread, submitted by one of several asyncio tasks that each
run a step: ``asyncio.to_thread`` and ``loop.run_in_executor(pool, contextvars.copy_context().run,
fn)`` carry the submitting task's context, so the phase is that task's step's (its span's parent,
its seconds); a plain ``run_in_executor`` carries none, and the phase goes to the innermost open
step of the process, as docs/traces.md says. Read back from the real SDK's span exporter."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any

import pytest

import rlmetrics
from rlmetrics.testing import in_memory_tracing, span_records

STARVED = "idle/buffer_starvation"  # a step-window category


class Summaries:
    """What a Logger's ``log_efficiency_summary`` is given, kept per step."""

    def __init__(self) -> None:
        self.seconds: dict[int, dict[str, float]] = {}

    def log_efficiency_summary(self, summary: Any, step: int) -> None:
        self.seconds[step] = dict(summary.seconds)


def _plain(loop: asyncio.AbstractEventLoop, work: Callable[[], None]) -> Any:
    return loop.run_in_executor(None, work)


def _copied(loop: asyncio.AbstractEventLoop, work: Callable[[], None]) -> Any:
    return loop.run_in_executor(None, contextvars.copy_context().run, work)


def _to_thread(_loop: asyncio.AbstractEventLoop, work: Callable[[], None]) -> Any:
    return asyncio.to_thread(work)


@pytest.mark.parametrize(
    ("submit", "owner"),
    [(_plain, 2), (_copied, 1), (_to_thread, 1)],
    ids=["run_in_executor", "copy_context", "to_thread"],
)
def test_a_phase_in_an_executor_goes_to_the_step_whose_context_it_carries(
    submit: Callable[..., Any], owner: int
) -> None:
    summaries = Summaries()

    def starve() -> None:
        with rlmetrics.phase(STARVED):
            pass

    async def task(n: int, opened: asyncio.Event, go: asyncio.Event) -> None:
        async with rlmetrics.step(n, logger=summaries):  # type: ignore[arg-type]
            opened.set()
            await go.wait()
            if n == 1:  # step 2 is open too, and the innermost of the process
                await submit(asyncio.get_running_loop(), starve)

    async def main() -> None:
        first, second, go = asyncio.Event(), asyncio.Event(), asyncio.Event()
        one = asyncio.create_task(task(1, first, go))
        await first.wait()
        two = asyncio.create_task(task(2, second, asyncio.Event()))
        await second.wait()
        go.set()
        await one
        two.cancel()
        with pytest.raises(asyncio.CancelledError):
            await two

    with in_memory_tracing() as (_handle, _reader, exporter):
        asyncio.run(main())
        spans = span_records(exporter)
    steps = {s.attributes["rl.iteration"]: s.span_id for s in spans if s.name == "rl.step"}
    (phase,) = [s for s in spans if s.name == "rl.idle.buffer_starvation"]
    assert phase.parent_id == steps[owner]
    assert STARVED in summaries.seconds[owner]
    assert STARVED not in summaries.seconds.get(3 - owner, {})
