"""The live form's turns, read back from the SDK's spans and points: which turn a call outside
``t.turn()`` belongs to, and what a turn past its caps keeps, counts and says."""

from __future__ import annotations

import itertools
import os
from typing import Any

import pytest

import rlmetrics
from rlmetrics.testing import data_points, points, single
from rlmetrics.testing.traces import in_memory_tracing, span_records
from rlmetrics.trajectories import MAX_CALLS_PER_TURN, MAX_TURNS

from ._records import Rows, warned


def test_a_tool_call_outside_a_turn_joins_the_last_turn() -> None:
    """Before: a tool call made after ``with t.turn():`` closed opened a turn of its own (two
    turns, the tool call alone in the second) instead of joining the last one, as the docs
    say it does."""
    with in_memory_tracing() as (_handle, _reader, exporter):
        with rlmetrics.trajectory("s0", step=1) as t:
            with t.turn():
                t.generation("policy", finish_reason="tool_calls")
            t.tool_call("python", latency_s=0.0)
        spans = span_records(exporter)
    [agent] = [s for s in spans if s.name == "invoke_agent"]
    [turn] = [s for s in spans if s.name == "rl.turn"]
    [chat] = [s for s in spans if s.name == "chat policy"]
    [tool] = [s for s in spans if s.name == "execute_tool python"]
    assert agent.attributes["rl.trajectory.turns"] == 1
    assert agent.attributes["rl.trajectory.tool_calls"] == 1
    assert chat.parent_id == tool.parent_id == turn.span_id
    # The turn holds the call that joined it: it lasts until the call ended.
    assert turn.start_ns <= tool.start_ns <= tool.end_ns <= turn.end_ns <= agent.end_ns


def test_a_tool_call_before_any_turn_opens_one_and_a_generation_after_a_turn_its_own() -> None:
    with in_memory_tracing() as (_handle, _reader, exporter):
        with rlmetrics.trajectory("s0", step=1) as t:
            t.tool_call("search")  # no turn yet: one of its own
            with t.turn():
                t.generation("policy")
            t.generation("policy")  # a generation outside a turn opens one
            t.tool_call("python")  # and the tool call after it joins that one
        spans = span_records(exporter)
    turns = {s.span_id: s.attributes["rl.turn.index"] for s in spans if s.name == "rl.turn"}
    placed = sorted(
        (turns[s.parent_id], s.name)  # type: ignore[index]
        for s in spans
        if s.name.startswith(("chat", "execute_tool"))
    )
    assert placed == [
        (0, "execute_tool search"),
        (1, "chat policy"),
        (2, "chat policy"),
        (2, "execute_tool python"),
    ]


def test_a_live_turn_past_its_caps_says_so_and_counts_every_tool_call(
    warnings_seen: pytest.LogCaptureFixture,
) -> None:
    """Before: past MAX_CALLS_PER_TURN generations, tool calls and rewards in one turn were
    dropped without a word, and rl.tool.calls counted 64 of 100 calls while
    rl.trajectory.tool_calls counted 100; the calls of turns past MAX_TURNS were in neither."""
    with in_memory_tracing() as (_handle, reader, exporter):
        with rlmetrics.trajectory("wide", env="e1", step=1) as t, t.turn():
            for _ in range(100):
                t.generation("m", input_tokens=1)
                t.tool_call("wide_tool")
                t.reward(1.0, component="c")
        with rlmetrics.trajectory("long", env="e2", step=1) as t:
            for _ in range(MAX_TURNS + 44):
                with t.turn():
                    t.tool_call("long_tool")
            t.tool_call("long_tool")  # joins the last turn, one past MAX_TURNS
        spans = span_records(exporter)
        found = points(reader)
    for kind in ("generations", "tool calls", "rewards"):
        assert warned(warnings_seen, f"a live trajectory's turn has more than 64 {kind}"), kind
    agents = {s.attributes["rl.sample.id"]: s for s in spans if s.name == "invoke_agent"}
    assert agents["wide"].attributes["rl.trajectory.tool_calls"] == 100
    assert agents["long"].attributes["rl.trajectory.tool_calls"] == MAX_TURNS + 45
    assert single(found, "rl.tool.calls", **{"gen_ai.tool.name": "wide_tool"}).value == 100
    assert single(found, "rl.trajectory.tool_calls", **{"rl.env": "e1"}).sum == 100
    long_calls = single(found, "rl.tool.calls", **{"gen_ai.tool.name": "long_tool"}).value
    assert long_calls == single(found, "rl.trajectory.tool_calls", **{"rl.env": "e2"}).sum
    assert long_calls == MAX_TURNS + 45
    assert len([s for s in spans if s.name == "execute_tool wide_tool"]) == MAX_CALLS_PER_TURN
    assert len([s for s in spans if s.name == "execute_tool long_tool"]) == MAX_TURNS


