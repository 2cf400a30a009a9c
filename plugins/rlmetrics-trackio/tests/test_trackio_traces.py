"""Trajectories as Trackio traces and rlmetrics' in-process alerts as Trackio alerts, through
a real Logger and real telemetry (SDK in-memory span exporter), read back from Trackio's own
storage and API."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trackio
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from trackio.sqlite_storage import SQLiteStorage

import rlmetrics
from rlmetrics import Logger, liveness, stall_watch
from rlmetrics.trajectories import configure

RECORD: dict[str, Any] = {
    "sample_id": "p3-2",
    "group_id": "p3",
    "env": "math",
    "agent": "solver",
    "outcome": "failure",
    "reward": 0.25,
    "latency_s": 2.0,
    "prompt": "2+2?",
    "rewards": [{"value": 0.25, "component": "correct", "latency_s": 0.1}],
    "turns": [
        {
            "generations": [
                {
                    "model": "tiny",
                    "input_tokens": 12,
                    "output_tokens": 5,
                    "latency_s": 0.5,
                    "completion": "let me check",
                }
            ],
            "tool_calls": [{"name": "calc", "latency_s": 0.2, "arguments": "2+2", "result": "4"}],
        }
    ],
}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    handle = rlmetrics.start(
        readers=[InMemoryMetricReader()], span_processors=[SimpleSpanProcessor(exporter)]
    )
    try:
        yield exporter
    finally:
        handle.shutdown()


def test_each_trajectory_is_a_trackio_trace_with_its_ids_spans_and_trace_id(
    project: str, spans: InMemorySpanExporter
) -> None:
    configure(text="full")
    logger = Logger(backends={"trackio": {"project": project}})
    run = logger.identity.run_id
    bad = {**RECORD, "sample_id": "p3-3", "reward": float("nan"), "outcome": "success"}
    logger.log_trajectories([RECORD, bad], step=3)
    logger.finish()
    traces = SQLiteStorage.get_traces(project, run=run)
    assert [(t["key"], t["step"]) for t in traces] == [("trajectory_traces", 3)] * 2
    by_id = {t["metadata"]["sample_id"]: t for t in traces}
    first = by_id["p3-2"]
    assert first["metadata"]["outcome"] == "failure" and first["metadata"]["status"] == "error"
    assert first["metadata"]["reward"] == 0.25 and first["metadata"]["env"] == "math"
    otel_trace_ids = {f"{s.context.trace_id:032x}" for s in spans.get_finished_spans()}
    assert first["metadata"]["trace_id"] in otel_trace_ids
    names = [(s["name"], s["kind"]) for s in first["spans"]]
    assert names == [
        ("invoke_agent solver", "span"),
        ("rl.turn", "span"),
        ("chat tiny", "generation"),
        ("execute_tool calc", "tool"),
        ("rl.reward correct", "span"),
    ]
    chat = first["spans"][2]
    assert chat["usage"] == {"input_tokens": 12, "output_tokens": 5}
    assert chat["duration_ms"] == 500.0 and chat["parent_id"] == first["spans"][1]["id"]
    assert [m["role"] for m in first["messages"]] == ["user", "assistant", "assistant", "tool"]
    assert first["messages"][3] == {"role": "tool", "tool_call_id": "t0-0", "content": "4"}
    # The NaN reward was dropped by the record's own check; the trace still landed.
    assert "reward" not in by_id["p3-3"]["metadata"]


def _alerts(project: str, run: str) -> list[tuple[str, str, int | None]]:
    try:
        found = trackio.Api().alerts(project, run=run)
    except ValueError:  # the project's store does not exist yet
        return []
    return [
        (a["title"], a["level"], a["step"]) for a in sorted(found, key=lambda a: a["timestamp"])
    ]


def _wait_for(project: str, run: str, count: int) -> list[tuple[str, str, int | None]]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = _alerts(project, run)
        if len(found) >= count:
            return found
        time.sleep(0.02)
    return _alerts(project, run)


def _watching() -> bool:
    return any(t.name == "rlmetrics-stall-watch" for t in threading.enumerate())


def test_the_stall_watch_starts_with_the_first_trackio_logger(project: str) -> None:
    # Exporting with no listener runs no thread (issue 37); Trackio keeps alerts, so a
    # Logger writing to it is the listener the watch waits for.
    handle = rlmetrics.start(readers=[InMemoryMetricReader()])
    try:
        assert not _watching()
        logger = Logger(backends={"trackio": {"project": project}})
        assert _watching()
        logger.finish()
    finally:
        handle.shutdown()
    assert not _watching()


def test_a_stall_fires_and_resolves_as_trackio_alerts(
    project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1_000_000.0]
    monkeypatch.setattr(liveness, "clock", lambda: now[0])
    monkeypatch.setattr(stall_watch, "CHECK_INTERVAL_S", 0.01)
    handle = rlmetrics.start(readers=[InMemoryMetricReader()])
    try:
        logger = Logger(backends={"trackio": {"project": project}})
        run = logger.identity.run_id
        logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
        now[0] += 601.0  # past the 600 s bound before a median interval is known
        fired = _wait_for(project, run, 1)
        assert fired[:1] == [("RLStepStalled firing", "warn", 1)]
        now[0] += 1.0
        logger.log_metrics({"loss": 0.5}, step=2, prefix="train")
        both = _wait_for(project, run, 2)
        assert both == [("RLStepStalled firing", "warn", 1), ("RLStepStalled resolved", "info", 2)]
        logger.finish()
    finally:
        handle.shutdown()
    (text,) = [a["text"] for a in trackio.Api().alerts(project, run=run) if "firing" in a["title"]]
    assert "no new trainer step for 601 s" in text


def test_a_trajectory_that_cannot_become_a_trace_is_said_once_and_the_rest_land(
    project: str, caplog: pytest.LogCaptureFixture
) -> None:
    from rlmetrics_trackio.backend import TrackioBackend

    from rlmetrics.trajectories import parse_trajectories, settings

    (good,) = parse_trajectories([RECORD], settings().text)
    backend = TrackioBackend(project=project, name="direct")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        backend.log_trajectories([object(), good, object()], 5, [None, None, None])  # type: ignore[list-item]
        backend.finish()
    said = [r.getMessage() for r in caplog.records if "Trackio trace" in r.getMessage()]
    assert len(said) == 1 and "it is skipped" in said[0]
    traces = SQLiteStorage.get_traces(project, run="direct")
    assert [(t["step"], t["metadata"]["sample_id"]) for t in traces] == [(5, "p3-2")]
    assert "trace_id" not in traces[0]["metadata"]  # not traced: no OpenTelemetry trace
