"""Bad input costs only itself: missing ids, a turn outside a trajectory, 10**4 turns, a 10 MB
completion, tool names that are not strings, NaN rewards — each a warning, and the rest of
the record and the batch lands in spans, rows and metrics. The span budget's drops are
counted exactly."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import rlmetrics
from rlmetrics.testing import points, single
from rlmetrics.testing.traces import in_memory_tracing, span_records
from rlmetrics.trajectories import MAX_TURNS, SpanBudget, configure

from ._records import Rows, rollout, warned


def completed(found: list[Any]) -> dict[str, float]:
    counts: dict[str, float] = Counter()
    for p in found:
        if p.name == "rl.trajectory.completed":
            counts[p.attributes["rl.trajectory.outcome"]] += p.value
    return counts


def test_bad_records_warn_and_the_rest_lands(
    rows: Rows, warnings_seen: pytest.LogCaptureFixture
) -> None:
    no_id = rollout(0)
    del no_id["sample_id"]
    many_turns = rollout(1)
    many_turns["turns"] = many_turns["turns"][:1] * 10_000
    huge = rollout(2)
    huge["completion"] = "x" * 10_000_000
    bad_tool = rollout(3, outcome="success")
    bad_tool["turns"][0]["tool_calls"][0]["name"] = 42
    nan_reward = rollout(4, outcome="success")
    nan_reward["rewards"] = [{"value": float("nan"), "component": "correct"}]
    nan_reward["reward"] = float("inf")
    good = rollout(5, outcome="success")
    batch: list[Any] = [no_id, many_turns, huge, bad_tool, nan_reward, "not a record", good]
    with in_memory_tracing() as (_handle, reader, exporter):
        logger = rlmetrics.Logger(backends={"rows": {}})
        with rlmetrics.step(2, logger=logger, summary=False):
            logger.log_trajectories(batch, step=2)
        spans = span_records(exporter)
        found = points(reader)
    agents = [s for s in spans if s.name.startswith("invoke_agent")]
    assert len(agents) == 6 and len(rows.rows) == 6
    assert sum(completed(found).values()) == 6
    for text in (
        "no sample_id",
        "10000 turns",
        "'tool_call.name' must be a str",
        "'reward.value' must be a finite number",
        "'reward' must be a finite number",
        "'trajectory' must be a dict, got a str of length 12; that record is dropped and the "
        "rest of the batch is logged",
    ):
        assert warned(warnings_seen, text), text
    # Before: the record that is no dict was said as a field of a trajectory whose rest landed.
    assert not warned(warnings_seen, "field 'trajectory'")
    # 10**4 turns: all counted, the first MAX_TURNS traced.
    many = next(s for s in agents if s.attributes.get("rl.sample.id") == "s1")
    assert many.attributes["rl.trajectory.turns"] == 10_000
    turns = [s for s in spans if s.name == "rl.turn" and s.parent_id == many.span_id]
    assert len(turns) == MAX_TURNS
    histogram = single(found, "rl.trajectory.turns", **{"rl.env": "code"})
    assert histogram.sum == 10_000 + 2 * 2  # s1 and s3, s5 are "code"
    # The non-string tool name is "other", the rest of its record is there.
    assert single(found, "rl.tool.calls", **{"gen_ai.tool.name": "other"}).value == 1
    # The NaN reward is dropped, the rollout counted.
    row = next(r for r in rows.rows if r["sample_id"] == "s4")
    assert row["reward"] is None and row["outcome"] == "success"
    # The 10 MB completion is not read under the default policy.
    assert all(len(str(r)) < 10_000 for r in rows.rows)


def test_live_calls_outside_a_trajectory_warn_and_do_nothing(
    warnings_seen: pytest.LogCaptureFixture,
) -> None:
    with in_memory_tracing() as (_handle, _reader, exporter):
        t = rlmetrics.trajectory("s0")
        with t.turn():  # before the block
            t.generation("m")
        with t:
            t.generation("m", latency_s="slow")  # a bad field: warned, the call kept
            t.reward(float("nan"))
        with t.turn():  # after it
            t.tool_call("search")
        spans = span_records(exporter)
    assert warned(warnings_seen, "turn() called outside an open trajectory")
    assert warned(warnings_seen, "generation() called outside an open trajectory")
    assert warned(warnings_seen, "'generation.latency_s' must be a finite number")
    assert warned(warnings_seen, "'reward.value' must be a finite number, got a float (nan)")
    names = sorted(s.name for s in spans)
    assert names == ["chat m", "invoke_agent", "rl.turn"]


@pytest.mark.parametrize("step", ["s", 2**70, -1])
def test_a_step_that_is_no_step_is_said_and_the_trajectory_lands(
    warnings_seen: pytest.LogCaptureFixture, step: Any
) -> None:
    """Without a Logger, a step that is no trainer step was replaced by the open step's (here
    none), unsaid."""
    with in_memory_tracing() as (_handle, _reader, exporter):
        with rlmetrics.trajectory("s0", step=step) as t:
            t.generation("m")
        spans = span_records(exporter)
    assert warned(warnings_seen, "step given to rlmetrics.trajectory must be an integer")
    assert warned(warnings_seen, "(at the open rlmetrics.step's, else without one)")
    assert sorted(s.name for s in spans) == ["chat m", "invoke_agent", "rl.turn"]


def test_an_exception_in_a_live_trajectory_is_its_error_and_is_not_swallowed() -> None:
    with in_memory_tracing() as (_handle, reader, exporter):
        with pytest.raises(KeyError), rlmetrics.trajectory("s0", env="math") as t:
            t.generation("m")
            raise KeyError("boom")
        spans = span_records(exporter)
        found = points(reader)
    [agent] = [s for s in spans if s.name == "invoke_agent"]
    assert agent.attributes["error.type"] == "KeyError" and agent.status == "ERROR"
    assert completed(found) == {"error": 1}


def test_the_budget_keeps_failures_and_extremes_and_counts_every_drop(
    warnings_seen: pytest.LogCaptureFixture,
) -> None:
    configure(budget=SpanBudget(top_k=2, bottom_k=3, sample_rate=0.0, trace_all_below=4))
    records = [
        rollout(i, outcome="failure" if i % 10 == 0 else "success", reward=float(i))
        for i in range(40)
    ]
    with in_memory_tracing() as (_handle, reader, exporter):
        logger = rlmetrics.Logger(backends={})
        logger.log_trajectories(records, step=1)
        logger.log_trajectories(records[:4], step=2)  # within trace_all_below: all traced
        spans = span_records(exporter)
        found = points(reader)
    traced = {
        s.attributes["rl.sample.id"]
        for s in spans
        if s.name.startswith("invoke_agent") and s.attributes["rl.iteration"] == 1
    }
    failures = {f"s{i}" for i in range(0, 40, 10)}
    extremes = {"s1", "s2", "s3", "s38", "s39"}  # of the successes: s0 is a failure
    assert traced == failures | extremes
    dropped = 40 - len(traced)
    assert single(found, "rl.trajectory.spans.dropped").value == dropped
    assert sum(completed(found).values()) == 44  # metrics count every trajectory
    assert warned(warnings_seen, f"left {dropped} of 40 trajectories")


def test_sampling_is_by_sample_id_and_keeps_about_its_rate() -> None:
    budget = SpanBudget(top_k=0, bottom_k=0, sample_rate=0.25, trace_all_below=0)
    from rlmetrics.trajectories import parse_trajectories, settings

    records = parse_trajectories(
        [rollout(i, outcome="success") for i in range(2000)], settings().text
    )
    keep = budget.select(records)
    assert keep is not None
    assert 0.2 < sum(keep) / len(keep) < 0.3
    assert keep == budget.select(records)  # the same rollouts every time


def test_numbers_past_what_an_exporter_carries_are_dropped_with_the_rest_kept(
    warnings_seen: pytest.LogCaptureFixture,
) -> None:
    record = rollout(0, outcome="success")
    record.update(sample_id=2**70, weight_version=-(2**70), reward=10**400)
    record["turns"][0]["generations"][0]["input_tokens"] = 2**64
    with in_memory_tracing() as (_handle, reader, exporter):
        rlmetrics.Logger(backends={}).log_trajectories([record], step=1)
        with rlmetrics.trajectory("s1") as t:
            t.reward(10**400)  # an int past float's range
        spans = span_records(exporter)
        found = points(reader)
    assert warned(warnings_seen, "'sample_id' must be a str (at most 256 characters) or an int")
    assert warned(warnings_seen, "'reward' must be a finite number")
    agents = [s for s in spans if s.name.startswith("invoke_agent")]
    assert len(agents) == 2 and "rl.sample.id" not in agents[0].attributes
    assert sum(completed(found).values()) == 2


def test_made_up_names_stay_other_and_bounded_across_batches_and_sessions() -> None:
    # A name's bounded value is remembered from batch to batch (a batch of one trajectory
    # found it anew each time); a record making names up must not grow that memory, and a
    # new session tells names apart afresh.
    from rlmetrics.families import trajectory as family

    first = [rollout(i) | {"env": f"env{i}"} for i in range(family.MAX_ENVS)]
    made_up = [rollout(i) | {"env": f"made-up-{i}"} for i in range(3 * family._MEMO_MAX)]
    with in_memory_tracing() as (_handle, reader, _exporter):
        logger = rlmetrics.Logger(backends={})
        logger.log_trajectories(first, step=1)
        for step, start in enumerate(range(0, len(made_up), 500), start=2):
            logger.log_trajectories(made_up[start : start + 500], step=step)
            assert len(family._env_of) <= family._MEMO_MAX + 500
        logger.log_trajectories(first[:1], step=100)  # still itself, from memory or not
        found = points(reader)
    by_env = Counter()
    for point in found:
        if point.name == "rl.trajectory.completed":
            by_env[point.attributes["rl.env"]] += point.value
    assert by_env["other"] == len(made_up)
    assert by_env["env0"] == 2 and len(by_env) == family.MAX_ENVS + 1
    with in_memory_tracing() as (_handle, reader, _exporter):
        rlmetrics.Logger(backends={}).log_trajectories(made_up[:1], step=1)
        found = points(reader)
    # A new session: the first env it sees is itself again.
    assert {p.attributes["rl.env"] for p in found if p.name == "rl.trajectory.completed"} == {
        "made-up-0"
    }


@pytest.mark.parametrize("missing", ["absent", "None"])
def test_a_tool_call_without_a_name_is_said_and_counted_as_other(
    warnings_seen: pytest.LogCaptureFixture, missing: str
) -> None:
    """Before: a tool call with no name (``t.tool_call(None)``, a record's call without
    ``name``) became "other" in the spans and the metrics without a word, unlike a name that
    is not a string."""
    record = rollout(0, outcome="success")
    call = record["turns"][0]["tool_calls"][0]
    if missing == "absent":
        del call["name"]
    else:
        call["name"] = None
    with in_memory_tracing() as (_handle, reader, exporter):
        logger = rlmetrics.Logger(backends={})
        logger.log_trajectories([record], step=1)
        with rlmetrics.trajectory("live", step=1) as t:
            t.tool_call(None)
        spans = span_records(exporter)
        found = points(reader)
    assert warned(warnings_seen, "'tool_call.name' is missing"), [
        r.getMessage() for r in warnings_seen.records
    ]
    others = [
        p
        for p in found
        if p.name == "rl.tool.calls" and p.attributes["gen_ai.tool.name"] == "other"
    ]
    assert sum(p.value for p in others) == 2
    assert len([s for s in spans if s.name == "execute_tool other"]) == 2


def test_a_reward_without_a_value_is_said_and_the_rest_lands(
    rows: Rows, warnings_seen: pytest.LogCaptureFixture
) -> None:
    """Before: ``t.reward(None)`` (a reward function that returned None) and a record's reward
    without ``value`` were dropped without a word."""
    record = rollout(0, outcome="success")
    record["rewards"] = [{"reward": 1.0, "component": "correct"}, {"value": 0.5}]
    with in_memory_tracing() as (_handle, reader, exporter):
        logger = rlmetrics.Logger(backends={"rows": {}})
        logger.log_trajectories([record], step=1)
        with rlmetrics.trajectory("live", step=1, logger=logger) as t:
            t.reward(None, component="format")
            t.reward(2.0, component="correct")
        logger.finish()  # a live trajectory's row is held until its step ends, or this
        spans = span_records(exporter)
        found = points(reader)
    assert warned(warnings_seen, "a trajectory reward has no value")
    assert warned(warnings_seen, "a trajectory reward holds keys that are not read: 'reward'")
    rewards = sorted(
        (s.attributes["rl.reward.component"], s.attributes["rl.reward"])
        for s in spans
        if s.name.startswith("rl.reward")
    )
    assert rewards == [("correct", 2.0), ("total", 0.5)]
    assert [(r["sample_id"], r["reward"]) for r in rows.rows] == [("s0", 0.5), ("live", 2.0)]
    correct = {"rl.reward.component": "correct"}
    assert single(found, "rl.trajectory.reward.count", **correct).value == 1


def test_keys_that_are_not_read_are_said_once_with_the_keys_that_are(
    rows: Rows, warnings_seen: pytest.LogCaptureFixture
) -> None:
    """Before: a misspelt key ("tools" for "tool_calls", "group" for "group_id") dropped its
    value without a word: the record landed without its tool calls, group or env."""
    record = {
        "sample_id": "s0",
        "group": "g",
        "environment": "math",
        "id": 3,
        "turns": [
            {
                "generation": [{"model": "m", "input_tokens": 10}],
                "tools": [{"name": "python"}],
                "generations": [{"model": "m", "tokens": 10}],
                "tool_calls": [{"name": "search", "status": "ok"}],
            }
        ],
    }
    with in_memory_tracing() as (_handle, reader, exporter):
        logger = rlmetrics.Logger(backends={"rows": {}})
        logger.log_trajectories([record, record], step=1)
        logger.finish()  # the step's rows are held to be one table until its end, or this
        spans = span_records(exporter)
        found = points(reader)
    said = [r.getMessage() for r in warnings_seen.records if "not read" in r.getMessage()]
    assert len(said) == 4, said  # once per kind of dict, not per record
    [of_record] = [m for m in said if "a trajectory record holds" in m]
    assert "'group', 'environment', 'id'" in of_record
    assert "sample_id" in of_record and "group_id" in of_record and "env, error" in of_record
    [of_turn] = [m for m in said if "a trajectory turn holds" in m]
    assert "'generation', 'tools' (a turn's keys: generations, latency_s, rewards, " in of_turn
    assert any("a trajectory generation holds keys that are not read: 'tokens'" in m for m in said)
    assert any("a trajectory tool call holds keys that are not read: 'status'" in m for m in said)
    # The keys that are read land: two trajectories, each with its turn and its tool call.
    agents = [s for s in spans if s.name == "invoke_agent"]
    assert [a.attributes["rl.sample.id"] for a in agents] == ["s0", "s0"]
    assert single(found, "rl.tool.calls", **{"gen_ai.tool.name": "search"}).value == 2
    assert len(rows.rows) == 2 and rows.rows[0]["tool_calls"] == 1


def test_finish_outside_the_block_warns_and_does_nothing(
    warnings_seen: pytest.LogCaptureFixture,
) -> None:
    """Before: ``t.finish(...)`` after the block (or before it) set the outcome and total
    without a word; before the block, they became the trajectory's."""
    with in_memory_tracing() as (_handle, _reader, exporter):
        early = rlmetrics.trajectory("early", step=1)
        early.finish("failure", reward=0.0)
        with early:
            pass
        late = rlmetrics.trajectory("late", step=1)
        with late:
            pass
        late.finish("failure", reward=0.0)
        spans = span_records(exporter)
    assert warned(warnings_seen, "finish() called outside an open trajectory")
    agents = {s.attributes["rl.sample.id"]: s for s in spans if s.name == "invoke_agent"}
    for agent in agents.values():
        assert agent.attributes["rl.trajectory.outcome"] == "success"
        assert "rl.reward" not in agent.attributes
    assert late.outcome is None and late.reward_total is None