def test_a_live_trajectory_still_open_at_shutdown_is_delivered_truncated(rows: Rows) -> None:
    """Telemetry shut down while a rollout ran (a SIGTERM handler on preemption, the loop
    dying in another thread): before, the rollout's block ended after shutdown, with no
    tracer and no meter left, and the rollout in flight was lost from the trace and the
    metrics. Now shutdown delivers it as it stands, outcome ``truncated``, with its open
    step; the block's late end delivers nothing more."""
    from opentelemetry.sdk.metrics.export import (
        MetricExporter,
        MetricExportResult,
        PeriodicExportingMetricReader,
    )

    class Last(MetricExporter):
        """Keeps what each export carried: the last is what shutdown's collection saw."""

        data: Any = None

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **_: Any) -> Any:
            self.data = metrics_data
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **_: Any) -> None:
            return None

    last = Last()
    final = PeriodicExportingMetricReader(last, export_interval_millis=3_600_000)
    with in_memory_tracing(readers=[final]) as (handle, reader, exporter):
        logger = rlmetrics.Logger(backends={"rows": {}})
        step = rlmetrics.step(4, logger=logger, summary=False)
        step.__enter__()
        live = rlmetrics.trajectory("in-flight", env="math", logger=logger)
        with live as t:
            with t.turn():
                t.generation("policy", input_tokens=3, output_tokens=2)
            before = points(reader)
            handle.shutdown()
            t.tool_call("python")  # the loop goes on a moment: said, not kept
        step.__exit__(None, None, None)
        spans = span_records(exporter)
    [agent] = [s for s in spans if s.name.startswith("invoke_agent")]
    assert agent.attributes["rl.trajectory.outcome"] == "truncated"
    assert agent.attributes["rl.iteration"] == 4
    assert [s.name for s in spans].count("chat policy") == 1
    [step_span] = [s for s in spans if s.name == "rl.step"]
    assert agent.parent_id == step_span.span_id
    assert [row["sample_id"] for row in rows.rows] == ["in-flight"]
    assert rows.rows[0]["outcome"] == "truncated"
    assert not [p for p in before if p.name == "rl.trajectory.completed"]
    [completed] = data_points(last.data, "rl.trajectory.completed")
    assert (completed.attributes["rl.trajectory.outcome"], completed.value) == ("truncated", 1)


def _live(sample_id: str, logger: rlmetrics.Logger, step: int | None = None) -> None:
    with rlmetrics.trajectory(sample_id, step=step, logger=logger) as t:
        t.reward(1.0)


