"""Property tests of the server family's mappings: status attributes, rollout-prefix stripping,
route templates, and the phase a disconnect is counted in."""

from __future__ import annotations

import asyncio
import re
import string
from collections.abc import MutableMapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rlmetrics_gym.server import (
    BEFORE_RESPONSE_START,
    RESPONSE_STARTED,
    UNMATCHED,
    GymServerMetricsMiddleware,
    route_template,
    status_attribute,
    strip_rollout_prefix,
)
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route

SEGMENT = st.text(string.ascii_letters + string.digits + "-._~", min_size=1, max_size=24)
PREFIX = re.compile(r"/rollouts/[^/]+")


async def _endpoint(_: Request) -> Response:
    return PlainTextResponse("")


ROUTES = [
    Route("/items/{item_id}", _endpoint),
    Route("/verify", _endpoint, methods=["POST"]),
    Mount("/api", routes=[Route("/things/{thing_id:int}", _endpoint)]),
]
TEMPLATES = {"/items/{item_id}", "/verify", "/api/things/{thing_id}"}


def _scope(path: str, method: str = "GET") -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "root_path": ""}


@given(st.integers(min_value=100, max_value=599))
def test_every_http_status_is_itself_an_int(status: int) -> None:
    """http.response.status_code is an int in the HTTP semantic conventions."""
    attribute = status_attribute(status)
    assert attribute == status and type(attribute) is int


@given(
    st.one_of(
        st.integers().filter(lambda n: not 100 <= n <= 599),
        st.booleans(),
        st.none(),
        st.text(max_size=3),
        st.floats(),
    )
)
def test_anything_else_has_no_status_attribute(status: Any) -> None:
    assert status_attribute(status) is None


@given(SEGMENT, st.lists(SEGMENT, max_size=4))
def test_a_rollout_prefix_is_removed_whatever_the_id(rollout_id: str, rest: list[str]) -> None:
    path = "/" + "/".join(rest)
    assert strip_rollout_prefix(f"/rollouts/{rollout_id}{path if rest else ''}", PREFIX) == path


@given(st.lists(SEGMENT, max_size=4))
def test_a_path_without_the_prefix_is_unchanged(segments: list[str]) -> None:
    path = "/" + "/".join(segments)
    if not path.startswith("/rollouts/"):
        assert strip_rollout_prefix(path, PREFIX) == path
    assert strip_rollout_prefix(path, None) == path


@given(SEGMENT, SEGMENT)
def test_a_prefix_ending_inside_a_segment_is_not_stripped(head: str, tail: str) -> None:
    # r"/r" matches the start of "/rollouts…" but not at a segment boundary.
    assert strip_rollout_prefix(f"/r{head}/{tail}", re.compile("/r")) == f"/r{head}/{tail}"


@given(SEGMENT)
def test_any_item_id_resolves_to_the_one_template(item_id: str) -> None:
    assert route_template(ROUTES, _scope(f"/items/{item_id}")) == "/items/{item_id}"


@given(st.integers(min_value=0, max_value=10**12))
def test_a_mounted_route_resolves_under_its_mount(thing_id: int) -> None:
    assert route_template(ROUTES, _scope(f"/api/things/{thing_id}")) == "/api/things/{thing_id}"


def test_a_method_the_route_refuses_still_names_the_route() -> None:
    assert route_template(ROUTES, _scope("/verify", "GET")) == "/verify"


@given(st.lists(SEGMENT, max_size=5), st.sampled_from(["GET", "POST", "DELETE"]))
def test_a_raw_path_never_becomes_a_route(segments: list[str], method: str) -> None:
    found = route_template(ROUTES, _scope("/" + "/".join(segments), method))
    assert found is None or found in TEMPLATES


# -- the phase of a disconnect ------------------------------------------------------------------


class _UvicornLikeCycle:
    """What uvicorn's request cycle does when the client goes away: the loss is processed by
    the event loop (a callback, as ``connection_lost`` is), after which ``receive()`` answers
    ``http.disconnect`` and ``send()`` drops messages without a word."""

    def __init__(self, leave_after: int) -> None:
        self.leave_after = leave_after  # messages the client receives before it leaves
        self.delivered = 0
        self.disconnected = leave_after == 0
        self.body_read = False
        self.wake = asyncio.Event()

    def _connection_lost(self) -> None:
        self.disconnected = True
        self.wake.set()

    async def receive(self) -> dict[str, Any]:
        if not self.disconnected and not self.body_read:
            self.body_read = True
            return {"type": "http.request", "body": b"", "more_body": False}
        if not self.disconnected:
            await self.wake.wait()
        return {"type": "http.disconnect"}  # even over an unread body, as uvicorn does

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if self.disconnected:
            return
        self.delivered += 1
        if self.delivered == self.leave_after:
            asyncio.get_running_loop().call_soon(self._connection_lost)


