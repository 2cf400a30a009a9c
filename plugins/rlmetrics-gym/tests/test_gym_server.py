"""The ASGI middleware under a real uvicorn on 127.0.0.1, serving a real Starlette app, hit by
real HTTP clients (http.client, raw sockets); counts read back from the in-memory reader."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from gym_support_server import (
    DEADLINE_S,
    HandlerFailed,
    Holds,
    Served,
    counter_values,
    delta,
    get,
    hold_and_leave,
    serve,
    serve_test_app,
    wait_equal,
    wait_until,
)
from rlmetrics_gym.server import (
    BEFORE_RESPONSE_START,
    CANCELLED,
    IN_FLIGHT,
    PHASE_ATTR,
    RESPONSE_STARTED,
    RESPONSES,
    ROUTE_ATTR,
    STATUS_ATTR,
    UNHANDLED,
    UNMATCHED,
    GymServerMetricsMiddleware,
)
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.middleware.body_limit import RequestBodyLimitMiddleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from rlmetrics.testing import points, single


@pytest.fixture
def served() -> Iterator[tuple[Served, Holds]]:
    """The test app under a real uvicorn on 127.0.0.1: ``(served, holds)``."""
    with serve_test_app() as running:
        yield running


def responses(status: int) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return (RESPONSES, ((STATUS_ATTR, status),))  # an int, as the conventions type it


def cancelled(route: str, phase: str) -> tuple[str, tuple[tuple[str, Any], ...]]:
    return (CANCELLED, tuple(sorted({ROUTE_ATTR: route, PHASE_ATTR: phase}.items())))


UNHANDLED_KEY = (UNHANDLED, ())


def in_flight(reader: Any) -> float:
    value = single(points(reader), IN_FLIGHT).value
    assert value is not None
    return value


def test_series_are_declared_with_their_units_and_kinds(telemetry: Any) -> None:
    _, reader = telemetry
    GymServerMetricsMiddleware(Starlette())  # a process reports them once it serves
    found = {p.name: p for p in points(reader) if p.name.startswith("gym.server.")}
    assert found[IN_FLIGHT].unit == "{request}"
    assert (found[IN_FLIGHT].kind, found[IN_FLIGHT].monotonic) == ("sum", False)
    assert (found[UNHANDLED].kind, found[UNHANDLED].monotonic) == ("sum", True)


def test_responses_by_status_normal_404_handled_and_raising(
    telemetry: Any, served: tuple[Served, Holds]
) -> None:
    _, reader = telemetry
    running, _ = served
    before = counter_values(reader)
    assert get(running.port, "/ok") == (200, b"ok")
    assert get(running.port, "/items/7") == (200, b'{"item_id":"7"}')
    assert get(running.port, "/missing")[0] == 404
    assert get(running.port, "/teapot")[0] == 418  # HTTPException: a response
    assert get(running.port, "/boom")[0] == 500  # raised: Starlette answers 500, then re-raises
    # The client has its 500 before the exception has left the middleware: wait for it.
    wait_equal(
        lambda: delta(before, counter_values(reader)),
        {
            responses(200): 2,
            responses(404): 1,
            responses(418): 1,
            responses(500): 1,
            UNHANDLED_KEY: 1,
        },
    )


def test_add_middleware_placement_counts_the_same(telemetry: Any) -> None:
    """Inside Starlette's error middleware the exception passes by before any response: it is
    counted as the 500 the outer middleware then sends."""
    _, reader = telemetry

    async def boom(_: Request) -> Response:
        raise HandlerFailed("unhandled on purpose")

    async def ok(_: Request) -> Response:
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route("/boom", boom), Route("/ok", ok)])
    app.add_middleware(GymServerMetricsMiddleware)
    holds = Holds()
    before = counter_values(reader)
    with serve(holds.middleware(app)) as running:
        assert get(running.port, "/boom")[0] == 500
        assert get(running.port, "/ok")[0] == 200
        hold_and_leave(running, holds, ["/ok"])  # the client leaves before the response
        expected = {
            responses(500): 1,
            responses(200): 1,
            UNHANDLED_KEY: 1,
            cancelled("/ok", BEFORE_RESPONSE_START): 1,
        }
        wait_equal(lambda: delta(before, counter_values(reader)), expected)
        wait_until(lambda: in_flight(reader) == 0)
    assert delta(before, counter_values(reader)) == expected


async def _echo_length(request: Request) -> Response:
    return PlainTextResponse(str(len(await request.body())))


async def _two_lines(_: Request) -> Response:
    async def lines() -> AsyncIterator[str]:
        yield "a\n"
        yield "b\n"

    return StreamingResponse(lines())


async def _add_header(request: Request, call_next: RequestResponseEndpoint) -> Response:
    """What FastAPI's ``@app.middleware("http")`` adds: a BaseHTTPMiddleware."""
    response = await call_next(request)
    response.headers["x-served-by"] = "outer"
    return response


