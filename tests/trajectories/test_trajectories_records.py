"""Properties of the record parser and of the mapping to spans, rows and metrics: any value
in any field never raises and yields typed fields; a record's spans, row and metrics say the
same thing (counts, reward, duration), and every span lies inside its parent."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import rlmetrics
from rlmetrics.testing import points
from rlmetrics.testing.logs import captured_log
from rlmetrics.testing.traces import in_memory_tracing, span_records
from rlmetrics.trajectories import (
    OUTCOMES,
    TOOL_OUTCOMES,
    TextPolicy,
    Trajectory,
    parse_trajectory,
)
from rlmetrics.trajectories.rows import row_of
from rlmetrics.trajectories.spans import duration_s, now_ns

from ._records import Rows

junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=300),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)
seconds = st.one_of(st.none(), st.floats(min_value=0, max_value=100))
name = st.one_of(st.none(), st.sampled_from(["search", "python", "a.b-c", "x" * 200]), junk)

generation = st.fixed_dictionaries(
    {},
    optional={
        "model": name,
        "input_tokens": st.one_of(st.integers(0, 10**6), junk),
        "output_tokens": st.one_of(st.integers(0, 10**6), junk),
        "finish_reason": name,
        "latency_s": st.one_of(seconds, junk),
        "weight_version": st.one_of(st.integers(0, 100), junk),
        "prompt": junk,
        "completion": junk,
    },
)
tool_call = st.fixed_dictionaries(
    {"name": name},
    optional={
        "outcome": st.one_of(st.sampled_from(TOOL_OUTCOMES), junk),
        "latency_s": st.one_of(seconds, junk),
        "error": name,
    },
)
reward = st.fixed_dictionaries(
    {"value": st.one_of(st.floats(-10, 10), junk)},
    optional={"component": name, "latency_s": seconds},
)
turn = st.one_of(
    junk,
    st.fixed_dictionaries(
        {},
        optional={
            "generations": st.one_of(st.lists(st.one_of(generation, junk), max_size=3), junk),
            "tool_calls": st.one_of(st.lists(st.one_of(tool_call, junk), max_size=3), junk),
            "rewards": st.lists(reward, max_size=2),
            "latency_s": st.one_of(seconds, junk),
        },
    ),
)
record = st.fixed_dictionaries(
    {},
    optional={
        "sample_id": st.one_of(st.text(min_size=1, max_size=10), st.integers(0, 10**9), junk),
        "group_id": junk,
        "env": name,
        "agent": name,
        "outcome": st.one_of(st.sampled_from(OUTCOMES), junk),
        "finish_reason": name,
        "weight_version": junk,
        "reward": st.one_of(st.floats(-5, 5), junk),
        "latency_s": st.one_of(seconds, junk),
        "end_time": st.one_of(st.none(), st.floats(1.7e9, 1.8e9)),
        "prompt": junk,
        "turns": st.one_of(st.lists(turn, max_size=4), junk),
        "rewards": st.one_of(st.lists(st.one_of(reward, junk), max_size=3), junk),
    },
)


def _typed(t: Trajectory) -> None:
    assert t.sample_id is None or type(t.sample_id) in (str, int)
    assert t.outcome in OUTCOMES
    assert t.env is None or (type(t.env) is str and len(t.env) <= 128)
    assert t.prompt is None  # the default policy reads no text
    assert t.turn_count >= len(t.turns)
    past = sum(n for _name, _outcome, n in t.tool_calls_past_caps)
    assert t.tool_call_count == sum(len(u.tool_calls) for u in t.turns) + past
    for u in t.turns:
        for g in u.generations:
            assert g.input_tokens is None or g.input_tokens >= 0
            assert math.isfinite(g.latency_s) and g.latency_s >= 0
            assert g.completion is None
        for c in u.tool_calls:
            assert type(c.name) is str and c.outcome in TOOL_OUTCOMES
    for r in t.all_rewards():
        assert math.isfinite(r.value) and type(r.component) is str
    total = t.total_reward()
    assert total is None or math.isfinite(total)


@given(record)
# Found by the suite: a latency whose nanoseconds overflow a float (and an int64).
@example({"latency_s": 1.797693134862316e299})
@example({"latency_s": float("inf"), "end_time_s": 1e300})
def test_any_record_parses_to_typed_fields_without_raising(fields: dict[str, Any]) -> None:
    t = parse_trajectory(fields, TextPolicy())
    assert t is not None
    _typed(t)
    row = row_of(t)
    assert row["turns"] == t.turn_count and row["outcome"] == t.outcome
    seconds = duration_s(t)
    assert row["latency_s"] == seconds and (seconds is None or seconds >= 0)


@given(junk)
def test_what_is_not_a_record_is_none(value: Any) -> None:
    assert parse_trajectory(value, TextPolicy()) is None or isinstance(value, dict)


@settings(max_examples=25)
@given(record)
def test_spans_row_and_metrics_of_a_record_agree(fields: dict[str, Any]) -> None:
    t = parse_trajectory(fields, TextPolicy())
    assert t is not None
    with in_memory_tracing() as (_handle, reader, exporter):
        before = now_ns()
        rlmetrics.Logger(backends={}).log_trajectories([fields], step=5)
        after = now_ns()
        spans = span_records(exporter)
        found = points(reader)
    by_id = {s.span_id: s for s in spans}
    [agent] = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    end_time = fields.get("end_time")
    if end_time is None:  # ends at the call
        assert before <= agent.end_ns <= after
    else:  # the record's end (a float's ns are exact to a few hundred)
        assert abs(agent.end_ns / 1e9 - end_time) < 1e-6, (agent.end_ns, end_time)
    calls = sum(len(u.generations) + len(u.tool_calls) + len(u.rewards) for u in t.turns)
    assert len(spans) == 1 + len(t.turns) + calls + len(t.rewards)
    for span in spans:
        if span is not agent:
            parent = by_id[span.parent_id]  # type: ignore[index]
            assert parent.start_ns <= span.start_ns <= span.end_ns <= parent.end_ns
    assert agent.attributes["rl.trajectory.outcome"] == t.outcome
    assert agent.attributes["rl.trajectory.turns"] == t.turn_count
    assert agent.attributes.get("rl.reward") == t.total_reward()
    [completed] = [p for p in found if p.name == "rl.trajectory.completed"]
    assert completed.value == 1
    assert completed.attributes["rl.trajectory.outcome"] == t.outcome
    durations = [p for p in found if p.name == "rl.trajectory.duration"]
    if duration_s(t) is None:  # a record that says no time: a span of no length, no point
        assert not durations and agent.seconds == 0
    else:
        [duration] = durations
        assert duration.sum is not None
        assert abs(duration.sum - agent.seconds) < 1e-6
    [turns] = [p for p in found if p.name == "rl.trajectory.turns"]
    assert turns.sum == t.turn_count
    # The total the span says is the one total counted (no second one from a component-less
    # reward), negative or not.
    total = t.total_reward()
    totals = {
        p.name: p.value
        for p in found
        if p.name.startswith("rl.trajectory.reward.")
        and p.attributes["rl.reward.component"] == "total"
    }
    if total is None:
        assert not totals
    else:
        assert totals == {"rl.trajectory.reward.count": 1, "rl.trajectory.reward.summed": total}


# Any value a record's end_time may hold: Unix seconds that int64 ns carry (after 1970, before
# 2262), and what no span can end at (0, negative, past 2262, inf, NaN, not a number).
end_times = st.one_of(
    st.floats(min_value=1e-3, max_value=9.2e9),
    st.integers(1, 9 * 10**9),
    st.floats(),
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 0.0, -1.0, 9.3e9, 1e300, True, "1767225600"]),
)


@settings(max_examples=40)
@given(end_times)
@example(1767225600.0)
@example(2**63 / 1e9)  # the first second int64 ns cannot carry
@example(12_345.6)  # time.monotonic()
@example(946_684_800.0)  # 2000-01-01, the earliest taken
def test_a_records_end_time_is_where_its_spans_end_or_is_said_and_now(end_time: Any) -> None:
    """Before: the end_time went through the cap meant for durations (10**18 ns), so every
    record's spans ended at 2001-09-09 01:46:40 whatever its end_time said. Then: a monotonic
    clock's reading (time.monotonic(), seconds since boot) was taken as a date in 1970, and a
    long latency before an early end_time started the span before 1970, at negative
    nanoseconds, which OTLP's unsigned times cannot carry."""
    fields = {"sample_id": "s0", "end_time": end_time, "latency_s": 1e9}
    number = None if type(end_time) is bool or type(end_time) is str else float(end_time)
    lands = number is not None and number >= 946_684_800 and number * 1e9 < 2**63
    with captured_log() as log, in_memory_tracing() as (_handle, _reader, exporter):
        before = now_ns()
        rlmetrics.Logger(backends={}).log_trajectories([fields], step=1)
        after = now_ns()
        [agent] = span_records(exporter)
    assert 0 <= agent.start_ns <= agent.end_ns
    said = log.matching("trajectory field 'end_time' must be Unix seconds")
    if lands:
        assert number is not None and abs(agent.end_ns / 1e9 - number) < 1e-6
        assert not said
    else:
        assert before <= agent.end_ns <= after
        assert said


