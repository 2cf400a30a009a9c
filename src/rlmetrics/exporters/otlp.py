"""The ``otlp`` exporter: OTLP over gRPC to a collector, with bounded, reported failures.

Configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables, or by
``start(otlp_endpoint=...)``. Three things the SDK's exporter does not do are added here:

- a 3 s export timeout when neither timeout variable is set (the SDK's 10 s would outlive
  ``shutdown()``'s bound against a dead collector);
- each failed export reported through ``warn_once``, once per endpoint and gRPC status;
- ``shutdown()`` cutting the exporter's retry backoff short.

They need the private SDK attributes listed in :data:`PRIVATE_SDK_ATTRIBUTES` — every private
attribute rlmetrics touches is in this module, and a test on each supported SDK asserts that
each still exists, so an SDK release that removes one fails CI instead of silently changing
behaviour. The SDK is imported only when the exporter is built.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import TYPE_CHECKING, Any

from .. import hookimpl
from .._warn import logger, warn_once
from . import Exporter, ForkSafe, periodic_reader

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "DEFAULT_OTLP_TIMEOUT_S",
    "PRIVATE_SDK_ATTRIBUTES",
    "make_exporter",
    "otlp_timeout_s",
    "register_exporters",
]

INSTALL_HINT = "pip install 'rlmetrics[otlp]'"

#: Every private SDK attribute this module touches: ``(owner, attribute, why)``. The owner
#: ``exporter`` is ``OTLPMetricExporter``; ``reader`` is ``PeriodicExportingMetricReader``.
PRIVATE_SDK_ATTRIBUTES: tuple[tuple[str, str, str], ...] = (
    ("exporter", "_initialize_channel_and_stub", "rebuilt stubs must stay wrapped"),
    ("exporter", "_client", "the gRPC stub, wrapped to learn why an export failed"),
    ("exporter", "_endpoint", "named in failure reports"),
    ("exporter", "_shutdown", "a failure after shutdown's bound is logged at DEBUG only"),
    ("exporter", "_shutdown_in_progress", "set early so shutdown cuts the retry backoff"),
    ("reader", "_exporter", "the reader's exporter, to interrupt its retries"),
)

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

    def __init__(self, stub: Any, remember: Callable[[BaseException], None]) -> None:
        self._stub = stub
        self._remember = remember

    def Export(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._stub.Export(*args, **kwargs)
        except Exception as error:
            self._remember(error)
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
def _exporter_class() -> type:
    try:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    except ImportError as exc:
        raise ImportError(f"exporter 'otlp' needs the OTLP gRPC exporter: {INSTALL_HINT}") from exc
    from opentelemetry.sdk.metrics.export import MetricExportResult

    class ReportingOTLPMetricExporter(ForkSafe, OTLPMetricExporter):  # type: ignore[misc]
        """The SDK's OTLP gRPC metric exporter, reporting failed exports through
        ``warn_once``: once per endpoint and cause at WARNING, at DEBUG afterwards, and quiet
        in a forked child (:class:`~rlmetrics.exporters.ForkSafe`).

        The SDK drops a failed batch (with cumulative temporality the next successful export
        carries the totals again) and only logs; this makes the failure visible in the
        ``rlmetrics`` log where the rest of the telemetry failures are reported.
        """

        _rlmetrics_last_error: BaseException | None = None

        def _remember(self, error: BaseException) -> None:
            self._rlmetrics_last_error = error

        def _initialize_channel_and_stub(self) -> None:
            # Called at construction and again when the SDK rebuilds a channel after UNAVAILABLE.
            super()._initialize_channel_and_stub()  # type: ignore[no-untyped-call]
            if self._client is not None:
                self._client = _RecordingStub(self._client, self._remember)

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


@functools.cache
def _reader_class() -> type:
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    class OTLPReader(PeriodicExportingMetricReader):
        """A periodic reader whose shutdown cuts the OTLP exporter's retry backoff short.

        The SDK tells the exporter about shutdown only after the reader's last collection, so
        with a dead collector that collection (and any export still in flight) sleeps through
        the exporter's retry backoff, up to its whole timeout. Setting the exporter's interrupt
        first keeps one attempt per export: a live collector still gets the final points, a
        dead one fails at once instead of holding ``shutdown()`` for the full bound.
        """

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            interrupt = getattr(self._exporter, "_shutdown_in_progress", None)
            if isinstance(interrupt, threading.Event):
                interrupt.set()
            super().shutdown(timeout_millis=timeout_millis, **kwargs)

    return OTLPReader


def make_exporter(
    export_interval_s: float | None = None,
    endpoint: str | None = None,
    timeout_s: float | None = None,
) -> Exporter:
    """An OTLP gRPC exporter on a periodic reader.

    :param endpoint: ``host:port`` or a URL (``https://`` means TLS); default from
        ``OTEL_EXPORTER_OTLP[_METRICS]_ENDPOINT``, else the SDK's ``localhost:4317``.
    :param timeout_s: seconds per export, retries included; default :func:`otlp_timeout_s`.
    """
    kwargs: dict[str, Any] = {}
    if endpoint is not None:
        kwargs["endpoint"] = endpoint
        kwargs["insecure"] = not endpoint.startswith("https://")
    timeout = timeout_s if timeout_s is not None else otlp_timeout_s()
    if timeout is not None:
        kwargs["timeout"] = timeout
    exporter = _exporter_class()(**kwargs)
    return Exporter(periodic_reader(exporter, export_interval_s, _reader_class()))


@hookimpl
def register_exporters(register: Callable[[str, Callable[..., Exporter]], None]) -> None:
    register("otlp", make_exporter)
