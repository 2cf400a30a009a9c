"""The rollout driver's metrics from a simulated ``gym eval run`` over real files: input rows
materialized (read, repeated, written), dispatched under a concurrency limit, output rows
written and flushed to a real JSONL file, and each completed rollout's shape."""

from __future__ import annotations

import asyncio
import bz2
import gzip
import io
import json
import lzma
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gym_support_client import eventually, find, run, total, value_of
from rlmetrics_gym.driver import (
    ACTIVE,
    ADMISSION_DURATION,
    INPUT_ITEMS,
    MATERIALIZE_DURATION,
    OFFERED,
    OUTPUT_ITEMS,
    OUTPUT_WRITE_BYTES,
    OUTPUT_WRITE_DURATION,
    RESIDENT,
    TOOL_CALLS,
    TURNS,
    driver_rollout,
    materializing,
    record_rollout_shape,
    rollout_shape,
    write_output_row,
)

import rlmetrics
from rlmetrics.testing import isolated_state, points

ROWS = 3
REPEATS = 2
LIMIT = 2


def function_call(name: str) -> dict[str, Any]:
    return {"type": "function_call", "name": name, "arguments": "{}", "call_id": name}


def result_row(row: dict[str, Any], index: int) -> dict[str, Any]:
    """What the agent's /run returns for one input row: odd rollouts carry ng_perf."""
    output = [function_call("search"), function_call("open"), {"type": "message", "content": []}]
    result: dict[str, Any] = {
        "responses_create_params": row["responses_create_params"],
        "response": {"output": output[: 1 + index % 3]},
        "reward": 1.0,
    }
    if index % 2:
        result["ng_perf"] = {"num_turns": 4, "num_tool_calls": 9}
    return result


def test_a_simulated_driver_run_over_real_files(telemetry: Any, tmp_path: Path) -> None:
    _, reader = telemetry
    inputs = tmp_path / "input.jsonl"
    inputs.write_text(
        "".join(
            json.dumps({"responses_create_params": {"input": [{"role": "user"}] * (i + 1)}}) + "\n"
            for i in range(ROWS)
        )
    )
    materialized = tmp_path / "materialized.jsonl"
    output = tmp_path / "output.jsonl"

    with materializing():
        rows = [json.loads(line) for line in inputs.read_text().splitlines()] * REPEATS
        materialized.write_text("".join(json.dumps(row) + "\n" for row in rows))

    async def main() -> list[dict[str, Any]]:
        limit = asyncio.Semaphore(LIMIT)
        gate = asyncio.Event()
        shapes: list[dict[str, Any]] = []
        rows = [json.loads(line) for line in materialized.read_text().splitlines()]
        with output.open("w", encoding="utf-8") as out:

            async def rollout(index: int, row: dict[str, Any]) -> None:
                async with driver_rollout(limit):
                    await gate.wait()  # the agent works
                    result = result_row(row, index)
                write_output_row(out, result)
                shapes.append(record_rollout_shape(result))

            tasks = [asyncio.create_task(rollout(i, row)) for i, row in enumerate(rows)]
            await eventually(lambda: value_of(reader, RESIDENT) == len(rows), "all resident")
            # Resident minus active is what waits for admission.
            assert value_of(reader, ACTIVE) == LIMIT
            assert value_of(reader, OFFERED) == len(rows)
            gate.set()
            await asyncio.gather(*tasks)
        assert not limit.locked()
        return shapes

    shapes = run(main())
    found = points(reader)
    n = ROWS * REPEATS
    assert value_of(reader, RESIDENT) == 0 and value_of(reader, ACTIVE) == 0
    (offered,) = find(found, OFFERED)
    assert (offered.value, offered.unit, offered.monotonic) == (n, "{rollout}", True)
    (resident,) = find(found, RESIDENT)
    assert (resident.kind, resident.monotonic, resident.unit) == ("sum", False, "{rollout}")
    assert total(found, ADMISSION_DURATION)[0] == n
    assert total(found, MATERIALIZE_DURATION)[0] == 1
    # The bytes histogram adds up to the file written, row by row.
    written, size = total(found, OUTPUT_WRITE_BYTES)
    assert (written, size) == (n, output.stat().st_size)
    assert total(found, OUTPUT_WRITE_DURATION)[0] == n
    assert [json.loads(line)["reward"] for line in output.read_text().splitlines()] == [1.0] * n
    assert find(found, OUTPUT_WRITE_BYTES)[0].unit == "By"
    # Shapes: inputs 1..3 per row (twice), outputs 1..3, turns only with ng_perf.
    assert total(found, INPUT_ITEMS) == (n, 2 * (1 + 2 + 3))
    assert total(found, OUTPUT_ITEMS) == (n, sum(1 + i % 3 for i in range(n)))
    with_perf = [i for i in range(n) if i % 2]
    assert total(found, TURNS) == (len(with_perf), 4 * len(with_perf))
    counted = sum(min(1 + i % 3, 2) for i in range(n) if not i % 2)  # function_call items
    assert total(found, TOOL_CALLS) == (n, 9 * len(with_perf) + counted)
    assert len(shapes) == n