def test_a_steps_live_trajectories_reach_a_tracker_as_one_table(rows: Rows) -> None:
    """Before: each live trajectory was a log_samples call of its own, so W&B, Trackio and
    TensorBoard held a one-row table per rollout at the same step (W&B's latest table, what its
    panel shows, had the last rollout of four). Now a step's rows are one table, given when
    the step ends, when a trajectory of a third step ends (two steps are held at once), at
    max_sample_rows, or when the Logger finishes."""
    logger = rlmetrics.Logger(backends={"rows": {}}, max_sample_rows=3)
    with logger:
        for n in (1, 2):
            with rlmetrics.step(n, logger=logger):
                for i in range(2):
                    _live(f"{n}-{i}", logger)
                assert all(step != n for step, _name, _ids in rows.tables)  # held
        for i in range(4):  # no step scope; past max_sample_rows
            _live(f"5-{i}", logger, step=5)
        _live("6-0", logger, step=6)  # another step's: held beside step 5's
        _live("7-0", logger, step=7)  # a third step's: step 5's rows go
        assert rows.tables[-1] == (5, "trajectories", ["5-3"])
    assert rows.tables == [
        (1, "trajectories", ["1-0", "1-1"]),
        (2, "trajectories", ["2-0", "2-1"]),
        (5, "trajectories", ["5-0", "5-1", "5-2"]),
        (5, "trajectories", ["5-3"]),
        (6, "trajectories", ["6-0"]),  # the Logger's finish gives what it still held
        (7, "trajectories", ["7-0"]),
    ]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_log_the_rows_its_parent_held(rows: Rows) -> None:
    """A DataLoader worker forked mid-step has the parent's held rows in its memory: finishing
    the Logger there logged the parent's rollouts a second time (into a shared JSONL file)."""
    logger = rlmetrics.Logger(backends={"rows": {}})
    _live("parent", logger, step=1)
    pid = os.fork()
    if pid == 0:  # the child: its own rows only
        code = 1
        try:
            _live("child", logger, step=1)
            logger.finish()
            code = 0 if rows.tables == [(1, "trajectories", ["child"])] else 3
        finally:
            os._exit(code)
    _pid, status = os.waitpid(pid, 0)
    logger.finish()
    assert os.waitstatus_to_exitcode(status) == 0
    assert rows.tables == [(1, "trajectories", ["parent"])]


def test_a_step_ended_inside_hold_rows_does_not_block(rows: Rows) -> None:
    """A SIGTERM handler that finishes the Logger runs on the loop's thread, maybe while a
    live trajectory's row is being held: ending the open step there gives the held rows, and
    must not wait for the lock its own thread holds (a plain Lock would never be released)."""
    import threading

    from rlmetrics.trajectories import held_rows

    logger = rlmetrics.Logger(backends={"rows": {}})
    _live("held", logger, step=1)

    def handler_inside_hold_rows() -> None:
        with held_rows._held_lock:  # where hold_rows is when the signal arrives
            held_rows.release_step(1)

    thread = threading.Thread(target=handler_inside_hold_rows, daemon=True)
    thread.start()
    thread.join(timeout=60)  # bounded: a deadlock fails the test instead of hanging it
    assert not thread.is_alive()
    assert rows.tables == [(1, "trajectories", ["held"])]
    logger.finish()


