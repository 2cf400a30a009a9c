"""The ``acme_lines`` exporter: each exported point as one line of text, for debugging.

The SDK is imported inside the factory: plugin modules are imported by every process that
uses rlmetrics, telemetry or not.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

import rlmetrics
from rlmetrics.exporters import Exporter, periodic_reader

__all__ = ["make_exporter"]


def _lines(metrics_data: Any) -> list[str]:
    lines = []
    for resource_metrics in metrics_data.resource_metrics:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    labels = ",".join(f"{k}={v}" for k, v in sorted(point.attributes.items()))
                    value = getattr(point, "value", None)
                    if value is None:  # a histogram: its count and sum
                        value = f"count={point.count} sum={point.sum}"
                    lines.append(f"{metric.name}{{{labels}}} {value}\n")
    return lines


def make_exporter(export_interval_s: float | None = None, path: str | None = None) -> Exporter:
    """Write every export to ``path`` (stderr when None)."""
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    class LineExporter(MetricExporter):
        def __init__(self, stream: TextIO) -> None:
            super().__init__()
            self._stream = stream

        def export(
            self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any
        ) -> MetricExportResult:
            self._stream.writelines(_lines(metrics_data))
            self._stream.flush()
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            if self._stream is not sys.stderr:
                self._stream.close()

    stream = open(path, "a", encoding="utf-8") if path else sys.stderr  # noqa: SIM115
    return Exporter(periodic_reader(LineExporter(stream), export_interval_s))


@rlmetrics.hookimpl
def register_exporters(register: Callable[[str, Callable[..., Exporter]], None]) -> None:
    register("acme_lines", make_exporter)