def test_a_rollout_cancelled_while_waiting_for_admission_leaves_no_count(telemetry: Any) -> None:
    _, reader = telemetry

    async def main() -> None:
        limit = asyncio.Semaphore(1)
        running = asyncio.Event()

        async def hold() -> None:
            async with driver_rollout(limit):
                running.set()
                await asyncio.Event().wait()

        async def waiting() -> None:
            async with driver_rollout(limit):
                raise AssertionError("never admitted")

        holder = asyncio.create_task(hold())
        await running.wait()
        waiter = asyncio.create_task(waiting())
        await eventually(lambda: value_of(reader, RESIDENT) == 2, "two resident")
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert (value_of(reader, RESIDENT), value_of(reader, ACTIVE)) == (1, 1)
        holder.cancel()
        with pytest.raises(asyncio.CancelledError):
            await holder
        assert not limit.locked()

    run(main())
    assert (value_of(reader, RESIDENT), value_of(reader, ACTIVE)) == (0, 0)
    assert total(points(reader), ADMISSION_DURATION)[0] == 1  # only the one admitted


def test_write_output_row_to_binary_and_text_files(telemetry: Any, tmp_path: Path) -> None:
    _, reader = telemetry
    with (tmp_path / "b.jsonl").open("wb") as binary:
        assert write_output_row(binary, {"text": "é"}) == len('{"text": "é"}\n'.encode())
        assert write_output_row(binary, b'{"x": 1}') == 9
    with (tmp_path / "t.jsonl").open("w", encoding="utf-8") as text:
        assert write_output_row(text, '{"y": 2}\n') == 9
    lines = (tmp_path / "b.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"text": "é"}, {"x": 1}]
    first = len('{"text": "é"}\n'.encode())  # é is two bytes in UTF-8
    assert total(points(reader), OUTPUT_WRITE_BYTES) == (3, first + 9 + 9)


ROW_BYTES = len('{"text": "é"}\n'.encode())  # é is two bytes in UTF-8


@pytest.mark.parametrize("opener", [gzip.open, bz2.open, lzma.open], ids=["gzip", "bz2", "lzma"])
def test_write_output_row_to_compressed_binary_files(
    telemetry: Any, tmp_path: Path, opener: Callable[..., Any]
) -> None:
    """gzip's file has an int ``mode``, bz2's and lzma's none: each is a binary sink."""
    _, reader = telemetry
    path = tmp_path / "out.jsonl.z"
    with opener(path, "wb") as sink:
        assert write_output_row(sink, {"text": "é"}) == ROW_BYTES
        assert write_output_row(sink, '{"y": 2}') == 9
    with opener(path, "rt", encoding="utf-8") as back:
        assert [json.loads(line) for line in back] == [{"text": "é"}, {"y": 2}]
    assert total(points(reader), OUTPUT_WRITE_BYTES) == (2, ROW_BYTES + 9)


class _BytesOnly:
    """A sink of neither io class nor ``mode`` that takes bytes only (as a socket does)."""

    def __init__(self) -> None:
        self.data = b""

    def write(self, data: Any) -> int:
        if not isinstance(data, bytes):
            raise TypeError(f"a bytes-like object is required, not {type(data).__name__!r}")
        self.data += data
        return len(data)

    def flush(self) -> None:
        return None


class _TextOnly(_BytesOnly):
    """The same for str (as a logging stream does)."""

    def write(self, data: Any) -> int:
        if not isinstance(data, str):
            raise TypeError(f"write() argument must be str, not {type(data).__name__}")
        self.data += data.encode("utf-8")
        return len(data)


@pytest.mark.parametrize(
    ("new_sink", "read"),
    [
        (io.BytesIO, lambda sink: sink.getvalue()),
        (io.StringIO, lambda sink: sink.getvalue().encode("utf-8")),
        (_BytesOnly, lambda sink: sink.data),
        (_TextOnly, lambda sink: sink.data),
    ],
    ids=["BytesIO", "StringIO", "bytes-only", "text-only"],
)
def test_write_output_row_to_sinks_without_a_mode(
    telemetry: Any, new_sink: Callable[[], Any], read: Callable[[Any], bytes]
) -> None:
    _, reader = telemetry
    sink = new_sink()
    assert write_output_row(sink, {"text": "é"}) == ROW_BYTES
    assert write_output_row(sink, b'{"x": 1}') == 9
    assert read(sink) == '{"text": "é"}\n{"x": 1}\n'.encode()
    assert total(points(reader), OUTPUT_WRITE_BYTES) == (2, ROW_BYTES + 9)


def test_a_failed_write_raises_and_records_nothing(telemetry: Any, tmp_path: Path) -> None:
    _, reader = telemetry
    handle = (tmp_path / "closed.jsonl").open("w")
    handle.close()
    with pytest.raises(ValueError):
        write_output_row(handle, {"a": 1})
    with pytest.raises(RuntimeError), materializing():
        raise RuntimeError("input file missing")
    found = points(reader)
    assert find(found, OUTPUT_WRITE_BYTES) == [] and find(found, MATERIALIZE_DURATION) == []


@pytest.mark.parametrize(
    ("row", "input_items", "expected"),
    [
        (
            {"response": {"output": [function_call("a"), {"type": "message"}]}},
            None,
            {OUTPUT_ITEMS: 2, TOOL_CALLS: 1},
        ),
        (
            {
                "responses_create_params": {"input": "just a string"},
                "response": {"output": []},
                "ng_perf": {"num_turns": 3, "num_tool_calls": 5},
            },
            None,
            {INPUT_ITEMS: 1, OUTPUT_ITEMS: 0, TURNS: 3, TOOL_CALLS: 5},
        ),
        (
            {"response": {"output": [function_call("a")]}},
            7,
            {INPUT_ITEMS: 7, OUTPUT_ITEMS: 1, TOOL_CALLS: 1},
        ),
        # ng_perf without a tool count: counted from the response; bad counts are left out.
        (
            {"response": {"output": [function_call("a")]}, "ng_perf": {"num_turns": -1}},
            "x",
            {OUTPUT_ITEMS: 1, TOOL_CALLS: 1},
        ),
        ({"response": "not a response"}, None, {}),
        ({}, None, {}),
        # A row the Logger flattened.
        (
            {"response/output": [function_call("a")], "ng_perf/num_turns": 2.0},
            None,
            {OUTPUT_ITEMS: 1, TURNS: 2, TOOL_CALLS: 1},
        ),
    ],
)
def test_rollout_shape(row: dict[str, Any], input_items: Any, expected: dict[str, int]) -> None:
    assert rollout_shape(row, input_items) == expected


def test_a_logged_result_row_records_its_shape(telemetry: Any) -> None:
    _, reader = telemetry
    rlmetrics.Logger(backends={}).log_metrics(
        {
            "outcome": "scored",
            "reward": 1.0,
            "responses_create_params": {"input": [{"role": "user"}, {"role": "user"}]},
            "response": {"output": [function_call("a"), function_call("b")]},
        },
        step=1,
        prefix="gym/rollout",
    )
    found = points(reader)
    assert total(found, INPUT_ITEMS) == (1, 2)
    assert total(found, TOOL_CALLS) == (1, 2)
    assert find(found, TURNS) == []  # no ng_perf: turns unknown


def test_admission_still_limits_without_telemetry() -> None:
    async def main() -> int:
        limit = asyncio.Semaphore(2)
        inside = peak = 0

        async def rollout() -> None:
            nonlocal inside, peak
            async with driver_rollout(limit):
                inside += 1
                peak = max(peak, inside)
                await asyncio.sleep(0)
                inside -= 1

        await asyncio.gather(*(rollout() for _ in range(6)))
        return peak

    with isolated_state():
        assert run(main()) == 2
