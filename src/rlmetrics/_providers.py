"""The only module that imports the OpenTelemetry SDK and exporters.

``import rlmetrics`` stays light (no SDK, no gRPC, no prometheus_client); this module is
imported by ``rlmetrics.start()`` and builds one MeterProvider with every reader side by side.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import OTELResourceDetector, Resource

__all__ = ["Built", "EXPORTERS", "build_provider", "resource_attributes"]

EXPORTERS = ("otlp", "prometheus", "console")
RUN_ID_ATTR = "rlmetrics.run.id"
_INSTALL_HINT = {
    "otlp": "pip install 'rlmetrics[otlp]'",
    "prometheus": "pip install 'rlmetrics[prometheus]'",
}


@attrs.define
class Built:
    provider: MeterProvider
    prometheus_server: Any = None
    prometheus_address: tuple[str, int] | None = None

    def close_servers(self) -> None:
        if self.prometheus_server is not None:
            self.prometheus_server.shutdown()
            self.prometheus_server.server_close()
            self.prometheus_server = None


def resource_attributes(
    service_name: str | None,
    service_version: str | None,
    run_id: str | None,
    caller: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Resource attributes, later sources winning: defaults, environment, caller, arguments.

    The environment is ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``; the run id falls
    back to ``SLURM_JOB_ID``, then to a generated id, so every point of a run can be isolated.
    """
    from . import __version__

    attributes: dict[str, Any] = {
        "service.name": "rlmetrics",
        "service.version": __version__,
        RUN_ID_ATTR: os.environ.get("SLURM_JOB_ID") or uuid.uuid4().hex[:12],
    }
    attributes.update(OTELResourceDetector().detect().attributes)
    attributes.update(caller or {})
    explicit = {"service.name": service_name, "service.version": service_version, RUN_ID_ATTR: run_id}
    attributes.update({k: v for k, v in explicit.items() if v is not None})
    return attributes


def _otlp_reader(interval_ms: float | None, endpoint: str | None) -> MetricReader:
    try:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    except ImportError as exc:
        raise ImportError(f"exporter 'otlp' needs the OTLP gRPC exporter: {_INSTALL_HINT['otlp']}") from exc
    kwargs: dict[str, Any] = {}
    if endpoint is not None:
        kwargs["endpoint"] = endpoint
        kwargs["insecure"] = not endpoint.startswith("https://")
    return PeriodicExportingMetricReader(OTLPMetricExporter(**kwargs), export_interval_millis=interval_ms)


def _console_reader(interval_ms: float | None) -> MetricReader:
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

    return PeriodicExportingMetricReader(ConsoleMetricExporter(), export_interval_millis=interval_ms)


def _prometheus_reader(host: str, port: int) -> tuple[MetricReader, Any, tuple[str, int]]:
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError as exc:
        raise ImportError(
            f"exporter 'prometheus' needs the Prometheus exporter: {_INSTALL_HINT['prometheus']}"
        ) from exc
    # A registry of our own: a second start in one process must not find the first's collector.
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry)
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return reader, server, (host, server.server_port)


def build_provider(
    resource: Mapping[str, Any],
    exporters: Sequence[str],
    readers: Sequence[MetricReader],
    export_interval_s: float | None,
    prometheus_host: str,
    prometheus_port: int,
    otlp_endpoint: str | None,
) -> Built:
    interval_ms = None if export_interval_s is None else export_interval_s * 1000.0
    all_readers: list[MetricReader] = []
    built = Built(provider=None)  # type: ignore[arg-type]
    try:
        for name in exporters:
            if name == "otlp":
                all_readers.append(_otlp_reader(interval_ms, otlp_endpoint))
            elif name == "console":
                all_readers.append(_console_reader(interval_ms))
            elif name == "prometheus":
                reader, built.prometheus_server, built.prometheus_address = _prometheus_reader(
                    prometheus_host, prometheus_port
                )
                all_readers.append(reader)
        all_readers.extend(readers)
        # shutdown_on_exit=False: the SDK's atexit shutdown is unbounded with a dead
        # collector; rlmetrics registers its own, bounded one.
        built.provider = MeterProvider(
            metric_readers=all_readers,
            resource=Resource.create(dict(resource)),
            shutdown_on_exit=False,
        )
    except BaseException:
        built.close_servers()
        raise
    return built
