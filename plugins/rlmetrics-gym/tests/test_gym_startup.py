"""gym.server.startup_stage_duration_ms from a StartupTimeline: contiguous stages, stages
ended before telemetry started, worker and main-process points, refused stages."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import psutil
import pytest
from gym_support_client import find, total
from hypothesis import given
from hypothesis import strategies as st
from rlmetrics_gym.startup import (
    STAGE_DURATION,
    STAGES,
    StartupTimeline,
    process_start_ns,
    record_stage,
)

from rlmetrics.testing import in_memory_telemetry, isolated_state, points

NAME = "nemo.gym.server.name"
TYPE = "nemo.gym.server.type"
STAGE = "nemo.gym.startup.stage"
WORKER = "nemo.gym.server.worker"
MS = 1_000_000  # ns


def test_stages_before_telemetry_are_recorded_by_the_first_mark_while_exporting() -> None:
    timeline = StartupTimeline("math_with_judge", "resources_servers", started_ns=0)
    with isolated_state():
        assert timeline.mark("interpreter_start", now_ns=800 * MS) == 800.0
        assert timeline.mark("load_config", now_ns=850 * MS) == 50.0
        with in_memory_telemetry() as (_, reader):
            assert timeline.mark("init_telemetry", now_ns=900 * MS) == 50.0
            timeline.mark("setup_webserver", now_ns=1000 * MS)
            timeline.mark("uvicorn_startup", now_ns=3000 * MS)
            found = points(reader)
    by_stage = {p.attributes[STAGE]: p for p in find(found, STAGE_DURATION)}
    assert {stage: p.sum for stage, p in by_stage.items()} == {
        "interpreter_start": 800.0,
        "load_config": 50.0,
        "init_telemetry": 50.0,
        "setup_webserver": 100.0,
        "uvicorn_startup": 2000.0,
    }
    point = by_stage["load_config"]
    assert (point.unit, point.kind, point.count) == ("ms", "histogram", 1)
    # Its own buckets, from a reused venv to a model load: not the SDK's 0-10000 defaults.
    assert point.bounds[0] == 1.0 and point.bounds[-1] == 1_800_000.0
    assert point.attributes == {
        NAME: "math_with_judge",
        TYPE: "resources_servers",
        STAGE: "load_config",
        WORKER: "false",
    }
    # Contiguous: the stages add up to start → accepting connections.
    assert sum(p.sum or 0 for p in by_stage.values()) == 3000.0
    assert [stage for stage, _ in timeline.stages] == list(by_stage)


def test_a_worker_reports_its_own_stages_from_worker_start(telemetry: Any) -> None:
    _, reader = telemetry
    handoff = time.time_ns()
    main = StartupTimeline("policy", "responses_api_models", started_ns=handoff - 500 * MS)
    main.mark("init_server", now_ns=handoff)
    worker = StartupTimeline("policy", "responses_api_models", worker=True, started_ns=handoff)
    worker.mark("worker_start", now_ns=handoff + 300 * MS)
    worker.mark("init_server", now_ns=handoff + 700 * MS)
    found = points(reader)
    assert total(found, STAGE_DURATION, **{STAGE: "init_server", WORKER: "false"}) == (1, 500.0)
    assert total(found, STAGE_DURATION, **{STAGE: "init_server", WORKER: "true"}) == (1, 400.0)
    assert total(found, STAGE_DURATION, **{STAGE: "worker_start", WORKER: "true"}) == (1, 300.0)


def test_unknown_repeated_and_backwards_stages_are_refused(telemetry: Any, caplog: Any) -> None:
    _, reader = telemetry
    timeline = StartupTimeline("env", "resources_servers", started_ns=0)
    assert timeline.mark("warm_caches", now_ns=10 * MS) is None
    assert timeline.mark("load_config", now_ns=20 * MS) == 20.0
    assert timeline.mark("load_config", now_ns=30 * MS) is None
    assert timeline.mark("init_server", now_ns=5 * MS) is None
    assert not record_stage("warm_caches", 1.0, server_name="env", server_type="x")
    assert record_stage("venv_setup", 12.0, server_name="env", server_type="x")
    found = points(reader)
    stages = {p.attributes[STAGE]: p for p in find(found, STAGE_DURATION)}
    assert set(stages) == {"load_config", "venv_setup"}
    assert stages["venv_setup"].attributes[TYPE] == "other"
    assert "outside the stage list" in caplog.text and "marked twice" in caplog.text


def test_the_default_start_is_the_process_start() -> None:
    started = process_start_ns()
    assert abs(started / 1e9 - psutil.Process(os.getpid()).create_time()) < 1.0
    assert started <= time.time_ns()


_CHILD = """
import time
first = time.time_ns()
from rlmetrics_gym.startup import process_start_ns
print(process_start_ns(), first)
"""


def test_a_process_start_falls_between_its_spawn_and_its_first_statement() -> None:
    # psutil's create_time adds the process's start ticks to /proc/stat's btime, whole seconds:
    # up to a second before the process existed, all of it counted as interpreter_start.
    spawned = time.time_ns()
    child = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=60, check=True
    )
    started, first = map(int, child.stdout.split())
    tick = 1_000_000_000 // os.sysconf("SC_CLK_TCK") if sys.platform == "linux" else 10**9
    # Orderings, not durations: the start is known to one clock tick (10 ms), no finer.
    assert spawned - tick - MS <= started <= first


@given(st.permutations(STAGES), st.lists(st.integers(0, 10**12), min_size=11, max_size=11))
def test_marked_stages_always_add_up_to_the_last_mark(order: list[str], steps: list[int]) -> None:
    timeline = StartupTimeline("env", "resources_servers", started_ns=0)
    now = 0
    for stage, step in zip(order, steps, strict=True):
        now += step
        timeline.mark(stage, now_ns=now)
    assert [stage for stage, _ in timeline.stages] == list(order)
    assert abs(sum(ms for _, ms in timeline.stages) - now / 1e6) < 1e-6 * max(1, now / 1e6)


def test_a_start_or_mark_that_is_no_ns_timestamp_is_refused_not_recorded(
    telemetry: Any, caplog: Any
) -> None:
    """``time.time()`` (float seconds) where ``time.time_ns()`` belongs made every stage 56
    years long; a mark given no timestamp at all raised into the server's startup."""
    _, reader = telemetry
    with pytest.raises(ValueError, match=r"time\.time_ns"):
        StartupTimeline("env", "resources_servers", started_ns=time.time())  # type: ignore[arg-type]
    timeline = StartupTimeline("env", "resources_servers", started_ns=0)
    assert timeline.mark("load_config", now_ns="soon") is None  # type: ignore[arg-type]
    assert timeline.mark("init_server", now_ns=5 * MS) == 5.0
    assert [p.attributes[STAGE] for p in find(points(reader), STAGE_DURATION)] == ["init_server"]
    assert "time_ns" in caplog.text
