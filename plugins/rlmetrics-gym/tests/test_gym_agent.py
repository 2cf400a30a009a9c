"""Agent turns and tool calls through a real rollout path — an agent server's ``/run`` under
uvicorn on 127.0.0.1 calling a resources server's tools over HTTP with aiohttp — read back as
the GenAI conventions' histograms; and ``process.pid`` on the resource of each Uvicorn worker
of one Gym server, received over OTLP."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import aiohttp
import psutil
import pytest
from gym_support_server import serve
from gym_support_uvicorn import uvicorn_workers
from rlmetrics_gym.agent import (
    INVOKE_AGENT_DURATION,
    MAX_TOOLS,
    TOOL_DURATION,
    record_agent_invocation,
    record_tool_call,
    timed_agent_invocation,
    timed_tool_call,
)
from rlmetrics_gym.http_client import current_destination, http_destination
from rlmetrics_gym.server import server_resource
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rlmetrics.testing import OtlpReceiver, points, wait_until
from rlmetrics.testing.traces import in_memory_tracing, span_records

TOOL_LATENCY_S = 0.02


async def _tool(request: Request) -> Response:
    name = request.path_params["name"]
    if name == "broken":
        return JSONResponse({"error": "tool crashed"}, status_code=500)
    await asyncio.sleep(TOOL_LATENCY_S)
    return JSONResponse({"result": f"{name} done"})


def resources_app() -> Starlette:
    return Starlette(routes=[Route("/tools/{name}", _tool, methods=["POST"])])


def agent_app(resources_port: int) -> Starlette:
    """A simple agent server: ``/run`` calls each tool the rollout asks for, in turn, inside
    one agent invocation; a failed tool call is noted in the output and the turn goes on."""

    async def run(request: Request) -> Response:
        body = await request.json()
        outputs = []
        async with (
            timed_agent_invocation("simple_agent"),
            aiohttp.ClientSession(base_url=f"http://127.0.0.1:{resources_port}") as session,
        ):
            for tool in body["tools"]:
                try:
                    async with (
                        timed_tool_call(tool),
                        session.post(f"/tools/{tool}", json={}) as answer,
                    ):
                        answer.raise_for_status()
                        outputs.append((await answer.json())["result"])
                except aiohttp.ClientResponseError:
                    outputs.append(f"{tool} failed")
        return JSONResponse({"output": outputs})

    return Starlette(routes=[Route("/run", run, methods=["POST"])])


def histograms(reader: Any, name: str) -> dict[tuple[tuple[str, Any], ...], tuple[int, float]]:
    return {
        tuple(sorted(p.attributes.items())): (p.count, p.sum)
        for p in points(reader)
        if p.name == name
    }


def test_tool_and_agent_durations_through_a_rollout(telemetry: Any) -> None:
    _handle, reader = telemetry
    with serve(resources_app()) as resources, serve(agent_app(resources.port)) as agent:

        async def rollouts() -> list[Any]:
            async with aiohttp.ClientSession() as client:
                answers = []
                for _ in range(2):
                    async with client.post(
                        f"http://127.0.0.1:{agent.port}/run",
                        json={"tools": ["search", "calculator", "broken", "search"]},
                    ) as answer:
                        answers.append(await answer.json())
                return answers

        answers = asyncio.run(rollouts())
    assert answers[0]["output"] == [
        "search done",
        "calculator done",
        "broken failed",
        "search done",
    ]

    tools = histograms(reader, TOOL_DURATION)
    op = ("gen_ai.operation.name", "execute_tool")
    assert {k: v[0] for k, v in tools.items()} == {
        (op, ("gen_ai.tool.name", "search")): 4,
        (op, ("gen_ai.tool.name", "calculator")): 2,
        (("error.type", "ClientResponseError"), op, ("gen_ai.tool.name", "broken")): 2,
    }
    # Each successful call waited at least the tool's own latency, in seconds.
    assert tools[(op, ("gen_ai.tool.name", "search"))][1] >= 4 * TOOL_LATENCY_S
    agents = histograms(reader, INVOKE_AGENT_DURATION)
    key = (("gen_ai.agent.name", "simple_agent"), ("gen_ai.operation.name", "invoke_agent"))
    assert set(agents) == {key} and agents[key][0] == 2
    # An invocation holds its tool calls.
    assert agents[key][1] >= sum(total for _count, total in tools.values())
    found = {p.name: p for p in points(reader) if p.name in (TOOL_DURATION, INVOKE_AGENT_DURATION)}
    assert {p.unit for p in found.values()} == {"s"}
    assert found[TOOL_DURATION].bounds[:3] == (0.01, 0.02, 0.04)


def test_a_raising_block_records_its_duration_and_error_type(telemetry: Any) -> None:
    _handle, reader = telemetry
    with pytest.raises(TimeoutError), timed_tool_call("sandbox.exec"):
        raise TimeoutError
    (point,) = [p for p in points(reader) if p.name == TOOL_DURATION]
    assert point.attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "sandbox.exec",
        "error.type": "TimeoutError",
    }
    assert point.count == 1


def test_a_call_measured_elsewhere_takes_its_error_as_an_exception_a_class_or_a_name(
    telemetry: Any,
) -> None:
    """A tool call timed by a sandbox reports its error by name; error.type was "str"."""
    _handle, reader = telemetry
    record_tool_call("sandbox.exec", 0.5, TimeoutError("late"))
    record_tool_call("sandbox.exec", 0.5, TimeoutError)
    record_tool_call("sandbox.exec", 0.5, "TimeoutError")
    record_tool_call("sandbox.exec", 0.5, "the sandbox died: OOM")
    record_agent_invocation("simple_agent", 2.0, "RuntimeError")
    errors = {
        (p.name, p.attributes.get("error.type")): p.count
        for p in points(reader)
        if p.name in (TOOL_DURATION, INVOKE_AGENT_DURATION)
    }
    assert errors == {
        (TOOL_DURATION, "TimeoutError"): 3,
        (TOOL_DURATION, "other"): 1,
        (INVOKE_AGENT_DURATION, "RuntimeError"): 1,
    }


def test_tool_names_are_bounded(telemetry: Any) -> None:
    _handle, reader = telemetry
    for i in range(MAX_TOOLS + 6):
        record_tool_call(f"tool_{i}", 0.5)
    record_tool_call("a name with spaces and a secret=hunter2", 0.5)
    record_tool_call(["not", "a", "name"], 0.5)
    counts = {
        p.attributes["gen_ai.tool.name"]: p.count for p in points(reader) if p.name == TOOL_DURATION
    }
    assert len(counts) == MAX_TOOLS + 1
    # 6 past the cap; the unsafe and non-string names are other too.
    assert counts["other"] == 6 + 2
    assert all(counts[f"tool_{i}"] == 1 for i in range(MAX_TOOLS - 1))


# -- process.pid: the Uvicorn workers of one server told apart ------------------------------


def test_the_server_resource_carries_the_process_pid() -> None:
    assert server_resource("math_with_judge", "resources_servers") == {
        "nemo.gym.server.name": "math_with_judge",
        "nemo.gym.server.type": "resources_servers",
        "process.pid": os.getpid(),
    }


@pytest.mark.parametrize(
    ("name", "server_type", "said"),
    [
        (None, "resources_servers", "server_name"),
        ("", "resources_servers", "server_name"),
        (42, None, "server_name"),
        ("math_with_judge", "resource_servers", "resources_servers"),
    ],
)
def test_a_server_resource_with_no_name_or_an_unknown_type_is_refused_saying_what_to_pass(
    name: Any, server_type: Any, said: str
) -> None:
    """A None name went onto the resource as is and was exported as an empty value (every
    series of the process without its server's name); a misspelt type was exported as it was,
    where the startup and memory series of the same server say ``other``."""
    with pytest.raises((TypeError, ValueError), match=said):
        server_resource(name, server_type)


def test_two_uvicorn_workers_of_one_server_are_told_apart_by_process_pid() -> None:
    receiver = OtlpReceiver().start()
    try:
        with uvicorn_workers(2, receiver) as (_port, server):

            def worker_pids() -> set[int]:
                return {
                    int(resource["process.pid"])
                    for resource, _names in receiver.resources()
                    if resource.get("nemo.gym.server.name") == "math_with_judge"
                }

            wait_until(lambda: len(worker_pids()) == 2, 60, "both workers' exports")
            pids = worker_pids()
            workers = {child.pid for child in psutil.Process(server.pid).children(recursive=True)}
            assert pids <= workers and server.pid not in pids
            for resource, _names in receiver.resources():
                assert resource["service.name"] == "nemo-gym"
                assert resource["nemo.gym.server.type"] == "resources_servers"
    finally:
        receiver.stop()


def test_an_invocation_left_in_another_task_than_it_entered_ends_its_trajectory() -> None:
    """A streaming ``/run`` yields from inside the invocation; the generator is closed by
    another task than the one that entered it (asyncio's finalizer of a generator a
    disconnected client left behind does that). Leaving must not raise into that task, and
    the invocation's trajectory and durations must land."""

    async def stream(body: dict[str, Any]) -> Any:
        async with timed_agent_invocation("simple_agent", run=body) as invocation:
            with http_destination("policy_model"):
                async with timed_tool_call("search"):
                    yield b"searching"
                assert invocation.trajectory is not None
                invocation.trajectory.generation("policy", finish_reason="stop")
                yield b"answer"

    async def collect() -> None:
        chunks = stream({"_ng_task_index": 4, "_ng_rollout_index": 1})
        await asyncio.create_task(anext(chunks))  # the first chunk, in one task
        await asyncio.create_task(chunks.aclose())  # the client went away: closed in another

    with in_memory_tracing() as (_handle, reader, exporter):
        asyncio.run(asyncio.wait_for(collect(), 30))
        spans = span_records(exporter)
        found = points(reader)

    agents = [s for s in spans if s.name.startswith("invoke_agent")]
    assert [a.attributes["rl.sample.id"] for a in agents] == ["4-1"]
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    assert [t.attributes["gen_ai.tool.name"] for t in tools] == ["search"]
    assert [p.attributes["gen_ai.agent.name"] for p in found if p.name == INVOKE_AGENT_DURATION]
    assert current_destination() == "external"