def test_tool_calls_past_the_caps_are_counted_everywhere(
    rows: Rows, warnings_seen: pytest.LogCaptureFixture
) -> None:
    """Before: a turn's 100 tool calls were counted as 64 (its row, its span's
    rl.trajectory.tool_calls, the rl.trajectory.tool_calls histogram and rl.tool.calls), and
    300 turns' calls as 256, though the docs say the counts count them all."""
    wide = {"sample_id": "wide", "env": "e1", "turns": [{"tool_calls": [{"name": "py"}] * 100}]}
    long = {"sample_id": "long", "env": "e2", "turns": [{"tool_calls": [{"name": "sh"}]}] * 300}
    with in_memory_tracing() as (_handle, reader, exporter):
        logger = rlmetrics.Logger(backends={"rows": {}})
        logger.log_trajectories([wide, long], step=1)
        logger.finish()  # the step's rows are held to be one table until its end, or this
        spans = span_records(exporter)
        found = points(reader)
    agents = {s.attributes["rl.sample.id"]: s for s in spans if s.name == "invoke_agent"}
    assert agents["wide"].attributes["rl.trajectory.tool_calls"] == 100
    assert agents["long"].attributes["rl.trajectory.tool_calls"] == 300
    assert {r["sample_id"]: r["tool_calls"] for r in rows.rows} == {"wide": 100, "long": 300}
    assert single(found, "rl.trajectory.tool_calls", **{"rl.env": "e1"}).sum == 100
    assert single(found, "rl.trajectory.tool_calls", **{"rl.env": "e2"}).sum == 300
    assert single(found, "rl.tool.calls", **{"gen_ai.tool.name": "py"}).value == 100
    assert single(found, "rl.tool.calls", **{"gen_ai.tool.name": "sh"}).value == 300
    # The spans keep the caps: 64 calls of the wide turn, 256 turns of the long record.
    assert len([s for s in spans if s.name == "execute_tool py"]) == 64
    assert len([s for s in spans if s.name == "execute_tool sh"]) == MAX_TURNS
    assert warned(warnings_seen, "'tool_calls' holds 100 entries; the first 64 are kept")
    assert warned(warnings_seen, "a trajectory has 300 turns")


