"""The ``prometheus`` exporter: an HTTP ``/metrics`` endpoint for a Prometheus server to scrape.

It listens on 127.0.0.1:9464 unless told otherwise (``start(prometheus_host=...,
prometheus_port=...)``, else ``OTEL_EXPORTER_PROMETHEUS_HOST`` / ``_PORT``; an empty variable
counts as unset). The SDK's own ``start_http_server`` default is every interface, which would
publish a training job's metrics to its whole network. Port 0 picks a free port; the handle's
``prometheus_address`` says which.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .. import hookimpl
from ..telemetry import TelemetryError
from . import Exporter

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "HOST_ENV", "PORT_ENV", "make_exporter"]

INSTALL_HINT = "pip install 'rlmetrics[prometheus]'"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9464
HOST_ENV = "OTEL_EXPORTER_PROMETHEUS_HOST"
PORT_ENV = "OTEL_EXPORTER_PROMETHEUS_PORT"


def _port_from_env() -> int:
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


def make_exporter(
    export_interval_s: float | None = None,
    host: str | None = None,
    port: int | None = None,
) -> Exporter:
    """A Prometheus reader and its HTTP server, listening on ``host``:``port``.

    ``export_interval_s`` is unused: Prometheus pulls, on its own scrape interval.
    """
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError as exc:
        raise ImportError(
            f"exporter 'prometheus' needs the Prometheus exporter: {INSTALL_HINT}"
        ) from exc
    host = host or os.environ.get(HOST_ENV, "").strip() or DEFAULT_HOST
    port = _port_from_env() if port is None else port
    # A registry of our own: a second start in one process must not find the first's collector.
    registry = CollectorRegistry()
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise TelemetryError(
            f"the Prometheus exporter cannot listen on {host}:{port}: {exc.strerror or exc}. "
            "Another process (often a second trainer on this node) holds it: choose another "
            f"port with start(prometheus_port=...) or {PORT_ENV} (0 picks a free one)"
        ) from exc
    reader = PrometheusMetricReader(registry=registry)

    def close() -> None:
        server.shutdown()
        server.server_close()
        thread.join(5.0)

    return Exporter(reader, address=(host, server.server_port), close=close)


@hookimpl
def register_exporters(register: Callable[[str, Callable[..., Exporter]], None]) -> None:
    register("prometheus", make_exporter)
