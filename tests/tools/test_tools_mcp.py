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

import rlmetrics
from rlmetrics.demo.run import DemoOptions, run_demo
from rlmetrics.mcp_server import RunFolder
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
        # Before: a traces or samples file was answered as a run of no step.
        ("run_state", {"jsonl": "demo/traces.jsonl"}, "not a run's metrics JSONL"),
        ("run_state", {"jsonl": "demo/metrics.samples.jsonl"}, "not a run's metrics JSONL"),
        # Before: a folder that is none was listed as holding no run.
        ("list_runs", {"folder": "nowhere"}, "'nowhere': no such folder in the run folder"),
        ("list_runs", {"folder": "demo/metrics.jsonl"}, "no such folder in the run folder"),
        # Before: 'demo': no such file in the run folder (it is there, a folder; the command
        # names the files in it), and the same for a file missing and a FIFO.
        ("run_state", {"jsonl": "demo"}, "is a folder: give a JSONL file (in it: "),
        ("run_state", {"jsonl": "demo/nothere.jsonl"}, "demo/nothere.jsonl: no such file"),
        ("run_state", {"jsonl": "fifo"}, "fifo is not a regular file (a device or a FIFO)"),
        ("run_state", {"jsonl": "demo/metrics.jsonl", "traces": "demo"}, "demo is a folder"),
    ],
)
def test_a_hostile_argument_is_refused_in_one_line(
    runs: Path, tool: str, arguments: dict[str, Any], message: str
) -> None:
    import os

    if not (runs / "fifo").exists():
        os.mkfifo(runs / "fifo")
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