def test_a_record_that_says_no_time_records_no_duration(rows: Rows) -> None:
    """A record with no latency anywhere (TRL's completions: TRL keeps no timings) lasted an
    unknown time. Before: 0 s, a point in rl.trajectory.duration for every such rollout that
    dragged the run's latency percentiles to zero, and 0.0 in its row. Now no point, and the
    row says None; a timed record beside it is counted as before."""
    untimed = {
        "sample_id": "a",
        "turns": [{"generations": [{"model": "policy", "output_tokens": 3}]}],
        "rewards": [{"value": 1.0, "component": "correct"}],
    }
    timed = {"sample_id": "b", "latency_s": 2.0}
    with in_memory_tracing() as (_handle, reader, _exporter):
        with rlmetrics.Logger(backends={"rows": {}}) as logger:  # gives the held rows
            logger.log_trajectories([untimed, timed], step=1)
        found = points(reader)
    [duration] = [p for p in found if p.name == "rl.trajectory.duration"]
    assert (duration.count, duration.sum) == (1, 2.0)
    assert {row["sample_id"]: row["latency_s"] for row in rows.rows} == {"a": None, "b": 2.0}


def test_a_record_whose_generations_count_no_tokens_has_no_token_cells(rows: Rows) -> None:
    """Tokens nobody counted are unknown, not 0: before, a TRL completion's row (TRL's
    records hold text and rewards, no counts) said input_tokens 0, output_tokens 0, and a
    tracker's token column averaged those zeros in. A side some generation counts is summed;
    a trajectory without generations used no tokens (0)."""
    records = [
        {"sample_id": "none", "turns": [{"generations": [{"model": "policy"}]}]},
        {"sample_id": "output", "turns": [{"generations": [{"output_tokens": 3}, {}]}]},
        {"sample_id": "no generation", "turns": [{"tool_calls": [{"name": "search"}]}]},
    ]
    with in_memory_tracing(), rlmetrics.Logger(backends={"rows": {}}) as logger:
        logger.log_trajectories(records, step=1)  # the Logger's end gives the held rows
    tokens = {r["sample_id"]: (r["input_tokens"], r["output_tokens"]) for r in rows.rows}
    assert tokens == {"none": (None, None), "output": (None, 3), "no generation": (0, 0)}


