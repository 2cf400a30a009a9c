"""Real peers on 127.0.0.1 for tests (and demo parts): a metrics endpoint a scraping family
reads (:class:`ExpositionServer`), a tracker's server that turns every request away
(:class:`RefusingServer`), a peer that accepts and never answers (:class:`BlackHole`)
and an OTLP gRPC metrics receiver that records what it gets (:class:`OtlpReceiver`, which
needs the ``otlp`` extra: grpcio and opentelemetry-proto).

Each listens on 127.0.0.1 only, on a port the system picks.
"""

from __future__ import annotations

import http.server
import json
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import attrs

__all__ = [
    "BlackHole",
    "ExpositionServer",
    "OtlpExemplar",
    "OtlpHttpReceiver",
    "OtlpPoint",
    "OtlpReceiver",
    "OtlpSpan",
    "RefusingServer",
    "flatten_request",
    "flatten_trace_request",
]

_PeerT = TypeVar("_PeerT", bound="_Peer")


class _Peer:
    """A peer that a ``with`` block closes on the way out."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _PeerT) -> _PeerT:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _HttpPeer(_Peer):
    """An HTTP server on 127.0.0.1 (a free port), served from a thread of its own."""

    def __init__(self, handler: type[http.server.BaseHTTPRequestHandler], name: str) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_port)
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
        )
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)


class _Handler(http.server.BaseHTTPRequestHandler):
    def answer(self, status: int, content_type: str, body: bytes) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up waiting: nobody to answer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a test's or the demo's output is not for access logs


class ExpositionServer(_HttpPeer):
    """A Prometheus text exposition served at ``url`` (``/metrics`` on 127.0.0.1, a free
    port) from a thread of its own: the endpoint a scraping family reads, made real.

    ``render()`` is called for every request and its text is the answer; a ``render`` that
    raises answers HTTP 500, as a failing agent would, and one that blocks holds the request.
    """

    def __init__(self, render: Callable[[], str], name: str = "exposition-server") -> None:
        self.render = render
        owner = self

        class Handler(_Handler):
            def do_GET(self) -> None:
                try:
                    body = owner.render().encode()
                except Exception as exc:
                    self.send_error(500, type(exc).__name__)
                    return
                self.answer(200, "text/plain; version=0.0.4; charset=utf-8", body)

        super().__init__(Handler, name)
        self.url = f"{self.endpoint}/metrics"


class RefusingServer(_HttpPeer):
    """An HTTP server on 127.0.0.1 that answers every request (any method, any path) with
    ``status`` and the JSON ``body``: a tracker's server turning a credential away, as W&B's
    (401, the reason in GraphQL's ``errors``) and MLflow's (401, ``error_code`` and
    ``message``) do. ``requests`` counts what it answered."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        payload = json.dumps(body).encode()
        owner = self
        self.requests = 0

        class Handler(_Handler):
            def refuse(self) -> None:
                owner.requests += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.answer(status, "application/json", payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = refuse

        super().__init__(Handler, "refusing-server")


class BlackHole(_Peer):
    """A TCP endpoint on 127.0.0.1 that accepts connections and never answers: a request to
    it hangs until the client's own deadline, like a collector or a node agent behind a
    dropped route. ``connected`` is set by the first connection."""

    #: Connections held open at most; later ones wait in the listen backlog.
    MAX_HELD = 256

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.05)  # how soon close() is noticed
        self.port = int(self._sock.getsockname()[1])
        self.connected = threading.Event()
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="blackhole", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<port>``, as an OTLP exporter or a scraper is given it."""
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set() and len(self._held) < self.MAX_HELD:
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            self._held.append(conn)
            self.connected.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._sock.close()


@attrs.frozen
class OtlpPoint:
    """One data point as it arrived on the wire, with its metric and resource."""

    name: str
    unit: str
    description: str
    kind: str  # "gauge", "sum", "histogram", "exponential_histogram"
    monotonic: bool | None
    temporality: int | None
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    value: float | int | None = None
    count: int | None = None
    sum: float | None = None
    bucket_counts: tuple[int, ...] = ()
    bounds: tuple[float, ...] = ()
    exemplars: tuple[OtlpExemplar, ...] = ()
    #: An exponential histogram's scale, zero bucket and positive buckets (offset, counts).
    scale: int | None = None
    zero_count: int | None = None
    positive_offset: int | None = None
    positive_bucket_counts: tuple[int, ...] = ()


@attrs.frozen
class OtlpExemplar:
    """An exemplar of a point: its value and the span it was recorded in (lower-case hex)."""

    value: float | int
    trace_id: str
    span_id: str


@attrs.frozen
class OtlpSpan:
    """One span as it arrived on the wire: ids as lower-case hex (``parent_id`` None for a
    root), times in Unix ns, the status code (0 unset, 1 ok, 2 error)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int
    status: int
    events: tuple[str, ...]
    resource: dict[str, Any]
    scope: str

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def _exemplars(dp: Any) -> tuple[OtlpExemplar, ...]:
    return tuple(
        OtlpExemplar(
            value=getattr(e, e.WhichOneof("value")) if e.WhichOneof("value") else 0,
            trace_id=e.trace_id.hex(),
            span_id=e.span_id.hex(),
        )
        for e in dp.exemplars
    )


def flatten_trace_request(request: Any) -> list[OtlpSpan]:
    """Every span of one ``ExportTraceServiceRequest``."""
    return [
        OtlpSpan(
            name=span.name,
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            parent_id=span.parent_span_id.hex() or None,
            attributes=_key_values(span.attributes),
            start_ns=span.start_time_unix_nano,
            end_ns=span.end_time_unix_nano,
            status=span.status.code,
            events=tuple(event.name for event in span.events),
            resource=_key_values(rs.resource.attributes),
            scope=ss.scope.name,
        )
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]


def _any_value(value: Any) -> Any:
    field = value.WhichOneof("value")
    return None if field is None else getattr(value, field)


def _key_values(items: Any) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in items}


