"""Gym rollouts as trajectories through a real rollout path: an agent server's ``/run`` under
uvicorn on 127.0.0.1 calls a resources server's tools over HTTP with aiohttp and returns a
Gym result row. Live, the agent invocation given ``run=`` is a trajectory whose tool calls are
the ones timed inside it; after the fact, the driver logs the result rows it collected with
``log_rollout_trajectories``. Both read back from the real SDK's in-memory span exporter and
metric reader and from the JSONL samples file."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import pytest
from gym_support_server import serve
from hypothesis import given
from hypothesis import strategies as st
from rlmetrics_gym.agent import timed_agent_invocation, timed_tool_call
from rlmetrics_gym.trajectories import log_rollout_trajectories, trajectory_record
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl, samples_path
from rlmetrics.flatten import flatten
from rlmetrics.testing import points
from rlmetrics.testing.traces import in_memory_tracing, span_records

ENV = "math_with_tools"
MODEL = "policy"
#: In every prompt, so a search of every output finds any prompt text that leaked.
MARKER = "zqxmarkerzqx"


async def _tool(request: Request) -> Response:
    name = request.path_params["name"]
    if name == "broken":
        return JSONResponse({"error": "tool crashed"}, status_code=500)
    return JSONResponse({"result": f"{name} done"})


def resources_app() -> Starlette:
    return Starlette(routes=[Route("/tools/{name}", _tool, methods=["POST"])])


def agent_app(resources_port: int, logger: rlmetrics.Logger | None = None) -> Starlette:
    """A Gym agent server: ``/run`` asks for one tool a turn, then answers; the reward is 1
    when every tool answered. With ``logger``, each invocation is a live trajectory too."""

    async def run(request: Request) -> Response:
        body = await request.json()
        output: list[dict[str, Any]] = []
        failed = 0
        async with (
            timed_agent_invocation(
                "simple_agent", run=body if logger else None, logger=logger, step=1
            ) as invocation,
            aiohttp.ClientSession(base_url=f"http://127.0.0.1:{resources_port}") as session,
        ):
            for i, tool in enumerate(body["tools"]):
                call_id = f"call-{i}"
                output.append(
                    {"type": "function_call", "name": tool, "call_id": call_id, "arguments": "{}"}
                )
                try:
                    async with (
                        timed_tool_call(tool),
                        session.post(f"/tools/{tool}", json={}) as answer,
                    ):
                        answer.raise_for_status()
                        result = (await answer.json())["result"]
                except aiohttp.ClientResponseError:
                    failed += 1
                    result = "failed"
                output.append(
                    {"type": "function_call_output", "call_id": call_id, "output": result}
                )
            output.append({"type": "message", "content": [{"type": "output_text", "text": "42"}]})
            reward = 0.0 if failed else 1.0
            if invocation.trajectory is not None:
                for _ in body["tools"]:
                    invocation.trajectory.generation(MODEL, finish_reason="tool_calls")
                invocation.trajectory.generation(MODEL, finish_reason="stop")
                invocation.trajectory.reward(reward, component="verify")
        return JSONResponse(
            {
                "_ng_task_index": body["_ng_task_index"],
                "_ng_rollout_index": body["_ng_rollout_index"],
                "agent_ref": body["agent_ref"],
                "responses_create_params": body["responses_create_params"],
                "response": {
                    "model": MODEL,
                    "output": output,
                    "usage": {"input_tokens": 10, "output_tokens": 3},
                },
                "reward": reward,
            }
        )

    return Starlette(routes=[Route("/run", run, methods=["POST"])])


ROLLOUTS = [  # (task, rollout, tools)
    (0, 0, ["search", "calculator"]),
    (0, 1, ["search", "broken"]),
    (1, 0, []),
    (1, 1, ["calculator"]),
]


def _collect(port: int) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        async with aiohttp.ClientSession() as client:

            async def one(task: int, rollout: int, tools: list[str]) -> dict[str, Any]:
                body = {
                    "_ng_task_index": task,
                    "_ng_rollout_index": rollout,
                    "agent_ref": {"type": "responses_api_agents", "name": ENV},
                    "responses_create_params": {"input": [{"role": "user", "content": MARKER}]},
                    "tools": tools,
                }
                async with client.post(f"http://127.0.0.1:{port}/run", json=body) as answer:
                    return dict(await answer.json())

            return list(await asyncio.gather(*(one(*r) for r in ROLLOUTS)))

    return asyncio.run(asyncio.wait_for(collect(), 30))


def _by_sample(spans: list[Any]) -> dict[str, Any]:
    return {s.attributes["rl.sample.id"]: s for s in spans if s.name.startswith("invoke_agent")}


def _children(spans: list[Any], parent: Any) -> list[Any]:
    return [s for s in spans if s.parent_id == parent.span_id]


def test_a_driver_logs_the_rollouts_it_collected_as_trajectories(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with in_memory_tracing() as (_handle, reader, exporter):
        with serve(resources_app()) as resources, serve(agent_app(resources.port)) as agent:
            results = _collect(agent.port)
        logger = rlmetrics.Logger(backends={"jsonl": {"path": path}})
        log_rollout_trajectories(logger, results, step=3)
        logger.finish()
        spans = span_records(exporter)
        found = points(reader)

    rows = {
        line["sample"]["sample_id"]: line for line in read_jsonl(samples_path(path), every_row=True)
    }
    agents = _by_sample(spans)
    assert set(rows) == set(agents) == {f"{t}-{r}" for t, r, _ in ROLLOUTS}
    for task, rollout, tools in ROLLOUTS:
        sample = f"{task}-{rollout}"
        line, agent = rows[sample], agents[sample]
        row = line["sample"]
        assert line["step"] == 3 and row["group_id"] == task and row["env"] == ENV
        expected_reward = 0.0 if "broken" in tools else 1.0
        assert row["reward"] == agent.attributes["rl.reward"] == expected_reward
        # One turn per tool the model called, then the answer.
        assert row["turns"] == agent.attributes["rl.trajectory.turns"] == len(tools) + 1
        assert row["tool_calls"] == len(tools)
        assert (row["input_tokens"], row["output_tokens"]) == (10, 3)
        turns = [s for s in _children(spans, agent) if s.name == "rl.turn"]
        called = [
            s.attributes["gen_ai.tool.name"]
            for turn in turns
            for s in _children(spans, turn)
            if s.name.startswith("execute_tool")
        ]
        assert called == tools
        assert "prompt" not in row and "completion" not in row

    # The metrics of the same records.
    tools = Counter(t for _, _, ts in ROLLOUTS for t in ts)
    counted = Counter()
    for p in found:
        if p.name == "rl.tool.calls":
            counted[p.attributes["gen_ai.tool.name"]] += p.value
        if p.name == "rl.trajectory.completed":
            assert p.attributes["rl.env"] == ENV
    assert counted == tools
    assert sum(p.value for p in found if p.name == "rl.trajectory.completed") == len(ROLLOUTS)
    # Text policy off: the prompt reached no output.
    for output in (path, samples_path(path)):
        assert MARKER not in output.read_text()
    assert not any(MARKER in str(s.attributes) for s in spans)


def test_an_agent_invocation_given_run_is_a_live_trajectory(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with in_memory_tracing() as (_handle, reader, exporter):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": path}})
        with serve(resources_app()) as resources, serve(agent_app(resources.port, logger)) as agent:
            results = _collect(agent.port)
        logger.finish()
        spans = span_records(exporter)
        found = points(reader)

    assert len(results) == len(ROLLOUTS)
    agents = _by_sample(spans)
    assert set(agents) == {f"{t}-{r}" for t, r, _ in ROLLOUTS}
    for task, rollout, tools in ROLLOUTS:
        agent = agents[f"{task}-{rollout}"]
        assert agent.name == "invoke_agent simple_agent"
        assert agent.attributes["rl.env"] == ENV and agent.attributes["rl.group.id"] == task
        descendants = [s for t in _children(spans, agent) for s in [t, *_children(spans, t)]]
        executed = [s for s in descendants if s.name.startswith("execute_tool")]
        assert [s.attributes["gen_ai.tool.name"] for s in executed] == tools
        # The broken tool's call failed: its span says so, with the error's class.
        for span in executed:
            broken = span.attributes["gen_ai.tool.name"] == "broken"
            assert (span.attributes["rl.tool.outcome"] == "error") is broken
            if broken:
                assert span.attributes["error.type"] == "ClientResponseError"
        rewards = [s for s in descendants if s.name.startswith("rl.reward")]
        assert [s.attributes["rl.reward"] for s in rewards] == [0.0 if "broken" in tools else 1.0]
    rows = [line["sample"] for line in read_jsonl(samples_path(path), every_row=True)]
    assert sorted(row["sample_id"] for row in rows) == sorted(agents)
    outcomes = Counter()
    for p in found:
        if p.name == "rl.tool.calls":
            outcomes[p.attributes["rl.tool.outcome"]] += p.value
    assert outcomes == {"success": 4, "error": 1}


def _pydantic_body() -> Any:
    """A NeMo Gym-shaped ``/run`` body as a FastAPI agent server gets it: a pydantic model, its
    ids extra fields or fields under an alias."""
    pydantic = pytest.importorskip("pydantic")

    class AgentRef(pydantic.BaseModel):
        type: str
        name: str

    class RunRequest(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow", populate_by_name=True)
        rollout_index: int = pydantic.Field(alias="_ng_rollout_index")
        agent_ref: AgentRef

    return RunRequest.model_validate(
        {
            "_ng_task_index": 3,
            "_ng_rollout_index": 0,
            "agent_ref": {"type": "responses_api_agents", "name": ENV},
            "responses_create_params": {"input": [{"role": "user", "content": MARKER}]},
        }
    )


@dataclasses.dataclass
class _AgentRef:
    type: str
    name: str


@dataclasses.dataclass
class _DataclassRun:
    _ng_task_index: int
    _ng_rollout_index: int
    agent_ref: _AgentRef


@attrs.define
class _AttrsRun:
    _ng_task_index: int
    _ng_rollout_index: int
    agent_ref: dict[str, str]


RUN_BODIES: dict[str, Callable[[], Any]] = {
    "pydantic": _pydantic_body,
    "dataclass": lambda: _DataclassRun(3, 0, _AgentRef("responses_api_agents", ENV)),
    "attrs": lambda: _AttrsRun(3, 0, {"type": "responses_api_agents", "name": ENV}),
}


def _invoke(body: Any, times: int = 1) -> list[Any]:
    """``times`` agent invocations given ``run=body``, each calling a tool and giving a
    reward through ``invocation.trajectory`` (as docs/gym.md shows); their spans."""

    async def run() -> None:
        async with timed_agent_invocation("simple_agent", run=body) as invocation:
            with timed_tool_call("search"):
                pass
            invocation.trajectory.reward(1.0, component="verify")

    with in_memory_tracing() as (_handle, _reader, exporter):
        for _ in range(times):
            asyncio.run(run())
        return span_records(exporter)


@pytest.mark.parametrize("kind", list(RUN_BODIES))
def test_a_run_body_that_is_a_model_is_read_as_the_mapping_it_stands_for(kind: str) -> None:
    spans = _invoke(RUN_BODIES[kind]())
    (agent,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert agent.attributes["rl.sample.id"] == "3-0"
    assert (agent.attributes["rl.group.id"], agent.attributes["rl.env"]) == (3, ENV)
    rewards = [s.attributes["rl.reward"] for s in spans if s.name.startswith("rl.reward")]
    assert rewards == [1.0]
    assert [s.attributes["gen_ai.tool.name"] for s in spans if s.name.startswith("execute_tool")]
    assert not any(MARKER in str(s.attributes) for s in spans)


class _Opaque:
    """A body neither a mapping nor a model."""


class _DumpFails:
    def model_dump(self, **_: Any) -> dict[str, Any]:
        raise RuntimeError("cannot dump")


@pytest.mark.parametrize("body", [_Opaque(), _DumpFails(), ["not", "a", "body"]])
def test_a_run_body_it_cannot_read_is_said_once_and_the_invocation_stays_a_trajectory(
    body: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The body's ids and env are dropped, said once with what it was; the invocation is a
    trajectory all the same: ``invocation.trajectory.reward(...)`` lands."""
    caplog.set_level(logging.WARNING, logger="rlmetrics")
    spans = _invoke(body, times=2)
    agents = [s for s in spans if s.name.startswith("invoke_agent")]
    assert len(agents) == 2 and all("rl.sample.id" not in s.attributes for s in agents)
    rewards = [s.attributes["rl.reward"] for s in spans if s.name.startswith("rl.reward")]
    assert rewards == [1.0, 1.0]
    said = [r for r in caplog.records if "run=" in r.getMessage()]
    assert len(said) == 1 and type(body).__name__ in said[0].getMessage()