@given(chunks=st.integers(min_value=1, max_value=6), leave_after=st.integers(min_value=0))
def test_a_disconnect_is_counted_once_in_the_phase_the_response_had_reached(
    chunks: int, leave_after: int
) -> None:
    """A response of a start and ``chunks`` body messages, the app yielding to the loop
    between chunks; the client leaves after receiving ``leave_after`` messages (never, if that
    is past the end)."""
    leave_after %= chunks + 3

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for n in range(chunks):
            if n:
                await asyncio.sleep(0)  # the loop runs: a pending disconnect is processed
            await send({"type": "http.response.body", "body": b"x", "more_body": n < chunks - 1})

    middleware = GymServerMetricsMiddleware(app)
    cycle = _UvicornLikeCycle(leave_after)
    asyncio.run(middleware(_scope("/items/1"), cycle.receive, cycle.send))
    totals = middleware.totals
    # Messages are numbered from 0 (the start; chunk n is n + 1). The loss is processed at the
    # app's first suspension after message leave_after - 1, i.e. before message leave_after
    # but never before message 2 (the first suspension precedes the second chunk); it counts
    # if that message is still part of the response.
    seen_before = max(leave_after, 2)
    if leave_after == 0:  # gone before anything was sent
        assert totals.cancelled == {(UNMATCHED, BEFORE_RESPONSE_START): 1}
        assert totals.responses == {}
    elif seen_before <= chunks:  # gone after the start, seen before the last chunk
        assert totals.cancelled == {(UNMATCHED, RESPONSE_STARTED): 1}
        assert totals.responses == {200: 1}
    else:  # the response was complete before the server knew the client had left
        assert totals.cancelled == {}
        assert totals.responses == {200: 1}
    assert totals.in_flight == 0
    assert totals.unhandled == 0


class _RaisingOnSendCycle(_UvicornLikeCycle):
    """A server that reports the write it could not make: once the client has gone (or, with
    ``broken``, at once, before its own disconnect flag says so), ``send()`` raises ``error``
    (a broken pipe: ASGI 2.4's OSError for a closed connection)."""

    def __init__(
        self, leave_after: int, broken: bool = False, error: BaseException | None = None
    ) -> None:
        super().__init__(leave_after)
        self.broken = broken
        self.error = error if error is not None else BrokenPipeError(32, "Broken pipe")

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if self.disconnected or (self.broken and message["type"] == "http.response.body"):
            raise self.error
        await super().send(message)


async def _start_then_stream(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await asyncio.sleep(0)  # the loop runs: a pending disconnect is processed
    await send({"type": "http.response.body", "body": b"x", "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def test_a_client_that_left_and_made_send_raise_is_cancelled_not_unhandled() -> None:
    middleware = GymServerMetricsMiddleware(_start_then_stream)
    cycle = _RaisingOnSendCycle(leave_after=1)  # gone once the start reached it
    with pytest.raises(BrokenPipeError):  # the app's exception goes on, unchanged
        asyncio.run(middleware(_scope("/items/1"), cycle.receive, cycle.send))
    totals = middleware.totals
    assert totals.cancelled == {(UNMATCHED, RESPONSE_STARTED): 1}
    assert (totals.unhandled, totals.responses, totals.in_flight) == (0, {200: 1}, 0)


def test_an_oserror_from_send_is_the_connection_closed_before_any_flag_says_so() -> None:
    """ASGI 2.4: ``send()`` raises an OSError once the connection is closed; the middleware
    takes it at its word, without asking ``receive``."""
    middleware = GymServerMetricsMiddleware(_start_then_stream)
    cycle = _RaisingOnSendCycle(leave_after=99, broken=True)
    with pytest.raises(BrokenPipeError):
        asyncio.run(middleware(_scope("/items/1"), cycle.receive, cycle.send))
    totals = middleware.totals
    assert totals.cancelled == {(UNMATCHED, RESPONSE_STARTED): 1}
    assert (totals.unhandled, totals.responses, totals.in_flight) == (0, {200: 1}, 0)


def test_send_raising_something_else_while_the_client_is_still_there_is_unhandled() -> None:
    middleware = GymServerMetricsMiddleware(_start_then_stream)
    cycle = _RaisingOnSendCycle(leave_after=99, broken=True, error=RuntimeError("bad message"))
    with pytest.raises(RuntimeError, match="bad message"):
        asyncio.run(middleware(_scope("/items/1"), cycle.receive, cycle.send))
    totals = middleware.totals
    assert (totals.cancelled, totals.unhandled, totals.in_flight) == ({}, 1, 0)


@given(SEGMENT, st.lists(SEGMENT, min_size=1, max_size=3))
def test_a_prefix_written_with_its_trailing_slash_strips_the_same(
    rollout_id: str, segments: list[str]
) -> None:
    """``rollout_prefix=r"/rollouts/[^/]+/"`` (the segment's slash included) ended past the
    boundary, so nothing was ever stripped and every cancelled request was ``<unmatched>``."""
    path = "/" + "/".join(segments)
    with_slash = re.compile(r"/rollouts/[^/]+/")
    assert strip_rollout_prefix(f"/rollouts/{rollout_id}{path}", with_slash) == path
    assert strip_rollout_prefix(f"/rollouts/{rollout_id}/", with_slash) == "/"