def test_a_row_names_the_trace_of_its_spans_only_when_they_are_exported(
    rows: Rows, monkeypatch: Any
) -> None:
    """Under a sampler that leaves a step's trace out (``OTEL_TRACES_SAMPLER``), its
    trajectories' spans are never exported. Before, their rows still carried a ``trace_id``,
    pointing a tracker's user at a trace no backend has; now a row has one only when its
    spans are sampled, as with tracing off or over the span budget."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    with in_memory_tracing() as (_handle, _reader, exporter):
        logger = rlmetrics.Logger(backends={"rows": {}})
        with rlmetrics.step(1, logger=logger, summary=False):
            logger.log_trajectories([{"sample_id": "batch"}], step=1)
            with rlmetrics.trajectory("live", logger=logger):
                pass
        logger.finish()
        assert span_records(exporter) == []
    assert {row["sample_id"]: row.get("trace_id") for row in rows.rows} == {
        "batch": None,
        "live": None,
    }


def test_an_error_given_without_an_outcome_is_a_failure_of_that_error() -> None:
    """Before: a tool call or a trajectory given an ``error`` but no ``outcome`` (the docs'
    "error= when it failed") was a success, its error dropped without a word: rl.tool.calls
    counted the failed call under success, no span said error.type. Now an error given
    makes the default outcome ``error``."""
    with in_memory_tracing() as (_handle, reader, exporter):
        with rlmetrics.trajectory("live", step=1) as t:
            t.tool_call("python", error="ValueError")
            t.finish(error=KeyError)
        record = {"sample_id": "batch", "error": "Boom"}
        record["turns"] = [{"tool_calls": [{"name": "search", "error": "OSError"}]}]
        rlmetrics.Logger(backends={}).log_trajectories([record], step=1)
        spans = span_records(exporter)
        found = points(reader)
    said = {
        s.name.split(" ")[-1]
        if s.name.startswith("execute_tool")
        else s.attributes["rl.sample.id"]: (
            s.attributes.get("rl.tool.outcome") or s.attributes.get("rl.trajectory.outcome"),
            s.attributes.get("error.type"),
        )
        for s in spans
        if s.name.startswith(("execute_tool", "invoke_agent"))
    }
    assert said == {
        "python": ("error", "ValueError"),
        "live": ("error", "KeyError"),
        "search": ("error", "OSError"),
        "batch": ("error", "Boom"),
    }
    tools = {
        p.attributes["gen_ai.tool.name"]: p.attributes["rl.tool.outcome"]
        for p in found
        if p.name == "rl.tool.calls"
    }
    assert tools == {"python": "error", "search": "error"}
    [completed] = [p for p in found if p.name == "rl.trajectory.completed"]
    assert (completed.attributes["rl.trajectory.outcome"], completed.value) == ("error", 2)


def test_an_error_given_with_another_outcome_is_in_the_span_as_in_the_row(rows: Rows) -> None:
    """Before: a rollout whose error was given beside another outcome (a record's
    ``{"outcome": "failure", "error": ...}``; a live block raising after ``t.finish("success")``)
    had the error in its row and none in its span (``error.type`` was set for ``error`` only):
    the table and the trace UI disagreed. The span now names it too; its status stays
    ERROR for the ``error`` outcome only."""
    with in_memory_tracing() as (_handle, _reader, exporter):
        logger = rlmetrics.Logger(backends={"rows": {}})
        logger.log_trajectories(
            [{"sample_id": "given", "outcome": "failure", "error": "WrongAnswer"}], step=1
        )
        with pytest.raises(ValueError), rlmetrics.trajectory("live", step=1, logger=logger) as t:
            t.finish("success", reward=1.0)
            raise ValueError("after the rollout")
        logger.finish()
        spans = span_records(exporter)
    agents = {s.attributes["rl.sample.id"]: s for s in spans if s.name == "invoke_agent"}
    by_id = {r["sample_id"]: r for r in rows.rows}
    for sample_id, error, outcome in (
        ("given", "WrongAnswer", "failure"),
        ("live", "ValueError", "success"),
    ):
        assert by_id[sample_id]["error"] == error and by_id[sample_id]["outcome"] == outcome
        assert agents[sample_id].attributes["error.type"] == error
        assert agents[sample_id].attributes["rl.trajectory.outcome"] == outcome
        assert agents[sample_id].status != "ERROR"
