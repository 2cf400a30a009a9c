"""What one test counted or chose in this distribution's module state never reaches the next
test: the outermost ``rlmetrics.testing.isolated_state()`` (the conftest's autouse fixture)
runs every module's process-state reset when a test starts and when it ends.

Each test plays two tests in a row, each in an isolated_state() made outermost: the first
does real work (resources operations on an asyncio semaphore, driver rollouts, a request
through the middleware under uvicorn, outbound destinations, the process's choices); the
second starts telemetry afresh and must find none of it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from gym_support_server import get, serve_test_app
from rlmetrics_gym import health, http_client, rollouts, runtime
from rlmetrics_gym.driver import driver_rollout
from rlmetrics_gym.http_client import MAX_DESTINATIONS, OVERFLOW, destination_value
from rlmetrics_gym.resources import resources_operation
from rlmetrics_gym.rollouts import failure_kind_value, register_failure_kinds
from rlmetrics_gym.runtime import FD_COUNT, FD_COUNT_UNIX, _switch, report_file_descriptors_as
from rlmetrics_gym.runtime import process as runtime_process

from rlmetrics import testing
from rlmetrics.testing import in_memory_telemetry, isolated_state, points


@pytest.fixture(autouse=True)
def between_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's own isolated_state() blocks act as the outermost, as a test's is."""
    monkeypatch.setattr(testing, "_depth", [])


def _gym_points(reader: Any) -> list[Any]:
    return [p for p in points(reader) if p.name.startswith("gym.")]


def test_what_one_test_counted_never_reaches_the_next() -> None:
    async def work() -> None:
        limit = asyncio.Semaphore(1)
        async with resources_operation(limit, operation="verify", executor="subprocess"):
            pass
        async with driver_rollout(asyncio.Semaphore(1)):
            pass

    with isolated_state(), in_memory_telemetry() as (_handle, reader):  # the earlier test
        asyncio.run(work())
        with serve_test_app() as (served, _holds):
            assert get(served.port, "/ok")[0] == 200
        counted = {p.name for p in _gym_points(reader)}
        # Every up/down count is back at 0, and stays exported at 0 while this test runs.
        assert {
            "gym.resources.operation.queued",
            "gym.resources.operation.active",
            "gym.driver.rollouts.active",
            "gym.server.responses_total",
        } <= counted

    with isolated_state(), in_memory_telemetry() as (_handle, reader):  # the next test
        assert _gym_points(reader) == []


def test_a_middleware_built_before_a_reset_counts_again_once_it_serves() -> None:
    with serve_test_app() as (served, _holds):
        with isolated_state(), in_memory_telemetry() as (_handle, reader):
            assert get(served.port, "/ok")[0] == 200
            before = [p for p in _gym_points(reader) if p.name == "gym.server.responses_total"]
            assert [p.value for p in before] == [1]
        with isolated_state(), in_memory_telemetry() as (_handle, reader):
            assert _gym_points(reader) == []  # from zero, and out of the series until it serves
            assert get(served.port, "/ok")[0] == 200
            after = [p for p in _gym_points(reader) if p.name == "gym.server.responses_total"]
            assert [p.value for p in after] == [1]


def test_what_one_test_chose_for_the_process_never_reaches_the_next() -> None:
    with isolated_state():  # the earlier test
        register_failure_kinds("sandbox_oom")
        report_file_descriptors_as(FD_COUNT_UNIX)
        health.configure_health(ignored_checks=[])
        configured = health.default_suite()
        runtime.enable_runtime_metrics()
        for index in range(MAX_DESTINATIONS):
            destination_value(f"server-{index}")
        assert destination_value("one-more") == OVERFLOW

    with isolated_state():  # the next test
        assert failure_kind_value("sandbox_oom") == rollouts.UNREGISTERED_KIND
        assert runtime_process._fd_names == frozenset({FD_COUNT})
        assert health.default_suite() is not configured
        assert _switch.enabled_for == [None]
        assert destination_value("one-more") == "one-more"
        assert http_client._in_flight.snapshot() == {}