def _exchange(port: int, method: str, path: str, body: bytes | None = None) -> tuple[Any, ...]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=DEADLINE_S)
    try:
        conn.request(method, path, body=body)
        response = conn.getresponse()
        return response.status, response.read(), response.getheader("x-served-by")
    finally:
        conn.close()


def test_inside_a_base_http_middleware_a_body_read_and_a_stream_are_served_as_without_it(
    telemetry: Any,
) -> None:
    """add_middleware(GymServerMetricsMiddleware), then a BaseHTTPMiddleware outside it: the
    receive the middleware gets opens an anyio task group; the app's body read and its
    streaming response go through unchanged, and are counted."""
    _, reader = telemetry
    app = Starlette(
        routes=[Route("/echo", _echo_length, methods=["POST"]), Route("/stream", _two_lines)]
    )
    app.add_middleware(GymServerMetricsMiddleware)
    app.add_middleware(BaseHTTPMiddleware, dispatch=_add_header)
    before = counter_values(reader)
    with serve(app) as running:
        assert _exchange(running.port, "POST", "/echo", b"abc") == (200, b"3", "outer")
        assert _exchange(running.port, "GET", "/stream") == (200, b"a\nb\n", "outer")
        wait_equal(lambda: delta(before, counter_values(reader)), {responses(200): 2})
        wait_until(lambda: in_flight(reader) == 0)


async def _slow_events(_: Request) -> Response:
    async def stream() -> AsyncIterator[str]:
        for n in range(2000):  # 10 s at most if the client never leaves
            yield f"data: {n}\n\n"
            await asyncio.sleep(0.005)

    return StreamingResponse(stream(), media_type="text/event-stream")


def test_behind_a_base_http_middleware_a_stream_left_and_a_response_sent_unread_are_told(
    telemetry: Any,
) -> None:
    """When a layer outside it replaces ``receive`` (FastAPI's ``@app.middleware("http")``
    added after it): a stream the client leaves is seen through the stream's own
    ``receive()``; a client that left before a response that reads nothing is seen through
    uvicorn's request cycle behind that layer's ``receive``."""
    _, reader = telemetry
    app = Starlette(routes=[Route("/events", _slow_events), Route("/ok", _return_ok)])
    app.add_middleware(GymServerMetricsMiddleware)
    app.add_middleware(BaseHTTPMiddleware, dispatch=_add_header)
    holds = Holds()
    with serve(holds.middleware(app)) as running:
        before = counter_values(reader)
        conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=DEADLINE_S)
        try:
            conn.request("GET", "/events")
            response = conn.getresponse()
            assert (response.status, response.getheader("x-served-by")) == (200, "outer")
            assert response.read(6) == b"data: "  # the first event arrived
        finally:
            conn.close()  # the client leaves mid-stream
        expected = {responses(200): 1, cancelled("/events", RESPONSE_STARTED): 1}
        wait_equal(lambda: delta(before, counter_values(reader)), expected)
        wait_until(lambda: in_flight(reader) == 0)
        before = counter_values(reader)
        hold_and_leave(running, holds, ["/ok"])
        expected = {cancelled("/ok", BEFORE_RESPONSE_START): 1}
        wait_equal(lambda: delta(before, counter_values(reader)), expected)
        wait_until(lambda: in_flight(reader) == 0)
        assert delta(before, counter_values(reader)) == expected


