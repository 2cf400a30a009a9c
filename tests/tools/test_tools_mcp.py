"""``rlmetrics mcp`` driven by the official MCP client over stdio: the tools and their input
schemas, each answering a demo run as ``rlmetrics query`` does, hostile arguments refused in
one line."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from tools_support import RLMETRICS

from rlmetrics.demo.run import DemoOptions, run_demo
from rlmetrics.runstate import run_state
from rlmetrics.testing import isolated_state

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

#: What depends on the moment of asking, left out of comparisons.
MOMENT = ("seconds_since_last",)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mcp-runs")
    options = DemoOptions(steps=8, seed=2, output=root / "demo", interval_s=0.0, prometheus_port=0)
    # A module's fixture runs outside each test's isolated_state: the demo activates families
    # (Gym's rollouts) in the process registry, so it gets an isolation of its own.
    with isolated_state():
        run_demo(options, say=io.StringIO(), progress=io.StringIO())
    return root


async def _session(root: Path, calls: list[tuple[str, dict[str, Any]]]) -> tuple[Any, list[Any]]:
    params = StdioServerParameters(command=RLMETRICS, args=["mcp", "--root", str(root)])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = await session.list_tools()
        results = [await session.call_tool(name, arguments) for name, arguments in calls]
    return tools, results


def _answer(result: Any) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        content = result.structured_content
        return content.get("result", content) if set(content) == {"result"} else content
    return json.loads(result.content[0].text)


def _timeless(answer: dict[str, Any]) -> dict[str, Any]:
    steps = {k: v for k, v in answer["steps"].items() if k not in MOMENT}
    return {**answer, "steps": steps, "source": {**answer["source"], "jsonl": None, "traces": None}}


def test_the_tools_answer_a_demo_run_as_query_does(runs: Path) -> None:
    tools, (listing, state, field) = asyncio.run(
        _session(
            runs,
            [
                ("list_runs", {}),
                ("run_state", {"jsonl": "demo/metrics.jsonl", "traces": "demo/traces.jsonl"}),
                ("run_field", {"jsonl": "demo/metrics.jsonl", "path": "steps.last"}),
            ],
        )
    )
    schemas = {tool.name: tool.input_schema for tool in tools.tools}
    assert set(schemas) == {"list_runs", "run_state", "run_field"}
    assert set(schemas["run_state"]["required"]) == {"jsonl"}
    assert set(schemas["run_field"]["required"]) == {"jsonl", "path"}
    assert schemas["list_runs"]["properties"]["limit"]["type"] == "integer"
    expected = run_state(runs / "demo" / "metrics.jsonl", traces=runs / "demo" / "traces.jsonl")
    assert _timeless(_answer(state)) == _timeless(expected)
    assert _answer(field) == expected["steps"]["last"]
    (only,) = _answer(listing)
    assert only == {"jsonl": "demo/metrics.jsonl", "run_ids": [expected["run"]["run_id"]]}


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("run_state", {"jsonl": "../../etc/passwd"}, "outside the run folder"),
        ("run_state", {"jsonl": "/etc/passwd"}, "outside the run folder"),
        ("list_runs", {"limit": 10**9}, "limit must be between 1 and 200"),
        ("run_field", {"jsonl": "demo/metrics.jsonl", "path": "steps[0"}, "'[' without ']'"),
    ],
)
def test_a_hostile_argument_is_refused_in_one_line(
    runs: Path, tool: str, arguments: dict[str, Any], message: str
) -> None:
    _tools, (result,) = asyncio.run(_session(runs, [(tool, arguments)]))
    assert result.is_error
    text = result.content[0].text
    assert message in text and "\n" not in text.strip() and "Traceback" not in text


def test_run_state_answers_a_run_holding_a_huge_int(tmp_path: Path) -> None:
    """A number no float holds (10**400 is valid JSON) costs only itself: before, run_state
    raised OverflowError, which the agent got as 'Error executing tool'."""
    rows = [
        {"time": float(step), "run_id": "r", "step": step, "prefix": "train", "metrics": {}}
        for step in range(1, 4)
    ]
    rows[1]["metrics"] = {"reward": 10**400, "efficiency/step_wall_time_s": 10**400}
    rows[2]["metrics"] = {"reward": 0.5}
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _tools, (state,) = asyncio.run(_session(tmp_path, [("run_state", {"jsonl": "metrics.jsonl"})]))
    answer = _answer(state)
    assert answer["steps"]["count"] == 3
    assert answer["last_values"]["train/reward"] == {"step": 3, "value": 0.5}