def flatten_request(request: Any) -> list[OtlpPoint]:
    """Every data point of one ``ExportMetricsServiceRequest``."""
    out: list[OtlpPoint] = []
    for rm in request.resource_metrics:
        resource = _key_values(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                data = getattr(metric, kind)
                common: dict[str, Any] = {
                    "name": metric.name,
                    "unit": metric.unit,
                    "description": metric.description,
                    "kind": kind,
                    "monotonic": data.is_monotonic if kind == "sum" else None,
                    "temporality": getattr(data, "aggregation_temporality", None),
                    "resource": resource,
                    "scope": sm.scope.name,
                }
                for dp in data.data_points:
                    attributes = _key_values(dp.attributes)
                    if kind == "histogram":
                        out.append(
                            OtlpPoint(
                                attributes=attributes,
                                count=dp.count,
                                sum=dp.sum,
                                bucket_counts=tuple(dp.bucket_counts),
                                bounds=tuple(dp.explicit_bounds),
                                exemplars=_exemplars(dp),
                                **common,
                            )
                        )
                    elif kind == "exponential_histogram":
                        out.append(
                            OtlpPoint(
                                attributes=attributes,
                                count=dp.count,
                                sum=dp.sum,
                                scale=dp.scale,
                                zero_count=dp.zero_count,
                                positive_offset=dp.positive.offset,
                                positive_bucket_counts=tuple(dp.positive.bucket_counts),
                                exemplars=_exemplars(dp),
                                **common,
                            )
                        )
                    elif kind in ("gauge", "sum"):
                        value = getattr(dp, dp.WhichOneof("value"))
                        out.append(
                            OtlpPoint(
                                attributes=attributes,
                                value=value,
                                exemplars=_exemplars(dp),
                                **common,
                            )
                        )
    return out


def _answer(response_type: Any, partly_rejects: tuple[int, str] | None) -> Any:
    """An export's answer: a success, which rejected a count of points or spans (with a
    message) when ``partly_rejects`` says so."""
    response = response_type()
    if partly_rejects is not None:
        count, message = partly_rejects
        partial = response.partial_success
        rejected = next(f.name for f in partial.DESCRIPTOR.fields if f.name.startswith("rejected"))
        setattr(partial, rejected, count)
        partial.error_message = message
    return response


class OtlpReceiver:
    """A real OTLP gRPC endpoint on 127.0.0.1 (metrics and traces, as a collector serves both
    on one port), recording what it receives.

    ``reject_with`` makes it answer every request with that (non-retryable) status, as a
    collector that refuses our data would; ``stop()`` and ``start()`` take it down and bring
    it back on the same port. ``tls``, a (private key, certificate chain) pair in PEM, serves
    over TLS (its endpoint is ``https://``), as a collector with a certificate of a private
    CA does. ``answer_after_s`` answers each request that long after it arrived (recorded at
    once), as a collector that is slow, not dead, does. ``max_receive_bytes`` (set before
    ``start()``) refuses a larger request with RESOURCE_EXHAUSTED, as a collector's
    ``max_recv_msg_size_mib`` (4 MiB unless set) does. ``partly_rejects`` (a count and a
    message) answers each request as a success that rejected that many points or spans, as
    a collector or its backend does with OTLP's ``partial_success``.
    """

    #: How long :meth:`wait_for` waits unless told.
    WAIT_S = 15.0

    def __init__(self, tls: tuple[bytes, bytes] | None = None) -> None:
        self.tls = tls
        self.port = 0
        self._server: Any = None
        self._cond = threading.Condition()
        self.requests: list[Any] = []
        self.trace_requests: list[Any] = []
        self.rejected = 0
        self.reject_with: Any = None
        self.answer_after_s = 0.0
        self.max_receive_bytes: int | None = None
        self.partly_rejects: tuple[int, str] | None = None

    @property
    def endpoint(self) -> str:
        return f"{'http' if self.tls is None else 'https'}://127.0.0.1:{self.port}"

    def start(self) -> OtlpReceiver:
        import grpc
        from opentelemetry.proto.collector.metrics.v1 import (
            metrics_service_pb2,
            metrics_service_pb2_grpc,
        )
        from opentelemetry.proto.collector.trace.v1 import (
            trace_service_pb2,
            trace_service_pb2_grpc,
        )

        receiver = self

        class Servicer(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc]
            def Export(self, request: Any, context: Any) -> Any:
                receiver._handle(request, context)
                return _answer(
                    metrics_service_pb2.ExportMetricsServiceResponse, receiver.partly_rejects
                )

        class TraceServicer(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
            def Export(self, request: Any, context: Any) -> Any:
                receiver._handle(request, context, receiver.trace_requests)
                return _answer(
                    trace_service_pb2.ExportTraceServiceResponse, receiver.partly_rejects
                )

        limit = self.max_receive_bytes
        options = [] if limit is None else [("grpc.max_receive_message_length", limit)]
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=options)
        add_servicer = metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server
        add_servicer(Servicer(), server)  # type: ignore[no-untyped-call]
        add_traces = trace_service_pb2_grpc.add_TraceServiceServicer_to_server
        add_traces(TraceServicer(), server)  # type: ignore[no-untyped-call]
        address = f"127.0.0.1:{self.port}"
        if self.tls is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, grpc.ssl_server_credentials([self.tls]))
        if port == 0:
            raise RuntimeError(f"could not bind the OTLP receiver to 127.0.0.1:{self.port}")
        server.start()
        self.port, self._server = port, server
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace=None).wait(5)

    close = stop

    @property
    def running(self) -> bool:
        return self._server is not None

    def _handle(self, request: Any, context: Any, into: list[Any] | None = None) -> None:
        with self._cond:
            status = self.reject_with
            if status is not None:
                self.rejected += 1
            else:
                (self.requests if into is None else into).append(request)
            self._cond.notify_all()
        if self.answer_after_s:
            time.sleep(self.answer_after_s)
        if status is not None:
            context.abort(status, "rlmetrics test receiver rejects this request")

    def points(self) -> list[OtlpPoint]:
        with self._cond:
            requests = list(self.requests)
        return [p for r in requests for p in flatten_request(r)]

    def spans(self) -> list[OtlpSpan]:
        """Every span received, in the order the requests arrived."""
        with self._cond:
            requests = list(self.trace_requests)
        return [s for r in requests for s in flatten_trace_request(r)]

    def latest(self) -> dict[tuple[str, frozenset[tuple[str, Any]]], OtlpPoint]:
        """The last point received for each (name, attribute set)."""
        return {(p.name, frozenset(p.attributes.items())): p for p in self.points()}

    def find(self, name: str, **attributes: Any) -> OtlpPoint | None:
        """The latest point named ``name`` whose attributes equal ``attributes``."""
        return self.latest().get((name, frozenset(attributes.items())))

    def resources(self) -> list[tuple[dict[str, Any], frozenset[str]]]:
        """Each exported resource's attributes with the metric names it carried, one entry
        per resource of every request (a process that exports nothing has none)."""
        with self._cond:
            requests = list(self.requests)
        return [
            (
                _key_values(rm.resource.attributes),
                frozenset(m.name for sm in rm.scope_metrics for m in sm.metrics),
            )
            for request in requests
            for rm in request.resource_metrics
        ]

    def wait_for(
        self,
        predicate: Callable[[OtlpReceiver], Any],
        timeout_s: float = WAIT_S,
        what: str = "",
    ) -> Any:
        """Wait, woken by each arriving request, until ``predicate(self)`` is truthy."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                result = predicate(self)
                if result:
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"OTLP receiver: timed out after {timeout_s:.1f} s waiting for "
                        f"{what or predicate}; {len(self.requests)} requests received, "
                        f"{self.rejected} rejected"
                    )
                self._cond.wait(min(remaining, 0.5))


def _tls_context(key: bytes, certificate: bytes) -> ssl.SSLContext:
    """A server context for a PEM key and certificate chain (``ssl`` loads them from files
    only: they are written to a folder of the process's own, and removed)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory(prefix="rlmetrics-tls-") as folder:
        key_file, chain_file = Path(folder, "key.pem"), Path(folder, "chain.pem")
        key_file.write_bytes(key)
        chain_file.write_bytes(certificate)
        context.load_cert_chain(chain_file, key_file)
    return context


class OtlpHttpReceiver(OtlpReceiver):
    """A real OTLP/HTTP endpoint on 127.0.0.1 (``POST /v1/metrics`` and ``/v1/traces``,
    protobuf bodies), recording what it receives; the same reading methods as
    :class:`OtlpReceiver`. ``reject_with`` is an HTTP status (400: a collector that refuses
    our data, without retries); :attr:`endpoint` is the base URL the exporter adds paths to.
    ``tls`` serves HTTPS with that (private key, certificate chain) pair, as the gRPC
    receiver does. :attr:`headers` holds each accepted request's HTTP headers;
    ``partly_rejects`` answers as the gRPC receiver's does.
    """

    def __init__(self, tls: tuple[bytes, bytes] | None = None) -> None:
        super().__init__(tls)
        self.headers: list[dict[str, str]] = []

    def start(self) -> OtlpHttpReceiver:
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        receiver = self
        kinds: dict[str, tuple[Any, Any, list[Any] | None]] = {
            "/v1/metrics": (
                metrics_service_pb2.ExportMetricsServiceRequest,
                metrics_service_pb2.ExportMetricsServiceResponse,
                None,
            ),
            "/v1/traces": (
                trace_service_pb2.ExportTraceServiceRequest,
                trace_service_pb2.ExportTraceServiceResponse,
                self.trace_requests,
            ),
        }

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                kind = kinds.get(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if kind is None:
                    self.send_error(404)
                    return
                request_type, response_type, into = kind
                try:
                    request = request_type.FromString(body)
                except Exception:
                    self.send_error(400, "not an OTLP protobuf request")
                    return
                with receiver._cond:
                    status = receiver.reject_with
                    if status is not None:
                        receiver.rejected += 1
                    else:
                        (receiver.requests if into is None else into).append(request)
                        receiver.headers.append(dict(self.headers.items()))
                    receiver._cond.notify_all()
                if receiver.answer_after_s:
                    time.sleep(receiver.answer_after_s)
                if status is not None:
                    self.send_error(int(status), "rlmetrics test receiver rejects this request")
                    return
                answer = _answer(response_type, receiver.partly_rejects).SerializeToString()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # an exporter that gave up on a late answer (answer_after_s)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        if self.tls is not None:
            server.socket = _tls_context(*self.tls).wrap_socket(server.socket, server_side=True)
        self.port = int(server.server_port)
        thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="otlp-http-receiver",
            daemon=True,
        )
        thread.start()
        self._server = server
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    close = stop