def test_a_number_out_of_its_range_is_said_with_its_value(
    warnings_seen: pytest.LogCaptureFixture,
) -> None:
    """Before: ``'generation.input_tokens' must be an int from 0, got an int`` (and a
    latency of -0.5 s "got a float"): the reader could not tell what was wrong with it."""
    with in_memory_tracing(), rlmetrics.trajectory("s1") as t:
        t.generation("p", input_tokens=-3, output_tokens=2**70, latency_s=-0.5)
        t.tool_call("python", latency_s=10**400)
    assert warned(warnings_seen, "'generation.input_tokens' must be an int from 0, got an int -3;")
    assert warned(
        warnings_seen, f"'generation.output_tokens' must be an int from 0, got an int {2**70};"
    )
    assert warned(warnings_seen, "'generation.latency_s' must be a finite number of seconds")
    assert warned(warnings_seen, "from 0, got a float (-0.5);")
    assert warned(warnings_seen, "from 0, got an int of 1329 bits;")


def test_each_kind_of_batch_that_is_no_list_is_said(
    warnings_seen: pytest.LogCaptureFixture,
) -> None:
    """Before: the first batch that was no list (a generator) was said, and every later one,
    of any kind, went to DEBUG: one trajectory's dict handed without its list was dropped
    unsaid. Each kind is now said once, a lone record with what to write."""
    with in_memory_tracing():
        logger = rlmetrics.Logger(backends={})
        logger.log_trajectories(r for r in [rollout(0)])
        logger.log_trajectories(rollout(1), step=1)
    assert warned(warnings_seen, "got a generator; nothing logged")
    assert warned(warnings_seen, "got one trajectory's dict, not a list of them")


