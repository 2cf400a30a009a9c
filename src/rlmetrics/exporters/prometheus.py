"""The ``prometheus`` exporter: an HTTP ``/metrics`` endpoint for a Prometheus server to scrape.

It listens on 127.0.0.1:9464 unless told otherwise (``start(prometheus_host=...,
prometheus_port=...)``, else ``OTEL_EXPORTER_PROMETHEUS_HOST`` / ``_PORT``; an empty variable
counts as unset). The SDK's own ``start_http_server`` default is every interface, which would
publish a training job's metrics to its whole network. Port 0 picks a free port; the handle's
``prometheus_address`` says which.

The same server answers ``/health`` with the run's liveness (:mod:`rlmetrics.health`): 200
while steps arrive, 503 once the run has stalled. Every other path serves the metrics, as
``prometheus_client``'s own server does. What a client can make the process hold is bounded
(:class:`_BoundedServer`): a few handler threads, a short queue, an idle timeout.

Two things the SDK's reader does not do are added (:class:`_Reader`):

- A name whose last segment already ends in its unit (NeMo Gym's ``gym.rollout.duration_ms``,
  unit ``ms``, a name its specification fixes) is exposed with the unit's word in place of the
  abbreviation, ``gym_rollout_duration_milliseconds``: the exporter appends the unit's word
  unless the name ends with it, so it gave ``gym_rollout_duration_ms_milliseconds``. The OTLP
  name is unchanged.
- Only a scrape's collection is served. A collection made for anything else (a
  ``force_flush``) was queued in the exporter's collector and served at the next scrape beside
  that scrape's own: every family twice, an exposition ``promtool`` refuses. Scrapes are served
  one at a time, so two never share a collection either.

A pull endpoint that is gone looks the same to Prometheus whether its process died or the run
finished. So the endpoint also serves ``rlmetrics_run_ended`` (:class:`_RunEnd`): 0 while the
run goes, 1 once it ended cleanly; at that end (:attr:`Exporter.end_run`, before the providers
shut down) it waits, bounded by ``final_scrape_s`` and by the pace it has been scraped at, for
one last scrape to take the 1 and the run's final values. ``RLMetricsEndpointDown`` leaves out
a target whose last ``rlmetrics_run_ended`` is 1.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import itertools
import json
import logging
import math
import os
import queue
import socket
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from .. import hookimpl
from .._warn import warn_once
from ..configuration import NON_NEGATIVE_NUMBER, PORT, POSITIVE_NUMBER, TEXT, declare_options
from ..dashboard.promql import RUN_ENDED, unit_named
from ..health import HEALTH_PATH, STALL_AFTER_ENV, health, stall_rule
from ..liveness import StallRule
from ..stall_watch import configure_rule
from ..telemetry import TelemetryError
from . import Exporter

__all__ = [
    "DEFAULT_FINAL_SCRAPE_S",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "END_WAIT_LOGGER",
    "HOST_ENV",
    "IDLE_TIMEOUT_S",
    "MAX_HANDLERS",
    "MAX_WAITING",
    "PORT_ENV",
    "PortTaken",
    "SCRAPER_HEADER",
    "make_exporter",
    "make_reader",
    "port_from_env",
]

INSTALL_HINT = "pip install 'rlmetrics[prometheus]'"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9464
HOST_ENV = "OTEL_EXPORTER_PROMETHEUS_HOST"
PORT_ENV = "OTEL_EXPORTER_PROMETHEUS_PORT"

# What a client of the endpoint (any local process) can make the training process hold: a
# scrape or a health check sends its request at once and takes a few milliseconds, so a few
# threads serve every Prometheus and probe there is; an idle connection costs a socket, never
# a thread of its own.
#: Threads that serve requests, at most (started as connections need them).
MAX_HANDLERS = 4
#: Connections waiting for a free handler, at most; one more is closed at once.
MAX_WAITING = 16
#: Seconds a connection may take to send its request, counted from when it was accepted
#: (waiting included), and then to take each part of the answer; then it is closed.
#: Prometheus' own scrape timeout is 10 s.
IDLE_TIMEOUT_S = 10.0
#: Seconds a clean end waits, at most, for Prometheus' last scrape (``final_scrape_s``); it
#: waits no longer than twice the interval the endpoint has been scraped at, plus a second,
#: and not at all where nothing ever scraped it.
DEFAULT_FINAL_SCRAPE_S = 30.0
#: The logger that says, at INFO, that a clean end waits for a last scrape and how long at
#: most: a pause of seconds at a run's end that a tool (the demo) shows its user.
END_WAIT_LOGGER = "rlmetrics.prometheus.end"
#: The header a Prometheus scrape carries (WSGI's name for ``X-Prometheus-Scrape-Timeout-
#: Seconds``): what tells a scraper that will come again from a one-off request.
SCRAPER_HEADER = "HTTP_X_PROMETHEUS_SCRAPE_TIMEOUT_SECONDS"


def port_from_env() -> int:
    """The port ``OTEL_EXPORTER_PROMETHEUS_PORT`` names, else :data:`DEFAULT_PORT`."""
    text = os.environ.get(PORT_ENV, "").strip()
    if not text:
        return DEFAULT_PORT
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise TelemetryError(f"{PORT_ENV}={text!r} is not a port number (0-65535; 0 picks one)")
    return port


class PortTaken(TelemetryError):
    """The Prometheus exporter's port is held by another process (its message says which and
    what to do); a caller that can pick another port (``rlmetrics demo``) catches this one."""


class _QuietHandler(WSGIRequestHandler):
    """Scrapes every few seconds are not worth a log line each (nor is a client that timed
    out)."""

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def parse_request(self) -> bool:
        # The request arrived within the connection's idle deadline: the answer gets the
        # idle timeout afresh for each part a slow reader takes.
        parsed = bool(super().parse_request())
        self.connection.settimeout(self.server.idle_timeout_s)  # type: ignore[attr-defined]
        return parsed


class _BoundedServer(WSGIServer):
    """Requests served by at most :data:`MAX_HANDLERS` threads; at most :data:`MAX_WAITING`
    accepted connections wait for one, and one more is closed at once; a connection that has
    not sent its request :data:`IDLE_TIMEOUT_S` after it was accepted is closed. A slow or
    idle client costs its own connection, never an unbounded thread; a scrape never waits
    for another client's request (the reader serves one scrape at a time)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.idle_timeout_s = IDLE_TIMEOUT_S  # read when built, so a test can shorten it
        self._waiting: queue.Queue[tuple[socket.socket, Any, float] | None] = queue.Queue(
            MAX_WAITING
        )
        self._handlers: list[threading.Thread] = []
        self._serving: set[socket.socket] = set()
        # Each queued connection is matched to the handler that will take it: a free one, a
        # new one, or (all busy) the first to finish. ``_free`` are handlers nothing waits
        # for; ``_unmatched`` connections wait for a busy handler.
        self._free = 0
        self._unmatched = 0
        self._lock = threading.Lock()
        self._closed = False
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Called on the accepting thread: queue the connection for a handler."""
        deadline = time.monotonic() + self.idle_timeout_s
        try:
            self._waiting.put_nowait((request, client_address, deadline))
        except queue.Full:
            self.shutdown_request(request)
            return
        with self._lock:
            if self._free:
                self._free -= 1
            elif len(self._handlers) < MAX_HANDLERS and not self._closed:
                handler = threading.Thread(
                    target=self._handle, name="rlmetrics-prometheus-handler", daemon=True
                )
                self._handlers.append(handler)
                handler.start()
            else:
                self._unmatched += 1

    def _handle(self) -> None:
        while True:
            item = self._waiting.get()
            if item is None:
                return
            with self._lock:
                self._serving.add(item[0])
            request, client_address, deadline = item
            try:
                # Whatever is left of its deadline: a request sent meanwhile is read at once.
                request.settimeout(max(0.05, deadline - time.monotonic()))
                self.finish_request(request, client_address)
            except Exception:
                pass  # a client that went away or timed out: nothing to report
            finally:
                self.shutdown_request(request)
                with self._lock:
                    self._serving.discard(request)
                    if self._unmatched:
                        self._unmatched -= 1  # the next connection waiting is this one's
                    else:
                        self._free += 1

    def server_close(self) -> None:
        """Stop listening, close waiting and served connections, and end the handlers."""
        super().server_close()
        with self._lock:
            self._closed = True
            handlers = list(self._handlers)
            for request in self._serving:
                with contextlib.suppress(OSError):  # its handler's read returns at once
                    request.shutdown(socket.SHUT_RDWR)
        while True:
            try:
                item = self._waiting.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self.shutdown_request(item[0])
        for _ in handlers:
            self._waiting.put(None)
        for handler in handlers:
            handler.join(1.0)


@functools.cache
def _reader_class() -> type:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics.export import Sum

    class _Reader(PrometheusMetricReader):  # type: ignore[misc]
        """The SDK's Prometheus reader serving only a scrape's own collection (see the
        module's docstring), with each name's unit said once."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._scraping: int | None = None  # the thread serving a scrape, while it does
            self._scrape_lock = threading.Lock()
            self._names: dict[tuple[str, str, bool], str] = {}

        def scrape(self, serve: Callable[[], Any]) -> Any:
            """``serve()`` (which collects through this reader) as the one scrape running."""
            with self._scrape_lock:
                self._scraping = threading.get_ident()
                try:
                    return serve()
                finally:
                    self._scraping = None

        def _receive_metrics(self, metrics_data: Any, *args: Any, **kwargs: Any) -> None:
            if metrics_data is None or self._scraping != threading.get_ident():
                return  # not a scrape's: Prometheus pulls, nothing is waiting for it
            super()._receive_metrics(self._for_prometheus(metrics_data), *args, **kwargs)

        def _for_prometheus(self, data: Any) -> Any:
            """``data`` with every metric renamed by :func:`unit_named` (none, mostly) and
            its points one per Prometheus series (:func:`_one_per_series`)."""
            renamed = False
            resources = []
            for resource in data.resource_metrics:
                scopes = []
                for scope in resource.scope_metrics:
                    metrics = []
                    for metric in scope.metrics:
                        counter = isinstance(metric.data, Sum) and metric.data.is_monotonic
                        key = (metric.name, metric.unit or "", counter)
                        name = self._names.get(key)
                        if name is None:
                            name = self._names[key] = unit_named(*key)
                        if name != metric.name:
                            metric = dataclasses.replace(metric, name=name)
                            renamed = True
                        merged = _one_per_series(metric)
                        if merged is not metric:
                            metric, renamed = merged, True
                        metrics.append(metric)
                    scopes.append(dataclasses.replace(scope, metrics=metrics))
                resources.append(dataclasses.replace(resource, scope_metrics=scopes))
            return dataclasses.replace(data, resource_metrics=resources) if renamed else data

    return _Reader


def _one_per_series(metric: Any) -> Any:
    """``metric`` with the points Prometheus cannot tell apart made one: an attribute whose
    value is empty is no label there, so ``rl.env=""`` and no ``rl.env`` are one series, and
    Prometheus keeps the first sample of a series in a scrape and drops the rest unsaid. A
    sum's values and a histogram's counts are added up (the series' total, as Prometheus
    reads it); a gauge has no such sum, so the first point stays, said once. ``metric``
    itself when no point has an empty value (a check per point, on the scrape's thread)."""
    from opentelemetry.sdk.metrics.export import Gauge, Histogram

    points = metric.data.data_points
    if not any("" in (point.attributes or {}).values() for point in points):
        return metric
    series: dict[frozenset[tuple[str, Any]], Any] = {}
    for point in points:
        labels = {k: v for k, v in (point.attributes or {}).items() if v != ""}
        key = frozenset(labels.items())
        first = series.get(key)
        if first is None:
            series[key] = dataclasses.replace(point, attributes=labels)
        elif isinstance(metric.data, Gauge):
            warn_once(
                f"prometheus:empty-attribute:{metric.name}",
                f"rlmetrics: {metric.name!r} was recorded under an empty attribute value "
                f"({sorted(k for k, v in point.attributes.items() if v == '')}) and without "
                "that attribute: Prometheus has no empty label, so the two are one series, "
                "and the endpoint serves one gauge value of them; record no attribute rather "
                "than an empty one",
            )
        elif isinstance(metric.data, Histogram):
            series[key] = dataclasses.replace(
                first,
                count=first.count + point.count,
                sum=first.sum + point.sum,
                # One instrument's points: the same bounds, so as many counts.
                bucket_counts=[
                    a + b for a, b in zip(first.bucket_counts, point.bucket_counts, strict=True)
                ],
                min=min(first.min, point.min),
                max=max(first.max, point.max),
                exemplars=[*first.exemplars, *point.exemplars],
            )
        else:  # a sum, monotonic or not: the series' total
            series[key] = dataclasses.replace(first, value=first.value + point.value)
    return dataclasses.replace(
        metric, data=dataclasses.replace(metric.data, data_points=list(series.values()))
    )


def make_reader(registry: Any) -> Any:
    """The Prometheus reader this exporter serves through ``registry`` (a
    ``prometheus_client.CollectorRegistry``); serve each scrape through its ``scrape``."""
    return _reader_class()(registry=registry)


class _RunEnd:
    """Whether the run ended cleanly, as the series :data:`RUN_ENDED` (a ``prometheus_client``
    collector in the endpoint's registry), and the wait for the scrape that takes it."""

    def __init__(self, final_scrape_s: float) -> None:
        self.final_scrape_s = final_scrape_s
        self.ended = False
        self.served = threading.Event()  # a scrape that collected ended=1 was sent
        self._scrapes: deque[float] = deque(maxlen=21)  # when the newest scrapes came

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        yield GaugeMetricFamily(
            RUN_ENDED,
            "1 once the run ended cleanly (its telemetry shut down), 0 while it runs: an "
            "endpoint gone after a 1 was not a process that died",
            value=1.0 if self.ended else 0.0,
        )

    def serve(self, body: Iterable[bytes], environ: dict[str, Any]) -> Iterable[bytes]:
        """A request's ``body``. A scrape by a Prometheus (or an agent built on its scraper,
        which sends its scrape timeout as a header; a one-off ``curl`` sends none) has its
        time noted and, when it was collected after the end, marks the end served once the
        server has written it (WSGI closes the body then)."""
        if SCRAPER_HEADER not in environ:
            return body
        self._scrapes.append(time.monotonic())
        return _Sent(body, self.served.set) if self.ended else body

    def wait_s(self) -> float:
        """How long the end waits for a scrape: nothing where no Prometheus scraped, twice the
        median interval between scrapes and a second where that is known, bounded by
        ``final_scrape_s``."""
        times = list(self._scrapes)
        if not times:
            return 0.0
        if len(times) < 2:
            return self.final_scrape_s
        pace = statistics.median(b - a for a, b in itertools.pairwise(times))
        return min(self.final_scrape_s, 2 * pace + 1.0)

    def end(self) -> None:
        """The run ended cleanly: serve 1, and wait (bounded) until a scrape has taken it."""
        self.ended = True
        wait_s = self.wait_s()
        if wait_s > 0:
            logging.getLogger(END_WAIT_LOGGER).info(
                "waiting for a last scrape of the run's end (at most %d s)", math.ceil(wait_s)
            )
            self.served.wait(wait_s)


class _Sent:
    """A WSGI response body whose ``close`` (called once the server has written it) calls
    ``sent``."""

    def __init__(self, body: Iterable[bytes], sent: Callable[[], None]) -> None:
        self._body = body
        self._sent = sent

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        close = getattr(self._body, "close", None)
        if close is not None:
            close()
        self._sent()


def _with_health(metrics_app: Any, rule: StallRule, reader: Any, run_end: _RunEnd) -> Any:
    """A WSGI app: :data:`HEALTH_PATH` answers the run's health, every other path the
    metrics, one scrape at a time, through ``reader``."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != HEALTH_PATH:
            # prometheus_client renders the whole exposition within the call.
            body = reader.scrape(lambda: metrics_app(environ, start_response))
            return run_end.serve(body, environ)
        try:
            code, body = health(rule)
        except Exception:  # the endpoint must answer: a failure is reported, once
            warn_once("prometheus:health", "rlmetrics: the health path failed to answer")
            code, body = 500, {"status": "error"}
        reasons = {200: "OK", 503: "Service Unavailable", 500: "Internal Server Error"}
        payload = json.dumps(body).encode()
        start_response(
            f"{code} {reasons[code]}",
            [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))],
        )
        return [payload]

    return app


def _serve(host: str, port: int, app: Any) -> tuple[WSGIServer, threading.Thread]:
    """``app`` served on ``host``:``port`` (IPv6 too) by a daemon thread."""
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]

    class Server(_BoundedServer):
        address_family = family

    server = make_server(str(address[0]), port, app, Server, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="rlmetrics-prometheus", daemon=True)
    thread.start()
    return server, thread


@declare_options(
    host=TEXT.read_from(HOST_ENV),
    port=PORT.read_from(PORT_ENV),
    stall_after_s=POSITIVE_NUMBER.read_from(STALL_AFTER_ENV),
    stall_factor=POSITIVE_NUMBER,
    stall_min_s=POSITIVE_NUMBER,
    final_scrape_s=NON_NEGATIVE_NUMBER,
)
def make_exporter(
    export_interval_s: float | None = None,
    host: str | None = None,
    port: int | None = None,
    stall_after_s: float | None = None,
    stall_factor: float | None = None,
    stall_min_s: float | None = None,
    final_scrape_s: float = DEFAULT_FINAL_SCRAPE_S,
) -> Exporter:
    """A Prometheus reader and its HTTP server, listening on ``host``:``port``.

    ``/health`` answers 503 once the run is stalled by the rule ``RLStepStalled`` applies too
    (:class:`~rlmetrics.liveness.StallRule`):

    :param stall_factor: silence, in median step intervals, that is a stall (default 3);
    :param stall_min_s: the shortest silence that is a stall (default 60 s);
    :param stall_after_s: the silence that is a stall before 20 step intervals are known;
        default ``RLMETRICS_STALL_AFTER_S``, else 600.
    :param final_scrape_s: at a clean end, how long at most to wait for the scrape that takes
        ``rlmetrics_run_ended`` 1 (and the run's final values); no longer than twice the pace
        the endpoint was scraped at, plus a second; 0 does not wait (default 30). Only a
        Prometheus scrape counts (a one-off request, ``curl``, is no scraper to wait for).

    ``export_interval_s`` is unused: Prometheus pulls, on its own scrape interval.
    """
    try:
        from prometheus_client import CollectorRegistry, make_wsgi_app

        _reader_class()
    except ImportError as exc:
        raise ImportError(
            f"exporter 'prometheus' needs the Prometheus exporter: {INSTALL_HINT}"
        ) from exc
    host = host or os.environ.get(HOST_ENV, "").strip() or DEFAULT_HOST
    port = port_from_env() if port is None else port
    rule = stall_rule(stall_after_s, stall_factor, stall_min_s)
    # A registry of our own: a second start in one process must not find the first's collector.
    registry = CollectorRegistry()
    reader = make_reader(registry)
    run_end = _RunEnd(final_scrape_s)
    registry.register(run_end)  # type: ignore[arg-type]
    try:
        app = _with_health(make_wsgi_app(registry), rule, reader, run_end)
        server, thread = _serve(host, port, app)
    except (OSError, ValueError) as exc:  # ValueError: a host no resolver takes (idna)
        reader.shutdown()
        held = isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE
        remedy = (
            "Another process (often a second trainer on this node) holds it: choose another "
            f"port with start(prometheus_port=...) or {PORT_ENV} (0 picks a free one)"
            if held
            else f"Check the host (start(prometheus_host=...) or {HOST_ENV}) and the port"
        )
        reason = getattr(exc, "strerror", None) or exc
        raise (PortTaken if held else TelemetryError)(
            f"the Prometheus exporter cannot listen on {host}:{port}: {reason}. {remedy}"
        ) from None  # the message says all the exception did

    # The in-process RLStepStalled alert applies the same rule, once the endpoint listens: an
    # exporter refused here (a taken port) must leave the process's rule as it was.
    configure_rule(rule)

    def close() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5.0)

    return Exporter(reader, address=(host, server.server_port), close=close, end_run=run_end.end)


@hookimpl
def register_exporters(register: Callable[[str, Callable[..., Exporter]], None]) -> None:
    register("prometheus", make_exporter)