def _buffering(app: Any) -> Any:
    """A body-buffering ASGI middleware, as users write them: it reads the whole body, then
    hands the app a ``receive`` of its own that replays it (and passes later calls on)."""

    async def buffered(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False) and message["type"] == "http.request"
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return buffered


@pytest.mark.parametrize(
    "outer",
    [
        Middleware(BaseHTTPMiddleware, dispatch=_add_header),
        Middleware(RequestBodyLimitMiddleware, max_body_size=1 << 20),
        Middleware(_buffering),
        Middleware(GZipMiddleware),
    ],
    ids=["base_http", "body_limit", "buffering", "gzip"],
)
def test_a_client_that_left_before_an_unread_response_is_told_behind_any_layer(
    telemetry: Any, outer: Middleware
) -> None:
    """add_middleware(GymServerMetricsMiddleware), then a layer that replaces ``receive`` (or
    ``send``) outside it: a client that left before a response that reads nothing is still a
    cancellation, not a response (uvicorn drops that response without a word)."""
    _, reader = telemetry
    app = Starlette(routes=[Route("/ok", _return_ok)])
    app.add_middleware(GymServerMetricsMiddleware)
    app.add_middleware(outer.cls, *outer.args, **outer.kwargs)
    holds = Holds()
    with serve(holds.middleware(app)) as running:
        assert get(running.port, "/ok") == (200, b"ok")
        wait_until(lambda: in_flight(reader) == 0)
        before = counter_values(reader)
        hold_and_leave(running, holds, ["/ok", "/ok"])
        expected = {cancelled("/ok", BEFORE_RESPONSE_START): 2}
        wait_equal(lambda: delta(before, counter_values(reader)), expected)
        wait_until(lambda: in_flight(reader) == 0)
        assert delta(before, counter_values(reader)) == expected


async def _refuse_unread(_: Request) -> Response:
    return PlainTextResponse("too large", status_code=413)  # the body is never read


def _first_line_after_expect_continue(app: Any) -> bytes:
    """The first line the server answers a POST announcing 100 MB with ``Expect:
    100-continue`` (and sending none of it) with."""
    with (
        serve(app) as running,
        socket.create_connection(("127.0.0.1", running.port), timeout=DEADLINE_S) as client,
    ):
        client.sendall(
            b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000000\r\n"
            b"Expect: 100-continue\r\n\r\n"
        )
        answer = b""
        while b"\r\n" not in answer:
            chunk = client.recv(4096)
            if not chunk:
                break
            answer += chunk
        return answer.split(b"\r\n", 1)[0]


def test_an_expect_100_continue_request_refused_unread_is_answered_as_without_it(
    telemetry: Any,
) -> None:
    """The middleware does not change the exchange: no ``100 Continue`` invites the upload the
    app refused without reading, in either placement."""
    _, reader = telemetry

    def app() -> Starlette:
        return Starlette(routes=[Route("/upload", _refuse_unread, methods=["POST"])])

    bare = _first_line_after_expect_continue(app())
    assert bare.startswith(b"HTTP/1.1 413")
    before = counter_values(reader)
    assert _first_line_after_expect_continue(GymServerMetricsMiddleware(app())) == bare
    added = app()
    added.add_middleware(GymServerMetricsMiddleware)
    assert _first_line_after_expect_continue(added) == bare
    wait_equal(lambda: delta(before, counter_values(reader)), {responses(413): 2})


def _call_in_process(app: Any, path: str, scope: dict[str, Any] | None = None) -> list[Any]:
    """One GET of ``path`` through ``app``, called the way an ASGI server calls it; the
    messages sent. ``scope`` (reused as given) else a fresh one."""
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    if scope is None:
        scope = _get_scope(path)
    with contextlib.suppress(HandlerFailed):
        asyncio.run(app(scope, receive, send))
    return sent


def _get_scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


