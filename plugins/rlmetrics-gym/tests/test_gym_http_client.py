"""In-flight requests and connection-pool metrics from a real aiohttp client against a real
aiohttp server on 127.0.0.1, with pool limits small enough that acquisitions queue."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from gym_support_client import HeldServer, eventually, find, held_server, run, total, value_of
from rlmetrics_gym.http_client import (
    CONNECT_DURATION,
    CONNECT_TOTAL,
    IN_FLIGHT,
    QUEUE_DURATION,
    http_destination,
    instrumented_session,
    trace_config,
)

from rlmetrics.testing import in_memory_telemetry, isolated_state, points

DESTINATION = "nemo.gym.http.destination.server.name"
OUTCOME = "nemo.gym.http.connection_pool.queue.outcome"
CONSTRAINT = "nemo.gym.http.connection_pool.constraint"
POLICY = {DESTINATION: "policy_model"}


async def get_text(
    session: aiohttp.ClientSession, url: str, destination: str | None = "policy_model"
) -> str:
    """GET ``url`` on ``session`` for ``destination`` (None: no destination set)."""
    labelled = contextlib.nullcontext() if destination is None else http_destination(destination)
    with labelled:
        async with session.get(url) as response:
            return await response.text()


def queued_signal() -> tuple[aiohttp.TraceConfig, asyncio.Event]:
    """A test-side TraceConfig (aiohttp's own hook) telling the test an acquisition queued."""
    queued = asyncio.Event()

    async def on_queued(_session: Any, _context: SimpleNamespace, _params: Any) -> None:
        queued.set()

    config = aiohttp.TraceConfig()
    config.on_connection_queued_start.append(on_queued)
    return config, queued


async def hold_then_queue(
    server: HeldServer,
    session: aiohttp.ClientSession,
    queued: asyncio.Event,
    second: Callable[[], Awaitable[Any]],
) -> tuple[asyncio.Task[Any], asyncio.Task[Any]]:
    """Start a request the server holds (it occupies the pool's only slot), then ``second``,
    which must queue; returns both tasks once the second is queued."""

    first = asyncio.create_task(get_text(session, f"{server.url}/hold"))
    await eventually(lambda: server.arrived == 1, "the held request reached the server")
    waiting = asyncio.create_task(second())
    await asyncio.wait_for(queued.wait(), 10)
    return first, waiting


def test_a_queued_acquisition_on_the_total_limit(telemetry: Any) -> None:
    _, reader = telemetry

    async def main() -> None:
        signal, queued = queued_signal()
        async with (
            held_server() as server,
            instrumented_session(connector_kwargs={"limit": 1}, trace_configs=[signal]) as session,
        ):

            def fast() -> Awaitable[str]:
                return get_text(session, f"{server.url}/fast")

            first, second = await hold_then_queue(server, session, queued, fast)
            # Both requests wait for their headers: one at the server, one in the pool.
            assert value_of(reader, IN_FLIGHT, **POLICY) == 2
            server.release()
            assert await first == "held" and await second == "fast"
            assert value_of(reader, IN_FLIGHT, **POLICY) == 0

    run(main())
    found = points(reader)
    (sample,) = find(found, QUEUE_DURATION)
    assert sample.attributes == {**POLICY, OUTCOME: "ok", CONSTRAINT: "total"}
    assert (sample.count, sample.unit) == (1, "ms") and (sample.sum or 0) > 0
    (connects,) = find(found, CONNECT_TOTAL)
    assert (connects.value, connects.unit, connects.monotonic) == (2, "{connection}", True)
    # The second request reused the first one's connection: only one was opened.
    assert total(found, CONNECT_DURATION, **POLICY)[0] == 1
    (in_flight,) = find(found, IN_FLIGHT)
    assert (in_flight.unit, in_flight.kind, in_flight.monotonic) == ("{request}", "sum", False)


def test_a_queued_acquisition_on_the_per_host_limit(telemetry: Any) -> None:
    _, reader = telemetry

    async def main() -> None:
        signal, queued = queued_signal()
        async with (
            held_server() as server,
            instrumented_session(
                connector_kwargs={"limit": 10, "limit_per_host": 1}, trace_configs=[signal]
            ) as session,
        ):

            def fast() -> Awaitable[str]:
                return get_text(session, f"{server.url}/fast")

            first, second = await hold_then_queue(server, session, queued, fast)
            server.release()
            await asyncio.gather(first, second)

    run(main())
    (sample,) = find(points(reader), QUEUE_DURATION)
    assert sample.attributes == {**POLICY, OUTCOME: "ok", CONSTRAINT: "per_host"}


def test_a_wait_ended_by_the_connect_timeout_is_abandoned(telemetry: Any) -> None:
    _, reader = telemetry

    async def main() -> None:
        signal, queued = queued_signal()
        async with (
            held_server() as server,
            instrumented_session(connector_kwargs={"limit": 1}, trace_configs=[signal]) as session,
        ):

            async def impatient() -> None:
                with http_destination("judge"):
                    timeout = aiohttp.ClientTimeout(connect=0.05)
                    async with session.get(f"{server.url}/fast", timeout=timeout):
                        raise AssertionError("never got a slot")

            first, second = await hold_then_queue(server, session, queued, impatient)
            with pytest.raises(asyncio.TimeoutError):  # aiohttp's ConnectionTimeoutError
                await second
            assert value_of(reader, IN_FLIGHT, **{DESTINATION: "judge"}) == 0
            server.release()
            await first

    run(main())
    found = points(reader)
    (sample,) = find(found, QUEUE_DURATION)
    assert sample.attributes == {DESTINATION: "judge", OUTCOME: "abandoned", CONSTRAINT: "total"}
    assert (sample.sum or 0) >= 40  # it waited for (about) the connect timeout
    assert value_of(reader, CONNECT_TOTAL, **{DESTINATION: "judge"}) == 1  # counted anyway


def test_a_wait_ended_by_cancellation_is_abandoned(telemetry: Any) -> None:
    _, reader = telemetry

    async def main() -> None:
        signal, queued = queued_signal()
        async with (
            held_server() as server,
            instrumented_session(connector_kwargs={"limit": 1}, trace_configs=[signal]) as session,
        ):

            async def unlabelled() -> None:
                async with session.get(f"{server.url}/fast"):
                    raise AssertionError("never got a slot")

            first, second = await hold_then_queue(server, session, queued, unlabelled)
            second.cancel()
            with pytest.raises(asyncio.CancelledError):
                await second
            server.release()
            await first
            # After a cancelled waiter the pool still serves: the slot was not leaked.
            async with session.get(f"{server.url}/fast") as response:
                assert await response.text() == "fast"

    run(main())
    found = points(reader)
    (sample,) = find(found, QUEUE_DURATION)
    assert sample.attributes == {DESTINATION: "external", OUTCOME: "abandoned", CONSTRAINT: "total"}
    assert value_of(reader, IN_FLIGHT, **{DESTINATION: "external"}) == 0
    assert value_of(reader, CONNECT_TOTAL, **{DESTINATION: "external"}) == 2


def test_each_redirect_hop_is_its_own_acquisition(telemetry: Any) -> None:
    _, reader = telemetry

    async def main() -> None:
        async with held_server() as server, instrumented_session() as session:
            with http_destination("remote_agent_service"):
                async with session.get(f"{server.url}/redirect") as response:
                    assert await response.text() == "fast"

    run(main())
    found = points(reader)
    target = {DESTINATION: "remote_agent_service"}
    assert value_of(reader, CONNECT_TOTAL, **target) == 2  # one connect() per hop
    assert total(found, CONNECT_DURATION, **target)[0] == 1  # the second hop reused it
    assert find(found, QUEUE_DURATION) == []  # nothing queued: no sample


def test_a_plain_connector_with_the_trace_config_counts_in_flight_only(telemetry: Any) -> None:
    _, reader = telemetry

    async def main() -> None:
        async with (
            held_server() as server,
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=1), trace_configs=[trace_config()]
            ) as session,
        ):
            with http_destination("policy_model"):
                async with session.get(f"{server.url}/fast") as response:
                    assert value_of(reader, IN_FLIGHT, **POLICY) == 0  # headers are in
                    assert await response.text() == "fast"

    run(main())
    found = points(reader)
    assert find(found, CONNECT_TOTAL) == [] and find(found, CONNECT_DURATION) == []


def test_requests_work_the_same_without_telemetry() -> None:
    async def main() -> list[str]:
        async with (
            held_server() as server,
            instrumented_session(connector_kwargs={"limit": 1}) as session,
        ):
            server.release()
            paths = ("/hold", "/fast", "/redirect")
            return list(
                await asyncio.gather(*(get_text(session, server.url + p, None) for p in paths))
            )

    with isolated_state():
        assert run(main()) == ["held", "fast", "fast"]


def test_connect_total_starts_again_with_each_telemetry_session() -> None:
    async def one_request() -> None:
        async with (
            held_server() as server,
            instrumented_session() as session,
            session.get(f"{server.url}/fast") as response,
        ):
            await response.read()

    for _ in range(2):
        with isolated_state(), in_memory_telemetry() as (_, reader):
            run(one_request())
            assert value_of(reader, CONNECT_TOTAL, **{DESTINATION: "external"}) == 1


def test_instrumented_session_builds_its_own_connector() -> None:
    async def main() -> None:
        with pytest.raises(TypeError, match="connector_kwargs"):
            instrumented_session(connector=aiohttp.TCPConnector())

    run(main())
