"""Exporters: where OpenTelemetry points go, offered by plugins like everything else.

A plugin's ``register_exporters`` hook calls ``register(name, factory)``;
``rlmetrics.start(exporters=[name])`` calls ``factory(export_interval_s=..., **options)`` and
attaches the :class:`Exporter` it returns to the process's one MeterProvider. The core's own
``otlp``, ``prometheus`` and ``console`` exporters are entry points of the core distribution,
loaded, listed and deniable like any third-party one.

A factory imports the OpenTelemetry SDK (and its exporter package) when called, never at
module level: plugin modules are imported by every process that uses rlmetrics.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from ..hooks import collect_offers
from ..plugins import Plugins, get_plugins

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader

__all__ = ["Exporter", "ExporterFactory", "ForkSafe", "available_exporters", "periodic_reader"]


def _nothing() -> None:
    return None


@attrs.define
class Exporter:
    """What an exporter factory returns.

    :param reader: the ``MetricReader`` to attach (a ``PeriodicExportingMetricReader`` around a
        push exporter, or a pull reader such as Prometheus').
    :param address: ``(host, port)`` a pull exporter listens on, for ``Telemetry`` to report.
    :param close: releases what the reader does not (an HTTP server); called once, after the
        provider shut down, or when ``start()`` fails after this exporter was built.
    """

    reader: MetricReader
    address: tuple[str, int] | None = None
    close: Callable[[], None] = _nothing


ExporterFactory = Callable[..., Exporter]


class ForkSafe:
    """Mixin for a push ``MetricExporter``: in a process forked after it was built, every
    export is dropped (and reported done), so a child never sends the parent's values under
    the parent's identity. The SDK restarts a periodic reader's thread in a forked child; this
    is what keeps that thread quiet until the child starts telemetry of its own.

    ``class MyExporter(ForkSafe, MetricExporter): ...`` (the mixin first).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rlmetrics_pid = os.getpid()

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
        if os.getpid() != self._rlmetrics_pid:
            from opentelemetry.sdk.metrics.export import MetricExportResult

            return MetricExportResult.SUCCESS
        return super().export(metrics_data, timeout_millis=timeout_millis, **kwargs)  # type: ignore[misc]


def available_exporters(plugins: Plugins | None = None) -> dict[str, tuple[str, ExporterFactory]]:
    """``{name: (offering plugin, factory)}`` from every plugin's ``register_exporters``."""
    return collect_offers("exporter", (plugins or get_plugins()).hooks.register_exporters)


def periodic_reader(
    exporter: Any, export_interval_s: float | None, reader_class: type | None = None
) -> MetricReader:
    """``exporter`` (a push ``MetricExporter``) on a ``PeriodicExportingMetricReader`` (or
    ``reader_class``) exporting every ``export_interval_s`` seconds; None means
    ``OTEL_METRIC_EXPORT_INTERVAL``, else the SDK's 60 s."""
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    interval_ms = None if export_interval_s is None else export_interval_s * 1000.0
    reader: MetricReader = (reader_class or PeriodicExportingMetricReader)(
        exporter, export_interval_millis=interval_ms
    )
    return reader
