"""What an HTTP server does with its requests: an ASGI middleware and the series it feeds.

:class:`GymServerMetricsMiddleware` counts, per process:

- ``gym.server.requests.in_flight``: requests being handled;
- ``gym.server.responses_total`` by ``http.response.status_code``: responses started;
- ``gym.server.requests.cancelled_total`` by ``http.route`` (the registered route template,
  after stripping a rollout prefix; ``<unmatched>`` otherwise, never a raw path) and
  ``nemo.gym.request.phase`` (``before_response_start`` until ``http.response.start`` was
  sent, then ``response_started``): requests whose client left before the response finished;
- ``gym.server.requests.unhandled_exceptions_total``: requests whose handler raised an
  exception that no middleware turned into a response.

The request path does integer updates on plain per-middleware totals; the exporter's thread
reads them through observables when it collects, so a request makes no OpenTelemetry call,
takes no lock and allocates one small object.

Disconnects: uvicorn does not cancel the app when the client goes away. It marks the request
cycle disconnected, ``receive()`` then answers ``http.disconnect`` and ``send()`` silently drops
what the app sends. The middleware never calls ``receive()`` itself (driving someone else's
receive coroutine breaks one that opens a task group, and uvicorn's first ``receive()`` sends
``100 Continue``). A disconnect is seen (1) when the app's own ``receive()`` returns
``http.disconnect`` (Starlette's streaming responses listen for it), (2) when the server's
``send`` raises an ``OSError`` (ASGI 2.4: the connection is closed), and (3) under uvicorn, by
reading its request cycle's ``disconnected`` flag right before ``http.response.start`` goes
out, before the last message of a streamed body, and when the app ends without finishing the
response; the cycle is found behind layers outside this one that replace ``receive`` (a
``BaseHTTPMiddleware``, a body limit) through the ``receive`` each keeps. Servers that do cancel
the app (hypercorn) raise ``CancelledError``, a ``BaseException``, which is counted as a
cancellation too and re-raised.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec, resets_process_state, warn_once
from rlmetrics.spec import SUM

from .startup import SERVER_TYPES

__all__ = [
    "BEFORE_RESPONSE_START",
    "CANCELLED",
    "GROUP",
    "IN_FLIGHT",
    "PHASE_ATTR",
    "PHASES",
    "RESPONSES",
    "RESPONSE_STARTED",
    "ROUTE_ATTR",
    "SPECS",
    "STATUS_ATTR",
    "UNHANDLED",
    "UNMATCHED",
    "GymServerMetricsMiddleware",
    "ServerTotals",
    "route_template",
    "server_resource",
    "start_server_telemetry",
    "status_attribute",
    "strip_rollout_prefix",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

GROUP = "gym.server"

IN_FLIGHT = "gym.server.requests.in_flight"
RESPONSES = "gym.server.responses_total"
CANCELLED = "gym.server.requests.cancelled_total"
UNHANDLED = "gym.server.requests.unhandled_exceptions_total"

STATUS_ATTR = "http.response.status_code"
ROUTE_ATTR = "http.route"
PHASE_ATTR = "nemo.gym.request.phase"
BEFORE_RESPONSE_START = "before_response_start"
RESPONSE_STARTED = "response_started"
PHASES: frozenset[str] = frozenset({BEFORE_RESPONSE_START, RESPONSE_STARTED})
UNMATCHED = "<unmatched>"

_STATUS_CODES = range(100, 600)
#: Route templates are the app's registered routes (two phases each), so this only bounds a
#: misconfigured app; cancellations of templates past it are dropped with a warning.
_MAX_CANCELLED_SERIES = 512


def _observe_in_flight() -> list[tuple[float, Mapping[str, str]]]:
    # Nothing until this process builds a middleware: only servers report server series.
    every = tuple(_all_totals)
    return [(sum(totals.in_flight for totals in every), {})] if every else []


def _observe_responses() -> list[tuple[float, Mapping[str, int]]]:
    summed: dict[int, int] = {}
    for totals in tuple(_all_totals):
        for status, count in list(totals.responses.items()):
            summed[status] = summed.get(status, 0) + count
    out: list[tuple[float, Mapping[str, int]]] = []
    for status, count in summed.items():
        attribute = status_attribute(status)
        if attribute is None:
            warn_once(
                "gym:server:status",
                "rlmetrics-gym: an ASGI app sent a response status outside 100-599; "
                f"{count} such response(s) are left out of {RESPONSES}",
            )
            continue
        out.append((count, {STATUS_ATTR: attribute}))
    return out


def _observe_cancelled() -> list[tuple[float, Mapping[str, str]]]:
    summed: dict[tuple[str, str], int] = {}
    for totals in tuple(_all_totals):
        for key, count in list(totals.cancelled.items()):
            summed[key] = summed.get(key, 0) + count
    return [
        (count, {ROUTE_ATTR: route, PHASE_ATTR: phase}) for (route, phase), count in summed.items()
    ]


def _observe_unhandled() -> list[tuple[float, Mapping[str, str]]]:
    every = tuple(_all_totals)
    return [(sum(totals.unhandled for totals in every), {})] if every else []


SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        IN_FLIGHT,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="{request}",
        description="HTTP requests the server is handling.",
        callback=_observe_in_flight,
        reduce=SUM,
    ),
    MetricSpec(
        RESPONSES,
        Kind.OBSERVABLE_COUNTER,
        unit="{response}",
        description="Responses the server started sending, by status code (an exception that "
        "escaped before any response started counts as the 500 the server answers with).",
        # Open in the declaration (the catalogue would list 500 values); status_attribute()
        # admits only 100-599, so the cap is never reached.
        attributes={STATUS_ATTR: OPEN},
        max_series=len(_STATUS_CODES),
        callback=_observe_responses,
        reduce=SUM,
    ),
    MetricSpec(
        CANCELLED,
        Kind.OBSERVABLE_COUNTER,
        unit="{request}",
        description="Requests cancelled because the client disconnected before the response "
        "finished, by route template and by whether http.response.start had been sent.",
        attributes={ROUTE_ATTR: OPEN, PHASE_ATTR: PHASES},
        max_series=_MAX_CANCELLED_SERIES,
        callback=_observe_cancelled,
        reduce=SUM,
    ),
    MetricSpec(
        UNHANDLED,
        Kind.OBSERVABLE_COUNTER,
        unit="{request}",
        description="Requests whose handler raised an exception that no middleware turned into "
        "a response (a handled HTTPException is a response, counted in "
        "gym.server.responses_total instead).",
        callback=_observe_unhandled,
        reduce=SUM,
    ),
)

rlmetrics.declare(GROUP, SPECS, on_use=True)


# -- mappings -----------------------------------------------------------------------------------


def status_attribute(status: Any) -> int | None:
    """The ``http.response.status_code`` value of an ASGI status — an int, as the HTTP
    semantic conventions type it — or None outside 100-599."""
    if type(status) is not int or not 100 <= status <= 599:
        return None
    return status


def strip_rollout_prefix(path: str, prefix: re.Pattern[str] | None) -> str:
    """``path`` without a leading rollout prefix (``prefix`` matched at the start, ending at a
    segment boundary, or just past it: a prefix written with its trailing ``/``); unchanged
    when it does not match."""
    if prefix is None:
        return path
    match = prefix.match(path)
    if match is None or match.end() == 0:
        return path
    end = match.end()
    if path[end - 1] == "/" and not path.startswith("/", end):
        end -= 1  # the prefix took the next segment's slash: it is the rest's
    rest = path[end:]
    if not rest or rest == "/":
        return "/"
    return rest if rest.startswith("/") else path


def route_template(routes: Iterable[Any], scope: Mapping[str, Any]) -> str | None:
    """The registered template (``/items/{item_id}``) of the route ``scope`` reaches, or None.

    Walks Starlette-shaped routes (FastAPI's included): ``route.matches(scope)`` as the router
    does, into ``Mount`` and ``Host`` (their routes, their path as a prefix). A full match wins;
    otherwise the first partial one (a method the route does not allow: its 405 still belongs
    to the route).
    """
    partial: str | None = None
    for route in routes:
        try:
            match, child_scope = route.matches(scope)
        except Exception:
            continue
        level = getattr(match, "value", 0)
        if not level:
            continue
        template = _template_of(route, {**scope, **child_scope})
        if template is None:
            continue
        if level >= 2:
            return template
        if partial is None:
            partial = template
    return partial


def _template_of(route: Any, child_scope: Mapping[str, Any]) -> str | None:
    inner = getattr(route, "routes", None)
    path_format = getattr(route, "path_format", None)
    if not isinstance(path_format, str):
        path_format = getattr(route, "path", None)
    if not inner:
        # A route, or a Mount of an app without routes (its template ends in /{path}).
        return path_format if isinstance(path_format, str) else None
    # A Mount or a Host around routes: the inner route's template after the mount's path.
    mount_prefix = ""
    if isinstance(path_format, str) and path_format.endswith("/{path}"):
        mount_prefix = path_format[: -len("/{path}")]
    found = route_template(inner, child_scope)
    return None if found is None else mount_prefix + found


# -- the middleware -----------------------------------------------------------------------------


class ServerTotals:
    """One middleware's counts. Written on its event loop, read by the exporter's thread (a
    dict's ``items()`` copy and an int read are single operations under the GIL)."""

    __slots__ = ("cancelled", "in_flight", "listed", "responses", "unhandled")

    def __init__(self) -> None:
        self.in_flight = 0
        self.unhandled = 0
        self.responses: dict[int, int] = {}
        self.cancelled: dict[tuple[str, str], int] = {}
        self.listed = False  # in _all_totals


# Every middleware's totals, for the process-wide series. Held for the process's life: a server
# builds its middleware once, and dropping one would make its counters go backwards.
_all_totals: list[ServerTotals] = []


def _list(totals: ServerTotals) -> None:
    totals.listed = True
    _all_totals.append(totals)
    rlmetrics.activate(GROUP)  # only a process that serves reports the server series


@resets_process_state
def _forget_servers() -> None:
    # Between tests: every middleware built so far counts from zero and is out of the series
    # until it serves again, as if built in a fresh process.
    for totals in _all_totals:
        totals.in_flight = totals.unhandled = 0
        totals.responses.clear()
        totals.cancelled.clear()
        totals.listed = False
    _all_totals.clear()


#: In the scope of a request a GymServerMetricsMiddleware is counting, while it does: one
#: applied again inside it (wrapped around the app and added with add_middleware) counts nothing.
_COUNTED = "rlmetrics_gym.server.counted"


def _said_twice() -> None:
    warn_once(
        "gym:server:twice",
        "rlmetrics-gym: GymServerMetricsMiddleware is applied more than once to the same "
        "requests (wrapped around the app and also added with add_middleware or "
        "Middleware(...), say); the outermost counts them, the others pass them through: "
        "remove all but one",
    )


class GymServerMetricsMiddleware:
    """ASGI middleware counting requests, responses, cancellations and unhandled exceptions.

    Wrap the whole app, so the 500 Starlette's error middleware sends passes through it::

        app = GymServerMetricsMiddleware(Starlette(routes=...), rollout_prefix=r"/rollouts/[^/]+")
        uvicorn.run(app, host="127.0.0.1")

    (``app.add_middleware(GymServerMetricsMiddleware)`` counts the same: an exception escaping
    before any response started is counted as the 500 the server answers with, also with a
    ``BaseHTTPMiddleware`` added after it.)

    Applied more than once to the same requests, only the outermost counts them (said once).

    :param rollout_prefix: a regular expression matched at the start of the path and removed
        before the route template is looked up, so ``/rollouts/abc/items/7`` is counted as
        ``/items/{item_id}``; it must end at a segment boundary (or with the ``/`` after it).
    :param routes: the routes to resolve templates against; by default the wrapped app's
        ``routes``, else those of the Starlette app or router the request reached.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        rollout_prefix: str | re.Pattern[str] | None = None,
        routes: Sequence[Any] | None = None,
    ) -> None:
        self.app = app
        self.rollout_prefix = (
            re.compile(rollout_prefix) if isinstance(rollout_prefix, str) else rollout_prefix
        )
        self.routes = routes
        self.totals = ServerTotals()
        _list(self.totals)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _COUNTED in scope:
            # Another GymServerMetricsMiddleware outside this one counts the request.
            _said_twice()
            await self.app(scope, receive, send)
            return
        exchange = _Exchange(self, scope, receive, send)
        totals = self.totals
        if not totals.listed:  # only after _forget_servers, between tests
            _list(totals)
        totals.in_flight += 1
        scope[_COUNTED] = True
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except BaseException as exc:
            exchange.failed(exc)
            raise
        else:
            if not exchange.complete and not exchange.cancelled and exchange.client_gone():
                exchange.cancel()
        finally:
            totals.in_flight -= 1
            # The mark goes with the request: a caller reusing its scope dict for the next one
            # is not taken for the middleware applied twice.
            scope.pop(_COUNTED, None)

    def template(
        self, scope: Mapping[str, Any], path: str | None = None, root_path: str = ""
    ) -> str:
        """The ``http.route`` of a request (only computed when one is cancelled).

        ``path`` and ``root_path`` are the request's as it arrived (a router mutates the scope
        it routes: a Mount extends its ``root_path``); by default the scope's own.
        """
        try:
            routes = self.routes
            if routes is None:
                routes = getattr(self.app, "routes", None)
            if routes is None:
                for holder in (scope.get("app"), scope.get("router")):
                    routes = getattr(holder, "routes", None)
                    if routes is not None:
                        break
            if routes is None:
                return UNMATCHED
            if path is None:
                path, root_path = scope.get("path", ""), scope.get("root_path", "")
            if root_path and path.startswith(root_path):
                path = path[len(root_path) :]
            stripped = root_path + strip_rollout_prefix(path, self.rollout_prefix)
            found = route_template(routes, {**scope, "path": stripped, "root_path": root_path})
        except Exception:
            warn_once(
                "gym:server:route",
                "rlmetrics-gym: resolving the route template of a cancelled request failed; "
                f"it is counted under http.route={UNMATCHED!r}",
            )
            return UNMATCHED
        return UNMATCHED if found is None else found


_UNKNOWN = object()


class _Exchange:
    """One request's progress, behind the wrapped ``receive`` and ``send``.

    It never calls ``receive`` on its own: it sees what the app's own ``receive()`` returns,
    what the server's ``send`` raises, and, where ``receive`` is uvicorn's own, the request
    cycle's ``disconnected`` flag (see :func:`_server_cycle`).
    """

    __slots__ = (
        "_cycle",
        "_receive",
        "_send",
        "cancelled",
        "complete",
        "disconnected",
        "middleware",
        "path",
        "root_path",
        "scope",
        "started",
        "streamed",
        "trailers",
    )

    def __init__(
        self, middleware: GymServerMetricsMiddleware, scope: Scope, receive: Receive, send: Send
    ) -> None:
        self.middleware = middleware
        self.scope = scope
        self.path: str = scope.get("path", "")  # as it arrived: routers rewrite the scope
        self.root_path: str = scope.get("root_path", "")
        self._receive = receive
        self._send = send
        self._cycle: Any = _UNKNOWN  # the server's request cycle, looked up when first needed
        self.started = False  # http.response.start was sent
        self.complete = False  # the last message of the response was sent
        self.disconnected = False  # the client is known gone (before completion)
        self.cancelled = False  # counted in cancelled_total
        self.trailers = False
        self.streamed = False  # a body message other than the last one was sent

    async def receive(self) -> Message:
        message = await self._receive()
        try:
            gone = message["type"] == "http.disconnect"
        except Exception:  # not an ASGI message: the app's to find out, not ours
            gone = False
        if gone and not self.complete:
            self.disconnected = True
            if not self.cancelled:
                self.cancel()
        return message

    async def send(self, message: Message) -> None:
        kind: str | None
        try:
            kind = message["type"]
        except Exception:
            kind = None
        last = False
        if kind == "http.response.start":
            if not self.cancelled and self.client_gone():
                self.cancel()
        elif _is_last(kind, message, self.trailers):
            last = True
            # A body sent in one message follows its start without the app waiting on anything,
            # so the check before the start answered for it; a streamed one gets its own check.
            if self.streamed and not self.cancelled and self.client_gone():
                self.cancel()
        else:
            self.streamed = True
        try:
            await self._send(message)
        except OSError:
            # ASGI 2.4: send() raises an OSError once the connection is closed.
            if not self.complete:
                self.disconnected = True
            raise
        if kind == "http.response.start":
            self.started = True
            self.trailers = bool(message.get("trailers", False))
            if not self.cancelled:
                responses = self.middleware.totals.responses
                status: int = message.get("status", 0)
                responses[status] = responses.get(status, 0) + 1
        elif last:
            self.complete = True

    def client_gone(self) -> bool:
        """Whether the client is known to have disconnected: the app's ``receive()`` returned
        ``http.disconnect``, the server's ``send`` raised an ``OSError``, or uvicorn's request
        cycle says so. Never calls ``receive``: a client that left unseen by these is not
        told apart from one still there."""
        if self.disconnected:
            return True
        cycle = self._cycle
        if cycle is _UNKNOWN:
            cycle = self._cycle = _server_cycle(self._receive)
        if cycle is not None and cycle.disconnected is True:
            self.disconnected = True
            return True
        return False

    def cancel(self) -> None:
        self.cancelled = True
        key = (
            self.middleware.template(self.scope, self.path, self.root_path),
            RESPONSE_STARTED if self.started else BEFORE_RESPONSE_START,
        )
        cancelled = self.middleware.totals.cancelled
        cancelled[key] = cancelled.get(key, 0) + 1

    def failed(self, exc: BaseException) -> None:
        """The app raised ``exc``: a cancellation, or an unhandled exception."""
        if self.cancelled:
            return
        if not isinstance(exc, Exception):
            # CancelledError (a server that cancels on disconnect, a shutdown), KeyboardInterrupt:
            # the request ends unfinished.
            if not self.complete:
                self.cancel()
        elif not self.complete and self.client_gone():
            self.cancel()  # ClientDisconnect, OSError on send: the client's leaving, not a bug
        else:
            totals = self.middleware.totals
            totals.unhandled += 1
            if not self.started:
                # Starlette's error middleware outside this one, or the server itself, answers
                # with a 500: count it here, so both placements count the same.
                totals.responses[500] = totals.responses.get(500, 0) + 1


#: How far :func:`_server_cycle` looks behind layers that replace ``receive``: callables
#: visited per request, at most (a stack of a few middlewares needs a handful).
_MAX_DELEGATES = 16
#: The attributes a layer's object keeps the ``receive`` it delegates to under (Starlette's
#: ``Request`` and its body-limit responder: ``_receive``).
_DELEGATE_ATTRIBUTES = ("_receive", "receive")


def _server_cycle(receive: Receive) -> Any:
    """The server's request cycle behind ``receive`` — uvicorn's (h11, httptools), whose
    boolean ``disconnected`` flag its own ``receive()`` answers ``http.disconnect`` from — else
    None.

    Reading it is the only way to learn that a client left while the app reads nothing from it
    (uvicorn's ``send()`` then drops messages without a word), and it drives nothing: no
    ``receive`` coroutine, no ``100 Continue``, no read resumed. ``receive`` is the cycle's
    bound method when nothing sits between the server and the middleware; a layer that
    replaces it (a ``BaseHTTPMiddleware``, Starlette's body limit, a body-buffering closure)
    keeps the one it was given, on its object or in its closure, so those are followed too,
    a bounded number of steps.
    """
    try:  # the usual case (nothing between the server and the middleware), without a search
        owner = getattr(receive, "__self__", None)
        if owner is not None and type(getattr(owner, "disconnected", None)) is bool:
            return owner
    except Exception:
        pass
    pending: list[Any] = [receive]
    # Held, not just their ids: a bound method made by a getattr and then dropped would free
    # its id for the next one, which would be taken for seen.
    seen: dict[int, Any] = {}
    while pending and len(seen) < _MAX_DELEGATES:
        candidate = pending.pop(0)
        if id(candidate) in seen:
            continue
        seen[id(candidate)] = candidate
        try:
            owner = getattr(candidate, "__self__", None)
            if owner is not None:
                if type(getattr(owner, "disconnected", None)) is bool:
                    return owner
                for name in _DELEGATE_ATTRIBUTES:
                    delegate = getattr(owner, name, None)
                    if callable(delegate):
                        pending.append(delegate)
            for cell in getattr(candidate, "__closure__", None) or ():
                content = cell.cell_contents
                if callable(content) and not isinstance(content, type):
                    pending.append(content)
        except Exception:  # a property that raises, an empty cell: not a way through
            continue
    return None


def _is_last(kind: str | None, message: Message, trailers: bool) -> bool:
    """Whether ``message`` is the last one of its response."""
    if kind == "http.response.body":
        return not trailers and not message.get("more_body", False)
    if kind == "http.response.trailers":
        return not message.get("more_trailers", False)
    if kind == "http.response.zerocopysend":
        return not message.get("more_body", False)
    return kind == "http.response.pathsend"


# -- where a server starts telemetry -----------------------------------------------------------

#: The resource attributes a Gym server's telemetry carries (the specification's).
SERVER_NAME_RESOURCE = "nemo.gym.server.name"
SERVER_TYPE_RESOURCE = "nemo.gym.server.type"


def server_resource(
    server_name: str, server_type: str | None = None, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The resource of one Gym server process: its name and type, and ``process.pid`` — the
    attribute that tells apart the Uvicorn workers of one server, each of which starts its
    own telemetry and exports on its own (the specification's "every server process reports
    them, and the process.pid resource attribute tells apart the Uvicorn workers")."""
    # Refused here, at the server's start, rather than exported: OpenTelemetry writes a None
    # name as an empty value, and a type outside Gym's would disagree with the ``other`` the
    # startup and memory series of the same server carry.
    if not isinstance(server_name, str) or not server_name:
        raise TypeError(
            f"server_name must be the server's configured name (a non-empty string), got "
            f"{server_name!r}"
        )
    if server_type is not None and server_type not in SERVER_TYPES:
        raise ValueError(
            f"server_type {server_type!r} is not one of Gym's server types "
            f"({', '.join(sorted(SERVER_TYPES))}); pass None to leave it out"
        )
    resource: dict[str, Any] = {**(extra or {}), SERVER_NAME_RESOURCE: server_name}
    if server_type is not None:
        resource[SERVER_TYPE_RESOURCE] = server_type
    resource["process.pid"] = os.getpid()
    return resource


def start_server_telemetry(
    server_name: str,
    server_type: str | None = None,
    *,
    resource: Mapping[str, Any] | None = None,
    **start_kwargs: Any,
) -> rlmetrics.Telemetry:
    """``rlmetrics.start(...)`` for one Gym server process — the main process or a Uvicorn
    worker (call it in each, in ``run_webserver`` or the app's lifespan) — with
    :func:`server_resource` on the resource. Other arguments go to ``rlmetrics.start``."""
    start_kwargs.setdefault("service_name", "nemo-gym")
    return rlmetrics.start(
        resource=server_resource(server_name, server_type, resource), **start_kwargs
    )
