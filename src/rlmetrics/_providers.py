"""The only module that imports the OpenTelemetry SDK and exporters.

``import rlmetrics`` stays light (no SDK, no gRPC, no prometheus_client); this module is
imported by ``rlmetrics.start()`` and builds one MeterProvider with every reader side by side.
"""

from __future__ import annotations

import functools
import os
import threading
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import OTELResourceDetector, Resource

from ._warn import logger, warn_once

__all__ = [
    "DEFAULT_OTLP_TIMEOUT_S",
    "Built",
    "build_provider",
    "otlp_timeout_s",
    "resource_attributes",
]

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
    readers: list[MetricReader] = attrs.Factory(list)

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
    explicit = {
        "service.name": service_name,
        "service.version": service_version,
        RUN_ID_ATTR: run_id,
    }
    attributes.update({k: v for k, v in explicit.items() if v is not None})
    return attributes


#: Seconds one OTLP export may take, retries included, unless OTEL_EXPORTER_OTLP_TIMEOUT or
#: OTEL_EXPORTER_OTLP_METRICS_TIMEOUT says otherwise (the SDK's own default is 10 s). Shorter
#: than the default shutdown bound (5 s), so the last export of a run against a dead collector
#: gives up inside ``shutdown()`` instead of being abandoned mid-retry; long enough for a live
#: collector across a cluster network, and for one retry after a collector restart.
DEFAULT_OTLP_TIMEOUT_S = 3.0
_OTLP_TIMEOUT_ENV = ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")


def otlp_timeout_s() -> float | None:
    """The ``timeout=`` rlmetrics passes to the OTLP exporter: None (let the SDK read the
    environment) when either timeout variable is set, else :data:`DEFAULT_OTLP_TIMEOUT_S`."""
    if any(os.environ.get(name, "").strip() for name in _OTLP_TIMEOUT_ENV):
        return None
    return DEFAULT_OTLP_TIMEOUT_S


class _RecordingStub:
    """Wraps the exporter's gRPC stub to remember why the last call failed.

    The SDK exporter logs a failure and returns FAILURE without saying why; the status code
    is what tells a dead collector (UNAVAILABLE) from one that rejects us (INVALID_ARGUMENT,
    UNAUTHENTICATED...), so it is what a report is keyed on.
    """

    def __init__(self, stub: Any, owner: Any) -> None:
        self._stub = stub
        self._owner = owner

    def Export(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._stub.Export(*args, **kwargs)
        except Exception as error:
            self._owner._rlmetrics_last_error = error
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)


def _describe_rpc_error(error: BaseException | None) -> tuple[str, str]:
    """``(cause, details)`` of a failed export: the gRPC status name, or the exception type."""
    if error is None:
        return "FAILURE", "the exporter gave up without an RPC error (shutting down?)"
    code = getattr(error, "code", None)
    if callable(code):
        try:
            status = code()
            details = error.details()  # type: ignore[attr-defined]
            return str(getattr(status, "name", status)), str(details)
        except Exception:
            pass
    return type(error).__name__, str(error)


@functools.cache
def _otlp_exporter_class() -> type:
    try:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    except ImportError as exc:
        raise ImportError(
            f"exporter 'otlp' needs the OTLP gRPC exporter: {_INSTALL_HINT['otlp']}"
        ) from exc
    from opentelemetry.sdk.metrics.export import MetricExportResult

    class ReportingOTLPMetricExporter(OTLPMetricExporter):  # type: ignore[misc]
        """The SDK's OTLP gRPC metric exporter, reporting failed exports through
        ``warn_once``: once per endpoint and cause at WARNING, at DEBUG afterwards.

        The SDK drops a failed batch (with cumulative temporality the next successful export
        carries the totals again) and only logs; this makes the failure visible in the
        ``rlmetrics`` log where the rest of the telemetry failures are reported.
        """

        _rlmetrics_last_error: BaseException | None = None

        def _initialize_channel_and_stub(self) -> None:
            # Called at construction and again when the SDK rebuilds a channel after UNAVAILABLE.
            super()._initialize_channel_and_stub()  # type: ignore[no-untyped-call]
            if self._client is not None:
                self._client = _RecordingStub(self._client, self)

        def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
            self._rlmetrics_last_error = None
            try:
                result = super().export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            except Exception as exc:
                warn_once(
                    f"otlp:export:{self._endpoint}:{type(exc).__name__}",
                    f"rlmetrics: OTLP export to {self._endpoint} raised {exc!r}; these points "
                    "are dropped and training goes on",
                )
                return MetricExportResult.FAILURE
            if result is not MetricExportResult.SUCCESS:
                self._report_failure()
            return result

        def _report_failure(self) -> None:
            error = self._rlmetrics_last_error
            cause, details = _describe_rpc_error(error)
            message = (
                f"rlmetrics: OTLP export to {self._endpoint} failed ({cause}: {details}); "
                "these points are dropped and training goes on (cumulative totals are sent "
                "again by the next export that succeeds). Later failures with this cause are "
                "logged at DEBUG."
            )
            if getattr(self, "_shutdown", False):
                # The export outlived shutdown's bound, which telemetry already reported.
                logger.debug(message)
                return
            if error is None:
                warn_once(f"otlp:export:{self._endpoint}:{cause}", message)
                return
            try:  # so the first report carries the RPC error's traceback, not this thread's
                raise error
            except Exception:
                warn_once(f"otlp:export:{self._endpoint}:{cause}", message)

    return ReportingOTLPMetricExporter


class _OTLPReader(PeriodicExportingMetricReader):
    """A periodic reader whose shutdown cuts the OTLP exporter's retry backoff short.

    The SDK tells the exporter about shutdown only after the reader's last collection, so
    with a dead collector that collection (and any export still in flight) sleeps through
    the exporter's retry backoff, up to its whole timeout. Setting the exporter's interrupt
    first keeps one attempt per export: a live collector still gets the final points, a dead
    one fails at once instead of holding ``shutdown()`` for the full bound.
    """

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        interrupt = getattr(self._exporter, "_shutdown_in_progress", None)
        if isinstance(interrupt, threading.Event):
            interrupt.set()
        super().shutdown(timeout_millis=timeout_millis, **kwargs)


def _otlp_reader(interval_ms: float | None, endpoint: str | None) -> MetricReader:
    exporter_class = _otlp_exporter_class()
    kwargs: dict[str, Any] = {}
    if endpoint is not None:
        kwargs["endpoint"] = endpoint
        kwargs["insecure"] = not endpoint.startswith("https://")
    timeout = otlp_timeout_s()
    if timeout is not None:
        kwargs["timeout"] = timeout
    return _OTLPReader(exporter_class(**kwargs), export_interval_millis=interval_ms)


def _console_reader(interval_ms: float | None) -> MetricReader:
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

    return PeriodicExportingMetricReader(
        ConsoleMetricExporter(), export_interval_millis=interval_ms
    )


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
        built.readers = all_readers
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