def _run_file(path: Path, run_id: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    row = {"time": 1.0, "run_id": run_id, "step": 1, "prefix": "train", "metrics": {"x": 1}}
    path.write_text(json.dumps(row) + "\n")


def test_list_runs_keeps_to_the_root_and_misses_no_run(tmp_path: Path) -> None:
    """Before: a symlink out of the root was read and its run listed (run_state refused it),
    and a listing scanned only the first limit*4 files, so five traces files sorted before a
    run hid it."""
    root, outside = tmp_path / "runs", tmp_path / "outside"
    _run_file(outside / "secret.jsonl", "SECRET")
    _run_file(root / "inside.jsonl", "inside")
    (root / "s.jsonl").symlink_to(outside / "secret.jsonl")
    (root / "again.jsonl").symlink_to(root / "inside.jsonl")  # a link inside stays listed
    (root / "link").symlink_to(outside, target_is_directory=True)
    for n in range(5):  # not runs: spans, sorted before the run in z/
        traces = root / "a" / f"t{n}.jsonl"
        traces.parent.mkdir(exist_ok=True)
        traces.write_text(json.dumps({"resourceSpans": []}) + "\n")
    _run_file(root / "z" / "metrics.jsonl", "last")
    _tools, (everything, one) = asyncio.run(
        _session(root, [("list_runs", {}), ("list_runs", {"folder": "z", "limit": 1})])
    )
    listed = {entry["jsonl"]: entry["run_ids"] for entry in _answer(everything)}
    assert listed == {
        "again.jsonl": ["inside"],
        "inside.jsonl": ["inside"],
        "z/metrics.jsonl": ["last"],
    }
    assert _answer(one) == [{"jsonl": "z/metrics.jsonl", "run_ids": ["last"]}]
    first = RunFolder(root).runs(".", 1)
    assert first == [{"jsonl": "again.jsonl", "run_ids": ["inside"]}]
    (root / "again.jsonl").unlink()
    (root / "inside.jsonl").unlink()
    assert RunFolder(root).runs(".", 1) == [{"jsonl": "z/metrics.jsonl", "run_ids": ["last"]}]


def test_list_runs_lists_a_run_of_rows_without_a_run_id(tmp_path: Path) -> None:
    """Rows an older rlmetrics wrote carry no run id; report and run_state read such a file as
    one run, but list_runs left it out, so an agent never found it."""
    rows = [{"time": 1.0, "step": s, "prefix": "train", "metrics": {"reward": 0.5}} for s in (1, 2)]
    (tmp_path / "old.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _run_file(tmp_path / "new.jsonl", "new")
    (tmp_path / "t.jsonl").write_text(json.dumps({"resourceSpans": []}) + "\n")  # no run
    _tools, (listing, state) = asyncio.run(
        _session(tmp_path, [("list_runs", {}), ("run_state", {"jsonl": "old.jsonl"})])
    )
    assert _answer(listing) == [
        {"jsonl": "new.jsonl", "run_ids": ["new"]},
        {"jsonl": "old.jsonl", "run_ids": []},
    ]
    assert _answer(state)["steps"]["count"] == 2


def test_list_runs_names_a_run_s_ids_without_parsing_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: every row of every run was parsed for its run id; a folder of runs of 10^5
    steps (90 MB each) cost an agent's listing seconds per run. The rows the JSONL backend
    writes name their run id at their start; another row is parsed as before."""
    import rlmetrics.mcp_server as server

    with rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "a.jsonl"}}, run_id="a") as log:
        log.log_hyperparams({"lr": 1e-6})
        for step in range(200):
            log.log_metrics({"reward": 0.5, "note": 'a "quoted" run_id'}, step=step, prefix="t")
    with (tmp_path / "a.jsonl").open("a") as out:  # a row another writer put its own way
        out.write(json.dumps({"run_id": 'b"c', "step": 1, "metrics": {}, "time": 2.0}) + "\n")
    parsed: list[bytes] = []
    loads = json.loads

    def counted(text: Any, *args: Any, **kwargs: Any) -> Any:
        parsed.append(text)
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(server.json, "loads", counted)
    assert RunFolder(tmp_path).runs(".", 10) == [{"jsonl": "a.jsonl", "run_ids": ["a", 'b"c']}]
    assert len(parsed) < 20


def test_list_runs_lists_a_run_s_rotated_and_compressed_files(tmp_path: Path) -> None:
    """logrotate leaves metrics.jsonl.1 and, with ``compress``, metrics.jsonl.2.gz (or bz2,
    xz, a dated name); run_state reads them as they are, but list_runs listed ``*.jsonl``
    only, so an agent never found a run's older steps."""
    import bz2
    import gzip
    import lzma

    row = {"time": 1.0, "step": 1, "prefix": "train", "metrics": {"x": 1}}

    def text(run_id: str) -> bytes:
        return (json.dumps({**row, "run_id": run_id}) + "\n").encode()

    _run_file(tmp_path / "metrics.jsonl", "now")
    (tmp_path / "metrics.jsonl.1").write_bytes(text("one"))
    (tmp_path / "metrics.jsonl.2.gz").write_bytes(gzip.compress(text("two")))
    (tmp_path / "metrics.jsonl.3.bz2").write_bytes(bz2.compress(text("three")))
    (tmp_path / "metrics.jsonl-20261207.xz").write_bytes(lzma.compress(text("dated")))
    (tmp_path / "metrics.samples.jsonl.1.gz").write_bytes(gzip.compress(b"{}\n"))  # no run
    (tmp_path / "traces.jsonl.1.gz").write_bytes(gzip.compress(b'{"resourceSpans": []}\n'))
    (tmp_path / "notes.gz").write_bytes(gzip.compress(text("not a jsonl name")))
    listed = {entry["jsonl"]: entry["run_ids"] for entry in RunFolder(tmp_path).runs(".", 10)}
    assert listed == {
        "metrics.jsonl": ["now"],
        "metrics.jsonl.1": ["one"],
        "metrics.jsonl.2.gz": ["two"],
        "metrics.jsonl.3.bz2": ["three"],
        "metrics.jsonl-20261207.xz": ["dated"],
    }
    for name, [run_id] in listed.items():
        assert RunFolder(tmp_path).state(name, None, None)["run"]["run_id"] == run_id


def test_list_runs_leaves_out_a_file_of_several_ranks_raw_rows(tmp_path: Path) -> None:
    """Ray Train's controller writes every rank's raw rows into rlmetrics.ranks.jsonl, which
    run_state refuses (its steps would mix the ranks' values); list_runs listed it as a run,
    so an agent's next call was refused. One rank's file is a run and stays listed."""
    _run_file(tmp_path / "metrics.jsonl", "r")
    with (tmp_path / "rlmetrics.ranks.jsonl").open("w") as out:
        for step in range(3):
            for rank in range(4):
                row = {"time": 1.0, "run_id": "r", "rank": rank, "host": "h", "step": step}
                out.write(json.dumps({**row, "prefix": "train", "metrics": {"loss": 1.0}}) + "\n")
    with (tmp_path / "rlmetrics.rank1.jsonl").open("w") as out:
        for step in range(3):
            row = {"time": 1.0, "run_id": "r", "rank": 1, "host": "h", "step": step}
            out.write(json.dumps({**row, "prefix": "train", "metrics": {"loss": 1.0}}) + "\n")
    listed = [entry["jsonl"] for entry in RunFolder(tmp_path).runs(".", 10)]
    assert listed == ["metrics.jsonl", "rlmetrics.rank1.jsonl"]
    for name in listed:
        RunFolder(tmp_path).state(name, None, None)  # each listed run is answered