def test_bad_rows_warn_once_and_the_rest_lands(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rlmetrics")
    good = {
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
        "reward": 1.0,
        "response": {"output": [{"type": "function_call", "name": "search", "call_id": "a"}]},
    }
    no_ids = {k: v for k, v in good.items() if not k.startswith("_ng")}
    nan_reward = {**good, "_ng_rollout_index": 1, "reward": math.nan}
    bad_tool = {
        **good,
        "_ng_rollout_index": 2,
        "response": {"output": [{"type": "function_call", "name": ["not", "a", "name"]}]},
    }
    odd = {**good, "_ng_rollout_index": 3, "outcome": ["unhashable"], "response": "not one"}
    odder = {
        **good,
        "_ng_rollout_index": 4,
        "duration_ms": 10**400,  # past a float: the latency is dropped, said once
        "response": {"output": [{"type": "function_call", "name": "search", "call_id": []}]},
    }
    rows: list[Any] = [no_ids, nan_reward, bad_tool, odd, odder, "not a row", good, {**nan_reward}]
    with in_memory_tracing() as (_handle, reader, exporter):
        log_rollout_trajectories(rlmetrics.Logger(backends={}), rows, step=1)
        spans = span_records(exporter)
        found = points(reader)
    agents = [s for s in spans if s.name.startswith("invoke_agent")]
    assert len(agents) == 7  # every mapping; the string is skipped
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for text in (
        "no sample_id",
        "'reward' must be a finite number",
        "'tool_call.name' must be a str",
        "'trajectory' must be a dict",
        "'latency_s' must be a finite number",
    ):
        assert sum(text in m for m in messages) == 1, text  # said once
    tools = {p.attributes["gen_ai.tool.name"]: p.value for p in found if p.name == "rl.tool.calls"}
    assert tools == {"search": 5, "other": 1}
    nan_spans = [s for s in agents if s.attributes.get("rl.sample.id") == "0-1"]
    assert len(nan_spans) == 2 and all("rl.reward" not in s.attributes for s in nan_spans)


def test_trajectory_record_reads_a_truncated_failed_row() -> None:
    record = trajectory_record(
        {
            "_ng_task_index": "t7",
            "outcome": "failed",
            "failure_type": "TimeoutError",
            "duration_ms": 1500,
            "response": {
                "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
                "output": [],
            },
        },
        env="code",
    )
    assert record["sample_id"] == "t7" and record["group_id"] == "t7"
    assert (record["outcome"], record["finish_reason"]) == ("truncated", "max_output_tokens")
    assert (record["error"], record["latency_s"], record["env"]) == ("TimeoutError", 1.5, "code")
    assert len(record["turns"]) == 1


def test_under_the_full_text_policy_a_row_keeps_its_text_and_a_flattened_row_reads_the_same(
    tmp_path: Path,
) -> None:
    from rlmetrics.trajectories import configure

    configure(text="full")
    nested = {
        "_ng_task_index": 5,
        "_ng_rollout_index": 1,
        "responses_create_params": {"input": "what is 2+2?"},
        "response": {
            "model": MODEL,
            "output": [
                {"type": "function_call", "name": "python", "call_id": "c", "arguments": "2+2"},
                {"type": "function_call_output", "call_id": "c", "output": "4"},
                {"type": "message", "content": [{"type": "output_text", "text": "4"}]},
            ],
        },
        "reward": 1.0,
    }
    flattened = {
        "_ng_task_index": 5,
        "_ng_rollout_index": 2,
        "responses_create_params/input": "what is 2+2?",
        "response/model": MODEL,
        "response/output": nested["response"]["output"],
        "reward": 1.0,
    }
    path = tmp_path / "metrics.jsonl"
    with in_memory_tracing() as (_handle, _reader, exporter):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": path}})
        log_rollout_trajectories(logger, [nested, flattened], step=1)
        logger.finish()
        spans = span_records(exporter)
    rows = [line["sample"] for line in read_jsonl(samples_path(path), every_row=True)]
    assert [(r["sample_id"], r["prompt"], r["completion"], r["turns"]) for r in rows] == [
        ("5-1", "what is 2+2?", "4", 2),
        ("5-2", "what is 2+2?", "4", 2),
    ]
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    assert [
        (s.attributes["gen_ai.tool.call.arguments"], s.attributes["gen_ai.tool.call.result"])
        for s in tools
    ] == [("2+2", "4")] * 2


# Anything a result row could hold where trajectory_record looks.
_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(["scored", "failed", "omitted", "function_call", "function_call_output"]),
)
_ITEM = st.one_of(
    _VALUE,
    st.dictionaries(
        st.sampled_from(["type", "name", "call_id", "arguments", "output", "content"]),
        st.one_of(_VALUE, st.lists(_VALUE, max_size=2)),
        max_size=6,
    ),
)
_ROW = st.dictionaries(
    st.sampled_from(
        [
            "_ng_task_index",
            "_ng_rollout_index",
            "reward",
            "outcome",
            "duration_ms",
            "failure_type",
            "agent_ref",
            "response",
            "response/output",
            "ng_perf",
        ]
    ),
    st.one_of(
        _VALUE,
        st.lists(_ITEM, max_size=6),
        st.fixed_dictionaries(
            {},
            optional={
                "output": st.lists(_ITEM, max_size=6),
                "status": _VALUE,
                "usage": st.dictionaries(st.text(max_size=12), _VALUE, max_size=2),
                "name": _VALUE,
                "num_turns": _VALUE,
            },
        ),
    ),
    max_size=8,
)


