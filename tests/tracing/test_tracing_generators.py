"""A phase inside a generator that is left mid-iteration (``break`` out of ``async for``): the
event loop closes an async generator later, in a task of its own, so its phase ends in
another context than the one it started in. Read back from the real SDK's in-memory span
exporter."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

import rlmetrics
from rlmetrics.testing import in_memory_tracing, span_records


async def generations() -> AsyncIterator[int]:
    for i in range(3):
        async with rlmetrics.phase("generation", bucket="productive"):
            yield i


async def loop(exporter: Any) -> None:
    async with rlmetrics.step(1):
        async for _ in generations():
            break  # the generator is left inside its phase; the loop closes it later
        for _ in range(1000):  # bounded: the loop's finalizer task runs within a few passes
            if any(s.name == "rl.generation" for s in span_records(exporter)):
                break
            gc.collect()
            await asyncio.sleep(0)
        async with rlmetrics.phase("reward"):
            pass


def test_a_phase_left_in_an_async_generator_ends_without_a_traceback_or_a_stale_parent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: closing the generator's phase in the loop's finalizer task logged
    OpenTelemetry's "Failed to detach context" ERROR with a ValueError traceback, and the
    step's next phase (``reward``) became a child of the generation span, which had ended.
    Now the phase's span ends and counts, said once without a traceback, and ``reward`` is a
    child of its step."""
    with caplog.at_level(logging.WARNING), in_memory_tracing() as (_handle, _reader, exporter):
        asyncio.run(loop(exporter))
        spans = {s.name: s for s in span_records(exporter)}
    assert set(spans) == {"rl.step", "rl.generation", "rl.reward"}
    assert spans["rl.generation"].parent_id == spans["rl.step"].span_id
    assert spans["rl.reward"].parent_id == spans["rl.step"].span_id
    tracebacks = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]
    said = [r.getMessage() for r in caplog.records if r.name.startswith("rlmetrics")]
    assert len(said) == 1 and "another context" in said[0], said


def test_a_phase_left_in_a_sync_generator_still_unwinds_in_its_own_context(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A sync generator runs in its caller's context: left inside its phase and closed
    there, its span ends as before, with no warning, and the step's next phase is the
    step's child."""

    def rows() -> Any:
        for i in range(3):
            with rlmetrics.phase("generation", bucket="productive"):
                yield i

    with caplog.at_level(logging.WARNING), in_memory_tracing() as (_handle, _reader, exporter):
        with rlmetrics.step(1):
            kept = rows()
            next(kept)
            kept.close()
            with rlmetrics.phase("reward"):
                pass
        spans = {s.name: s for s in span_records(exporter)}
    assert spans["rl.reward"].parent_id == spans["rl.step"].span_id
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_generator_closed_after_its_step_leaves_no_ended_step_current() -> None:
    """A sync generator kept open inside its phase past its step's end, closed after it:
    leaving the phase's context then put the ended step's context back as the current one,
    so the next step became a child of the step before (a chain of steps). Now the next step
    is a root again (and its phases its own children)."""

    def rows() -> Any:
        with rlmetrics.phase("generation", bucket="productive"):
            yield 1

    with in_memory_tracing() as (_handle, _reader, exporter):
        with rlmetrics.step(1):
            kept = rows()
            next(kept)
        kept.close()
        with rlmetrics.step(2), rlmetrics.phase("reward"):
            pass
        spans = span_records(exporter)
    steps = {s.attributes["rl.iteration"]: s for s in spans if s.name == "rl.step"}
    [reward] = [s for s in spans if s.name == "rl.reward"]
    assert steps[2].parent_id is None
    assert reward.parent_id == steps[2].span_id