def test_numpy_strings_are_read_as_the_strings_they_are(
    rows: Rows, warnings_seen: pytest.LogCaptureFixture
) -> None:
    """Before: a NumPy ``str_`` (what a verl batch's ``non_tensor_batch`` holds: its ``uid``,
    the GRPO group, and ``data_source``) was refused wherever a record takes a str (sample
    and group id, env, tool name, outcome, text): "must be a str ..., got a str_", the field
    dropped, so a batch's rollouts had no ids or env. A str subclass is its str."""
    np = pytest.importorskip("numpy")
    configure(text="full")
    record = {
        "sample_id": np.str_("s0"),
        "group_id": np.str_("uid-7"),
        "env": np.str_("gsm8k"),
        "outcome": np.str_("failure"),
        "prompt": np.str_("question"),
        "turns": [{"tool_calls": [{"name": np.str_("python"), "outcome": np.str_("error")}]}],
        "rewards": [{"value": np.float32(0.5), "component": np.str_("acc")}],
    }
    with in_memory_tracing() as (_handle, _reader, exporter):
        with rlmetrics.Logger(backends={"rows": {}}) as logger:
            logger.log_trajectories([record], step=1)
        spans = span_records(exporter)
    assert not [r.getMessage() for r in warnings_seen.records]
    [row] = rows.rows
    assert (row["sample_id"], row["group_id"], row["env"], row["outcome"]) == (
        "s0",
        "uid-7",
        "gsm8k",
        "failure",
    )
    assert row["prompt"] == "question" and row["reward/acc"] == 0.5
    assert all(type(row[k]) is str for k in ("sample_id", "group_id", "env", "prompt"))
    [tool] = [s for s in spans if s.name.startswith("execute_tool")]
    assert tool.name == "execute_tool python" and tool.attributes["rl.tool.outcome"] == "error"