def test_a_live_trajectory_ending_after_its_logger_finished_is_said(
    rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    """A rollout still running when the Logger finished (or ending while it finishes, after
    it gave what it held): its row reaches no tracker, and that is said, as for any call
    after finish(); held, it was kept for good without a word."""
    from rlmetrics.trajectories import held_rows

    logger = rlmetrics.Logger(backends={"rows": {}})
    logger.finish()
    with caplog.at_level("WARNING", logger="rlmetrics"):
        _live("late", logger, step=1)
    assert warned(caplog, "after Logger.finish()")
    caplog.clear()
    # One that passed the check while finish() ran, and is held after finish() gave what it
    # held: given at once (and so said), never kept.
    with caplog.at_level("WARNING", logger="rlmetrics"):
        held_rows.hold_rows(logger, [{"sample_id": "racing"}], 1, "trajectories")
    assert not held_rows._held[logger].tables
    assert rows.tables == []


def test_a_steps_batches_and_live_rows_reach_a_tracker_as_one_table(rows: Rows) -> None:
    """Before: only live rows were held, so a step whose rollouts came as two
    ``log_trajectories`` calls (a loop logging each group as it completes), or as live
    trajectories and a batch, reached W&B, Trackio and TensorBoard as two tables at one step
    (W&B's panel shows the later one; SwanLab kept the first and dropped the other). Now a
    batch's rows join the step's held rows: one table per (name, step), given when the step
    ends, when rows of a third step come, at max_sample_rows (a batch that would pass it gives
    what was held first, so holding cuts nothing) or when the Logger finishes."""
    logger = rlmetrics.Logger(backends={"rows": {}}, max_sample_rows=4)
    with logger:
        with rlmetrics.step(1, logger=logger):
            _live("1-live", logger)
            logger.log_trajectories([{"sample_id": "1-a"}])
            logger.log_trajectories([{"sample_id": "1-b"}])
            assert rows.tables == []  # held until the step ends
        logger.log_trajectories([{"sample_id": "2-a"}], step=2)  # no step scope
        logger.log_trajectories([{"sample_id": "2-b"}], step=2)
        _live("2-live", logger, step=2)
        logger.log_trajectories([{"sample_id": f"3-{i}"} for i in range(3)], step=3)
        logger.log_trajectories([{"sample_id": f"3-{i}"} for i in range(3, 5)], step=3)
    assert rows.tables == [
        (1, "trajectories", ["1-live", "1-a", "1-b"]),
        (3, "trajectories", ["3-0", "3-1", "3-2"]),  # 5 rows would pass 4: given as held
        (2, "trajectories", ["2-a", "2-b", "2-live"]),  # held beside step 3's until finish
        (3, "trajectories", ["3-3", "3-4"]),
    ]


def test_a_warning_said_while_the_loop_handles_its_own_exception_carries_no_traceback(
    rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: a live call's field warning said inside the loop's own ``except`` (where a
    failed tool call is reported), or at the end of a block its exception left, carried the
    loop's exception as if rlmetrics had failed: its traceback and its message (a tool's error
    may quote the model's code or prompt), whatever the text policy. Now such a warning is its
    one line; a failure of rlmetrics' own inside those calls keeps its traceback."""
    marker = "SECRET-tool-output-7c1d"
    logger = rlmetrics.Logger(backends={"rows": {}})
    with caplog.at_level("DEBUG", logger="rlmetrics"):
        with rlmetrics.trajectory("in-except", step=1, logger=logger) as t:
            try:
                raise ValueError(marker)
            except ValueError:
                t.tool_call("python", outcome="crashed", latency_s=0.1)
        with pytest.raises(KeyError), rlmetrics.trajectory("raised", step="one", logger=logger):
            raise KeyError(marker)
        logger.finish()
    said = [r for r in caplog.records if r.name.startswith("rlmetrics")]
    assert warned(caplog, "'tool_call.outcome' must be one of")
    assert warned(caplog, "rlmetrics.trajectory must be an integer from 0")
    assert [r.getMessage() for r in said if r.exc_info] == []
    assert not [r for r in said if marker in caplog.handler.format(r)]
    assert [r["sample_id"] for r in rows.rows] == ["in-except", "raised"]


def test_a_live_error_given_as_the_exception_is_its_class(caplog: pytest.LogCaptureFixture) -> None:
    """Before: ``t.tool_call(..., error=exc)`` and ``t.finish("error", error=exc)`` with the
    exception a loop just caught (or its class) dropped the field, said once, and the spans
    said ``error.type`` ``error``. Now the exception's class name is the error; its message is
    never read."""
    with in_memory_tracing() as (_handle, _reader, exporter):
        with caplog.at_level("WARNING", logger="rlmetrics"), rlmetrics.trajectory("e", step=1) as t:
            try:
                raise TimeoutError("SECRET message")
            except TimeoutError as exc:
                t.tool_call("python", outcome="timeout", error=exc)
                t.tool_call("search", outcome="error", error=ConnectionError)
            t.finish("error", error=RuntimeError("SECRET"))
        spans = span_records(exporter)
    errors = {s.name: s.attributes.get("error.type") for s in spans if "error.type" in s.attributes}
    assert errors == {
        "execute_tool python": "TimeoutError",
        "execute_tool search": "ConnectionError",
        "invoke_agent": "RuntimeError",
    }
    assert not warned(caplog, "error")


def test_a_cancelled_rollout_is_truncated_not_an_error(rows: Rows) -> None:
    """Before: a rollout task cancelled mid-turn (an async trainer aborting its in-flight
    rollouts at a weight update, a timeout around the agent) left its block with
    CancelledError and was counted as an ``error`` (``error.type`` CancelledError), so each
    abort showed as a burst of failed rollouts. Now it is ``truncated``, finish reason
    ``cancelled``, as a rollout cut before its end; the cancellation still propagates."""
    import asyncio

    async def rollout(started: asyncio.Event) -> None:
        async with rlmetrics.trajectory("cut", step=1) as t, t.turn():
            t.generation("policy", output_tokens=3)
            started.set()
            await asyncio.Event().wait()  # the inference server, never answering

    async def main() -> None:
        started = asyncio.Event()
        task = asyncio.create_task(rollout(started))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with in_memory_tracing() as (_handle, reader, exporter):
        asyncio.run(main())
        spans = span_records(exporter)
        found = points(reader)
    [agent] = [s for s in spans if s.name == "invoke_agent"]
    assert agent.attributes["rl.trajectory.outcome"] == "truncated"
    assert agent.attributes["rl.trajectory.finish_reason"] == "cancelled"
    assert "error.type" not in agent.attributes
    [completed] = [p for p in found if p.name == "rl.trajectory.completed"]
    assert completed.attributes["rl.trajectory.outcome"] == "truncated"


def test_rollouts_of_two_steps_ending_interleaved_reach_a_tracker_as_a_table_per_step(
    rows: Rows,
) -> None:
    """Before: an async trainer's rollouts of steps 1 and 2 ending interleaved (each tagged
    with the step that trains on it; a long rollout of step 1 ends after step 2's began)
    gave the held table at every change of step: 8 rollouts were 6 tables, W&B's panel
    showed a part of each step and SwanLab, which keeps a step's first table, lost the rest.
    Two steps' tables are now held at once, each given whole."""
    logger = rlmetrics.Logger(backends={"rows": {}})
    with logger:
        for sample_id, step in [
            ("1-0", 1), ("1-1", 1), ("2-0", 2), ("1-2", 1),
            ("2-1", 2), ("1-3", 1), ("2-2", 2), ("2-3", 2),
        ]:  # fmt: skip
            _live(sample_id, logger, step=step)
        with rlmetrics.step(3, logger=logger):  # the loop goes on: step 1's table goes out
            _live("3-0", logger)
            assert rows.tables == [(1, "trajectories", ["1-0", "1-1", "1-2", "1-3"])]
        assert rows.tables == [  # step 3's end gives its table and the earlier steps'
            (1, "trajectories", ["1-0", "1-1", "1-2", "1-3"]),
            (2, "trajectories", ["2-0", "2-1", "2-2", "2-3"]),
            (3, "trajectories", ["3-0"]),
        ]


def test_a_turn_opened_inside_a_turn_ends_it_and_the_turns_do_not_overlap() -> None:
    """Before: ``with t.turn():`` inside another ended the outer turn where the inner began,
    then the outer block's end moved that end to its own: the outer rl.turn span overlapped
    the inner one (turns are laid end to end). The outer turn now ends where the inner
    began; what follows the inner block in the outer one is a turn of its own."""
    with in_memory_tracing() as (_handle, _reader, exporter):
        with rlmetrics.trajectory("s0", step=1) as t, t.turn():
            t.generation("outer")
            with t.turn():
                t.generation("inner")
            t.generation("after")
        spans = span_records(exporter)
    [agent] = [s for s in spans if s.name == "invoke_agent"]
    turns = sorted((s for s in spans if s.name == "rl.turn"), key=lambda s: s.start_ns)
    assert agent.attributes["rl.trajectory.turns"] == len(turns) == 3
    for earlier, later in itertools.pairwise(turns):
        assert earlier.end_ns <= later.start_ns
    by_name = {s.name: s for s in spans}
    for name, turn in zip(("chat outer", "chat inner", "chat after"), turns, strict=True):
        assert by_name[name].parent_id == turn.span_id