@given(rows=st.lists(_ROW, max_size=4), text=st.sampled_from(["off", "full"]))
def test_any_result_row_is_read_and_logged_without_raising(
    rows: list[dict[str, Any]], text: str
) -> None:
    from rlmetrics.trajectories import configure, parse_trajectories
    from rlmetrics.trajectories import settings as trajectory_settings

    configure(text=text)
    records = [trajectory_record(row) for row in rows]
    assert len(parse_trajectories(records, trajectory_settings().text)) == len(rows)
    log_rollout_trajectories(rlmetrics.Logger(backends={}), rows, step=1)


def test_a_truncated_rollouts_last_generation_ends_for_the_reason_the_rollout_does(
    tmp_path: Path,
) -> None:
    """A response cut at max_output_tokens: its last model call stopped for that reason, not
    with ``stop`` (a finished answer) or ``tool_calls``; the span, the trajectory and the row
    say the same."""
    row = {
        "_ng_task_index": 2,
        "_ng_rollout_index": 0,
        "agent_ref": {"name": ENV},
        "reward": 0.0,
        "response": {
            "model": MODEL,
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [
                {"type": "function_call", "name": "python", "call_id": "c1", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "4"},
                {"type": "message", "content": [{"type": "output_text", "text": "The ans"}]},
            ],
        },
    }
    path = tmp_path / "metrics.jsonl"
    with in_memory_tracing() as (_handle, _reader, exporter):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": path}})
        log_rollout_trajectories(logger, [row], step=1)
        logger.finish()
        spans = span_records(exporter)

    chats = [
        s.attributes["gen_ai.response.finish_reasons"] for s in spans if s.name.startswith("chat")
    ]
    assert chats == [("tool_calls",), ("max_output_tokens",)]
    (agent,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert agent.attributes["rl.trajectory.finish_reason"] == "max_output_tokens"
    (line,) = read_jsonl(samples_path(path), every_row=True)
    assert (line["sample"]["outcome"], line["sample"]["finish_reason"]) == (
        "truncated",
        "max_output_tokens",
    )


def test_a_row_the_logger_flattened_reads_as_the_nested_row_does() -> None:
    """The Logger flattens a row to its leaves (``response/usage/input_tokens``), not to
    ``response/usage``: a flattened row kept its turns but lost its tokens."""
    nested = {
        "_ng_task_index": 3,
        "_ng_rollout_index": 0,
        "agent_ref": {"type": "responses_api_agents", "name": ENV},
        "response": {
            "model": MODEL,
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "output": [
                {"type": "function_call", "name": "python", "call_id": "c", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "4"},
            ],
            "usage": {"input_tokens": 120, "output_tokens": 30},
        },
        "reward": 1.0,
        "duration_ms": 2500,
    }
    flattened = flatten(nested)
    assert "response/usage/input_tokens" in flattened
    record = trajectory_record(nested)
    assert record["turns"][-1]["generations"][0]["input_tokens"] == 120
    assert trajectory_record(flattened) == record
