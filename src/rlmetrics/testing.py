"""Helpers for testing rlmetrics and its plugins against the real SDK.

``in_memory_telemetry()`` starts telemetry with an ``InMemoryMetricReader`` on an isolated
copy of the registry; ``points(reader)`` collects once and flattens what was exported into
plain :class:`Point` records to assert on; :class:`ExpositionServer` is a metrics endpoint on
127.0.0.1 for a family that scrapes one, :class:`BlackHole` a peer that never answers. Plugin
test suites (and demo parts) use these too.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

import attrs

from . import _warn, plugins, registry
from .telemetry import Telemetry, current, start

__all__ = [
    "FUZZ_PROFILE_ENV",
    "BlackHole",
    "ExpositionServer",
    "Point",
    "in_memory_telemetry",
    "isolated_state",
    "load_hypothesis_profile",
    "points",
    "single",
    "wait_until",
]

#: Names the hypothesis profile a test session runs: ``default`` or ``fuzz`` (10**5 examples).
FUZZ_PROFILE_ENV = "RLMETRICS_HYPOTHESIS_PROFILE"


@attrs.frozen
class Point:
    """One exported data point, with the instrument it belongs to."""

    name: str
    unit: str
    kind: str  # "gauge", "sum" or "histogram"
    monotonic: bool | None
    attributes: dict[str, Any]
    value: float | None = None  # gauge and sum
    count: int | None = None  # histogram
    sum: float | None = None
    bucket_counts: tuple[int, ...] = ()
    bounds: tuple[float, ...] = ()
    resource: dict[str, Any] = attrs.field(factory=dict, repr=False)


def points(reader: Any) -> list[Point]:
    """Collect once from ``reader`` (an InMemoryMetricReader) and flatten the result."""
    data = reader.get_metrics_data()
    out: list[Point] = []
    if data is None:
        return out
    for resource_metrics in data.resource_metrics:
        resource = dict(resource_metrics.resource.attributes)
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                kind = type(metric.data).__name__.lower()
                monotonic = getattr(metric.data, "is_monotonic", None)
                for dp in metric.data.data_points:
                    common = {
                        "name": metric.name,
                        "unit": metric.unit,
                        "kind": kind,
                        "monotonic": monotonic,
                        "attributes": dict(dp.attributes or {}),
                        "resource": resource,
                    }
                    if kind == "histogram":
                        out.append(
                            Point(
                                count=dp.count,
                                sum=dp.sum,
                                bucket_counts=tuple(dp.bucket_counts),
                                bounds=tuple(dp.explicit_bounds),
                                **common,
                            )
                        )
                    else:
                        out.append(Point(value=dp.value, **common))
    return out


def single(found: list[Point], name: str, **attributes: Any) -> Point:
    """The one point named ``name`` whose attributes include ``attributes``."""
    matches = [
        p
        for p in found
        if p.name == name and all(p.attributes.get(k) == v for k, v in attributes.items())
    ]
    if len(matches) != 1:
        raise AssertionError(f"expected one {name} {attributes}, found {matches}")
    return matches[0]


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy and return that; fail the test
    (``AssertionError`` naming ``what``) after ``timeout_s``. For what no event announces:
    a reader's next collection, a store another thread writes, a process's exit."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout_s:.1f} s waiting for {what or predicate}"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


@contextlib.contextmanager
def isolated_state(
    replacement: registry.MetricRegistry | None = None,
) -> Iterator[registry.MetricRegistry]:
    """A fresh copy of the default registry (or ``replacement``, say an empty one) and fresh
    plugin and warn-once state, restored afterwards, so one test's start/declare cannot leak
    into the next."""
    # Import every installed plugin first, so their import-time declarations land in the
    # process registry that every test's copy starts from.
    plugins.get_plugins()
    saved_registry, saved_plugins = registry._default, plugins._plugins
    saved_in_process = dict(plugins._in_process)
    registry._default = replacement if replacement is not None else saved_registry.copy()
    plugins._plugins = None
    _warn._reset()
    try:
        yield registry._default
    finally:
        handle = current()
        if handle is not None:
            handle.shutdown(timeout_s=5)
        registry._default, plugins._plugins = saved_registry, saved_plugins
        plugins._in_process.clear()
        plugins._in_process.update(saved_in_process)
        _warn._reset()


def load_hypothesis_profile() -> str:
    """Register rlmetrics' hypothesis profiles and load the one ``RLMETRICS_HYPOTHESIS_PROFILE``
    names (call it from a ``conftest.py``): ``default`` is hypothesis' own (100 examples a
    property); ``fuzz`` runs 10**5 examples a property with no deadline (``tox -e fuzz``).
    Properties that set ``max_examples`` themselves keep it."""
    import os

    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "fuzz",
        max_examples=100_000,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    name = os.environ.get(FUZZ_PROFILE_ENV, "default")
    settings.load_profile(name)
    return name


@contextlib.contextmanager
def in_memory_telemetry(**start_kwargs: Any) -> Iterator[tuple[Telemetry, Any]]:
    """Start telemetry with an InMemoryMetricReader (plus any ``start`` arguments)."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    start_kwargs.setdefault("service_name", "rlmetrics-test")
    handle = start(readers=[reader, *start_kwargs.pop("readers", ())], **start_kwargs)
    try:
        yield handle, reader
    finally:
        handle.shutdown(timeout_s=5)


class ExpositionServer:
    """A Prometheus text exposition served at ``url`` (``/metrics`` on 127.0.0.1, a free
    port) from a thread of its own: the endpoint a scraping family reads, made real.

    ``render()`` is called for every request and its text is the answer; a ``render`` that
    raises answers HTTP 500, as a failing agent would, and one that blocks holds the request.
    """

    def __init__(self, render: Callable[[], str], name: str = "exposition-server") -> None:
        self.render = render
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                try:
                    body = owner.render().encode()
                except Exception as exc:
                    self.send_error(500, type(exc).__name__)
                    return
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the scraper gave up waiting: nobody to answer

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a test's or the demo's output is not for access logs

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_port)
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    def __enter__(self) -> ExpositionServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class BlackHole:
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

    def __enter__(self) -> BlackHole:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