async def _boom(_: Request) -> Response:
    raise HandlerFailed("unhandled on purpose")


def test_the_middleware_applied_twice_counts_once_and_says_so_once(
    telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Wrapped around the app and added with ``Middleware(...)`` too: the outer one counts,
    the inner one passes the request through, and one warning says what to remove."""
    _, reader = telemetry
    inner = Starlette(
        routes=[Route("/ok", _return_ok), Route("/boom", _boom)],
        middleware=[Middleware(GymServerMetricsMiddleware)],
    )
    app = GymServerMetricsMiddleware(inner)
    before = counter_values(reader)
    for _ in range(3):
        assert _call_in_process(app, "/ok")[0]["status"] == 200
    assert _call_in_process(app, "/boom")[0]["status"] == 500
    assert delta(before, counter_values(reader)) == {
        responses(200): 3,
        responses(500): 1,
        UNHANDLED_KEY: 1,
    }
    said = [r for r in caplog.records if "more than once" in r.getMessage()]
    assert len(said) == 1 and said[0].name == "rlmetrics"


def test_one_scope_reused_for_requests_one_after_another_counts_each(telemetry: Any) -> None:
    """What marks a request as counted goes with the request: a test harness that reuses one
    scope dict is not taken for the middleware applied twice."""
    _, reader = telemetry
    app = GymServerMetricsMiddleware(Starlette(routes=[Route("/ok", _return_ok)]))
    scope = _get_scope("/ok")
    before = counter_values(reader)
    for _ in range(3):
        assert _call_in_process(app, "/ok", scope)[0]["status"] == 200
    assert delta(before, counter_values(reader)) == {responses(200): 3}


def test_in_flight_counts_a_request_until_it_ends(
    telemetry: Any, served: tuple[Served, Holds]
) -> None:
    _, reader = telemetry
    running, holds = served
    token = "in-flight"
    client = socket.create_connection(("127.0.0.1", running.port), timeout=DEADLINE_S)
    with client:
        client.sendall(f"GET /ok HTTP/1.1\r\nHost: 127.0.0.1\r\nx-hold: {token}\r\n\r\n".encode())
        assert holds.entered(token).wait(DEADLINE_S)
        assert in_flight(reader) == 1
        holds.release(token)
        assert client.recv(1024).startswith(b"HTTP/1.1 200")
    wait_until(lambda: in_flight(reader) == 0, what="in_flight back to 0")


def test_templated_route_cancelled_with_many_ids_is_one_series(
    telemetry: Any, served: tuple[Served, Holds]
) -> None:
    _, reader = telemetry
    running, holds = served
    before = counter_values(reader)
    ids = ["1", "42", "abc", "9f86d081", "rollout-7", "x" * 40, "0", "2", "3", "4", "5", "6"]
    hold_and_leave(running, holds, [f"/items/{item_id}" for item_id in ids])
    key = cancelled("/items/{item_id}", BEFORE_RESPONSE_START)
    wait_until(lambda: delta(before, counter_values(reader)).get(key) == len(ids))
    wait_until(lambda: in_flight(reader) == 0)
    # One series; the responses sent to nobody are not counted as responses.
    assert delta(before, counter_values(reader)) == {key: len(ids)}


def test_cancelled_route_is_the_template_after_prefix_and_mount_else_unmatched(
    telemetry: Any, served: tuple[Served, Holds]
) -> None:
    _, reader = telemetry
    running, holds = served
    before = counter_values(reader)
    hold_and_leave(
        running,
        holds,
        [
            "/rollouts/r-17/items/5",  # the rollout prefix is stripped before matching
            "/rollouts/r-18/items/6",
            "/api/things/3",  # inside a Mount: the mount's path + the route's template
            "/api/things/not-an-int",  # the convertor refuses it: no route
            "/nowhere/5",
        ],
    )
    expected = {
        cancelled("/items/{item_id}", BEFORE_RESPONSE_START): 2,
        cancelled("/api/things/{thing_id}", BEFORE_RESPONSE_START): 1,
        cancelled(UNMATCHED, BEFORE_RESPONSE_START): 2,
    }
    wait_equal(lambda: delta(before, counter_values(reader)), expected)
    wait_until(lambda: in_flight(reader) == 0)


def test_sse_client_leaving_mid_stream_is_cancelled_after_response_start(
    telemetry: Any, served: tuple[Served, Holds]
) -> None:
    _, reader = telemetry
    running, _ = served
    before = counter_values(reader)
    conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=DEADLINE_S)
    try:
        conn.request("GET", "/events")
        response = conn.getresponse()
        assert response.status == 200
        assert response.getheader("content-type", "").startswith("text/event-stream")
        events = 0
        while events < 2:
            line = response.fp.readline()
            assert line, "the stream ended early"
            events += line.startswith(b"data: ")
    finally:
        conn.close()  # the client leaves mid-stream
    expected = {responses(200): 1, cancelled("/events", RESPONSE_STARTED): 1}
    wait_equal(lambda: delta(before, counter_values(reader)), expected)
    wait_until(lambda: in_flight(reader) == 0)


def test_a_response_sent_before_the_body_is_read_still_gets_its_body(telemetry: Any) -> None:
    """The poll at response start may take the request body from the server; the app's next
    receive() gets it."""
    _, reader = telemetry

    async def echo_after_start(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        await send({"type": "http.response.body", "body": body})

    before = counter_values(reader)
    with serve(GymServerMetricsMiddleware(echo_after_start)) as running:
        conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=DEADLINE_S)
        try:
            conn.request("POST", "/echo", body=b"hello, gym")
            response = conn.getresponse()
            assert (response.status, response.read()) == (200, b"hello, gym")
        finally:
            conn.close()
    assert delta(before, counter_values(reader)) == {responses(200): 1}


# -- cancellation (CancelledError), as servers that cancel the app on disconnect deliver it ----


async def _run_until_cancelled(app: Any, path: str, parked: asyncio.Event) -> list[str]:
    """Call the middleware-wrapped ``app`` the way an ASGI server does and, once the handler
    is parked, cancel the request task (what hypercorn does when the client leaves)."""
    sent: list[str] = []
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # the client says nothing more
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    scope = {
        **_get_scope(path),
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "headers": [(b"host", b"127.0.0.1")],
    }
    task = asyncio.ensure_future(app(scope, receive, send))
    await asyncio.wait_for(parked.wait(), DEADLINE_S)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return sent


def test_cancellation_is_counted_by_phase_and_re_raised(telemetry: Any) -> None:
    _, reader = telemetry
    parked: dict[str, asyncio.Event] = {}

    async def park(_: Request) -> Response:
        parked["/park/3"].set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def stream_forever(_: Request) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"data: 1\n\n"
            parked["/stream"].set()  # the first chunk went out
            await asyncio.Event().wait()

        return StreamingResponse(chunks(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/park/{n}", park), Route("/stream", stream_forever)])
    wrapped = GymServerMetricsMiddleware(app)
    before = counter_values(reader)

    async def scenario() -> None:
        parked.update({"/park/3": asyncio.Event(), "/stream": asyncio.Event()})
        assert await _run_until_cancelled(wrapped, "/park/3", parked["/park/3"]) == []
        sent = await _run_until_cancelled(wrapped, "/stream", parked["/stream"])
        assert sent == ["http.response.start", "http.response.body"]

    asyncio.run(scenario())
    assert delta(before, counter_values(reader)) == {
        cancelled("/park/{n}", BEFORE_RESPONSE_START): 1,
        cancelled("/stream", RESPONSE_STARTED): 1,
        responses(200): 1,
    }
    assert in_flight(reader) == 0


def test_lifespan_and_websocket_scopes_pass_through(telemetry: Any) -> None:
    _, reader = telemetry
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    wrapped = GymServerMetricsMiddleware(app)
    before = counter_values(reader)

    async def noop_receive() -> dict[str, Any]:
        return {}

    async def noop_send(_: Any) -> None:
        return None

    asyncio.run(wrapped({"type": "lifespan"}, noop_receive, noop_send))
    asyncio.run(wrapped({"type": "websocket", "path": "/ws"}, noop_receive, noop_send))
    assert seen == ["lifespan", "websocket"]
    assert delta(before, counter_values(reader)) == {}


def test_app_returning_without_finishing_after_the_client_left_is_cancelled(
    telemetry: Any,
) -> None:
    """An app that stops streaming on its own once the client is gone (no exception)."""
    _, reader = telemetry
    holds = Holds()

    async def half_stream(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        await holds.middleware(_return_immediately)(scope, receive, send)

    before = counter_values(reader)
    with serve(GymServerMetricsMiddleware(half_stream)) as running:
        hold_and_leave(running, holds, ["/half"])
        expected = {responses(200): 1, cancelled(UNMATCHED, RESPONSE_STARTED): 1}
        wait_equal(lambda: delta(before, counter_values(reader)), expected)


async def _return_immediately(scope: Any, receive: Any, send: Any) -> None:
    return None


def test_route_templates_come_from_the_wrapped_app_or_the_app_the_request_reached() -> None:
    """Without ``routes=``: the wrapped app's own routes, else ``scope["app"]`` (what Starlette
    sets when the middleware sits inside it), else ``<unmatched>``."""
    starlette_app = Starlette(routes=[Route("/items/{item_id}", _return_ok)])
    scope = {"type": "http", "method": "GET", "path": "/items/9"}
    assert GymServerMetricsMiddleware(starlette_app).template(scope) == "/items/{item_id}"
    behind_a_function = GymServerMetricsMiddleware(Holds().middleware(starlette_app))
    assert behind_a_function.template(scope) == UNMATCHED
    assert behind_a_function.template({**scope, "app": starlette_app}) == "/items/{item_id}"
    assert behind_a_function.template({**scope, "router": starlette_app.router}) == (
        "/items/{item_id}"
    )


async def _return_ok(_: Request) -> Response:
    return PlainTextResponse("ok")


def test_a_status_outside_100_599_is_left_out_with_a_warning(
    telemetry: Any, caplog: pytest.LogCaptureFixture
) -> None:
    _, reader = telemetry

    async def odd_status(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 999, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    wrapped = GymServerMetricsMiddleware(odd_status)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(_: Any) -> None:
        return None

    before = counter_values(reader)
    asyncio.run(wrapped({"type": "http", "method": "GET", "path": "/"}, receive, send))
    assert wrapped.totals.responses == {999: 1}
    assert delta(before, counter_values(reader)) == {}
    assert "outside 100-599" in caplog.text


def _docs_example() -> dict[str, Any]:
    """The rollout-prefix example of docs/gym-server.md, run as the page shows it."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "gym-server.md").read_text()
    code = page.split("<!-- rollout-prefix-example -->", 1)[1].split("```python\n", 1)[1]
    namespace: dict[str, Any] = {"__name__": "gym_server_docs_example"}
    exec(compile(code.split("```", 1)[0], "docs/gym-server.md", "exec"), namespace)
    return namespace


def test_the_docs_app_that_strips_its_rollout_prefix_routes_and_counts_the_template() -> None:
    example = _docs_example()
    app = example["app"]
    with serve(app) as running:
        assert get(running.port, "/rollouts/abc/items/7") == (200, b"7")
    scope = {"type": "http", "path": "/rollouts/abc/items/7", "root_path": "", "method": "GET"}
    assert app.template(scope) == "/items/{item_id}"


def test_a_rollout_prefix_alone_leaves_the_apps_routing_as_it_was() -> None:
    """What the docs say: rollout_prefix changes the counted template, not the path the app
    routes on."""
    example = _docs_example()
    unstripped = GymServerMetricsMiddleware(
        Starlette(routes=example["routes"]), rollout_prefix=example["ROLLOUT_PREFIX"]
    )
    with serve(unstripped) as running:
        assert get(running.port, "/rollouts/abc/items/7")[0] == 404
        assert get(running.port, "/items/7") == (200, b"7")
