"""The ``console`` exporter: each metrics export printed to stdout as JSON, and each finished
span as one compact JSON line, for a quick look.

A stdout that cannot be written (a script piped into ``head``, a closed terminal) fails every
export; that is said once, and each failed export is dropped: the SDK would log an ERROR line
and a traceback at every export for the rest of the run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import hookimpl
from .._warn import warn_once
from . import Exporter, ForkSafe, ForkSafeSpans, batch_span_processor, periodic_reader

__all__ = ["make_exporter"]


def _one_line(span: Any) -> str:
    return str(span.to_json(indent=None)) + "\n"


def _printing_failed(what: str, error: Exception) -> None:
    # A stdout that is gone (a broken pipe, a closed file) is a condition, not a bug: one
    # line; anything else carries its traceback.
    gone = isinstance(error, OSError) or "closed file" in str(error)
    warn_once(
        f"console:{what}:{type(error).__name__}",
        f"rlmetrics: the console exporter could not print {what} to stdout "
        f"({type(error).__name__}: {error}); they are dropped and training goes on",
        expected=gone,
    )


def make_exporter(export_interval_s: float | None = None) -> Exporter:
    """The SDK's ``ConsoleMetricExporter`` on a periodic reader and ``ConsoleSpanExporter``
    (one line per span) behind a batch processor; both quiet in a forked child, and a
    failure to print said once."""
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, MetricExportResult
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SpanExportResult

    class ForkSafeConsoleExporter(ForkSafe, ConsoleMetricExporter):
        def export(self, metrics_data: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().export(metrics_data, *args, **kwargs)
            except Exception as error:
                _printing_failed("metrics", error)
                return MetricExportResult.FAILURE

    class ForkSafeConsoleSpanExporter(ForkSafeSpans, ConsoleSpanExporter):
        def export(self, spans: Any) -> Any:
            try:
                return super().export(spans)
            except Exception as error:
                _printing_failed("spans", error)
                return SpanExportResult.FAILURE

    return Exporter(
        periodic_reader(ForkSafeConsoleExporter(), export_interval_s),
        span_processor=batch_span_processor(
            ForkSafeConsoleSpanExporter(formatter=_one_line), export_interval_s
        ),
    )


@hookimpl
def register_exporters(register: Callable[[str, Callable[..., Exporter]], None]) -> None:
    register("console", make_exporter)
