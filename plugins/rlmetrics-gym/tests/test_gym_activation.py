"""A process pays only for the Gym families it uses: with every Gym family loaded, a process
that never serves, samples, counts requests, operations or rollouts, nor verifies, exports
none of their series and creates none of their observable instruments (so none of their
callbacks ever runs); the first use creates them, after the registry froze."""

from __future__ import annotations

import asyncio
from typing import Any

from rlmetrics_gym import driver, http_client, resources, rollouts, runtime, server
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

import rlmetrics
from rlmetrics.testing import in_memory_telemetry, points

#: Every Gym group with observable series, and a name among them.
ON_USE = {
    server.GROUP: server.IN_FLIGHT,
    runtime.GROUP: runtime.CPU_TIME,
    http_client.GROUP: "gym.http.connection_pool.connect_total",
    resources.GROUP: "gym.resources.operation.queued",
    driver.GROUP: "gym.driver.rollouts.resident",
    rollouts.GROUP: rollouts.VERIFY_SUCCESS_RATE,
}


def _observable_instruments(group: str) -> list[Any]:
    session = rlmetrics.default_registry()._session
    assert session is not None
    return [
        series.instrument
        for series in session.groups[group].values()
        if series.spec.kind.observable and series.instrument is not None
    ]


def _names(reader: Any) -> set[str]:
    return {point.name for point in points(reader)}


async def _ok(_: Request) -> Response:
    return PlainTextResponse("ok")


async def _one_request(app: Any) -> None:
    sent: list[Any] = []
    received = iter([{"type": "http.request", "body": b"", "more_body": False}])

    async def receive() -> Any:
        return next(received, {"type": "http.disconnect"})

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/", "root_path": "", "headers": []}
    await app(scope, receive, send)


async def _one_operation() -> None:
    async with resources.resources_operation(None, "verify", "thread"):
        pass


def test_a_process_that_uses_no_gym_family_pays_nothing_at_collection() -> None:
    with in_memory_telemetry() as (_handle, reader):
        for _ in range(2):
            exported = _names(reader)
        for group, name in ON_USE.items():
            assert _observable_instruments(group) == [], group
            assert name not in exported


def test_each_family_is_created_by_its_first_use() -> None:
    with in_memory_telemetry() as (_handle, reader):
        app = server.GymServerMetricsMiddleware(Starlette(routes=[Route("/", _ok)]))
        asyncio.run(_one_request(app))
        runtime.enable_runtime_metrics()
        http_client._in_flight.add(http_client.destination_value("judge"))
        http_client._in_flight.add(http_client.destination_value("judge"), -1)
        asyncio.run(_one_operation())
        rollouts.record_verify(1.0, succeeded=True)
        exported = {point.name: point for point in points(reader)}
        for group in ON_USE.keys() - {driver.GROUP}:
            assert _observable_instruments(group), group
        assert exported[server.RESPONSES].value == 1
        assert exported[server.IN_FLIGHT].value == 0
        assert exported[runtime.CPU_TIME].value > 0
        assert exported["gym.http.client.requests.in_flight"].value == 0
        assert exported[rollouts.VERIFY_SUCCESS_RATE].value == 1.0
        # The driver's family is still unused, so still absent.
        assert _observable_instruments(driver.GROUP) == []
        assert "gym.driver.rollouts.resident" not in exported