def test_a_batch_logged_while_the_loop_handles_its_exception_is_warned_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: ``log_trajectories`` called inside the loop's own ``except`` (the rollouts that
    finished before a worker died) said a bad field with the loop's exception attached, its
    traceback and message (which may quote a prompt), as if rlmetrics had failed."""
    marker = "SECRET-worker-output-51e0"
    logger = rlmetrics.Logger(backends={})
    with caplog.at_level("DEBUG", logger="rlmetrics"):
        try:
            raise RuntimeError(marker)
        except RuntimeError:
            logger.log_trajectories([{"sample_id": "s", "reward": "high"}], step=1)
        logger.finish()
    said = [r for r in caplog.records if r.name.startswith("rlmetrics")]
    assert warned(caplog, "trajectory field 'reward' must be a finite number")
    assert [r.getMessage() for r in said if r.exc_info] == []
    assert not [r for r in said if marker in caplog.handler.format(r)]


def test_the_budget_s_extremes_are_of_the_successes_the_failures_being_kept_anyway() -> None:
    """A GRPO batch whose failures scored 0: the bottom_k were the failures (kept anyway), so
    no low-reward success was traced. The top and bottom k are now of the successes."""
    configure(budget=SpanBudget(top_k=2, bottom_k=3, sample_rate=0.0, trace_all_below=4))
    records = [rollout(i, outcome="failure", reward=0.0 if i % 2 else 9.0) for i in range(10)] + [
        rollout(i, outcome="success", reward=float(i)) for i in range(10, 40)
    ]
    with in_memory_tracing() as (_handle, reader, exporter):
        rlmetrics.Logger(backends={}).log_trajectories(records, step=1)
        spans = span_records(exporter)
        found = points(reader)
    traced = {s.attributes["rl.sample.id"] for s in spans if s.name.startswith("invoke_agent")}
    failures = {f"s{i}" for i in range(10)}
    assert traced == failures | {"s10", "s11", "s12"} | {"s38", "s39"}
    assert single(found, "rl.trajectory.spans.dropped").value == 40 - 15


def test_an_outcome_that_is_none_of_the_names_is_taken_as_a_missing_one_and_said(
    rows: Rows, warnings_seen: pytest.LogCaptureFixture
) -> None:
    """Before: an outcome misspelt beside an error (``{"outcome": "failed", "error":
    "TimeoutError"}``, a tool call's ``outcome="crashed"`` with its error) counted as a
    success in rl.trajectory.completed and rl.tool.calls, where the same record without the
    outcome counted as an error, and the warning did not say what it counted as. It is now
    taken as a missing one (error when an error is given, else success), and said so."""
    records = [
        {
            "sample_id": "a",
            "outcome": "failed",
            "error": "TimeoutError",
            "turns": [{"tool_calls": [{"name": "python", "outcome": "crashed", "error": "E"}]}],
        },
        {"sample_id": "b", "outcome": "failed"},
    ]
    with in_memory_tracing() as (_handle, reader, _exporter):
        logger = rlmetrics.Logger(backends={"rows": {}})
        logger.log_trajectories(records, step=1)
        logger.finish()
        found = points(reader)
    assert {r["sample_id"]: r["outcome"] for r in rows.rows} == {"a": "error", "b": "success"}
    assert completed(found) == {"error": 1, "success": 1}
    call = single(found, "rl.tool.calls", **{"gen_ai.tool.name": "python"})
    assert call.attributes["rl.tool.outcome"] == "error"
    assert warned(warnings_seen, "'outcome' must be one of")
    assert warned(warnings_seen, "it is taken as 'error' (as without one: 'error' when an error")
