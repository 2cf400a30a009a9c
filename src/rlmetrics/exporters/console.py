"""The ``console`` exporter: each metrics export printed to stdout as JSON, and each finished
span as one compact JSON line, for a quick look."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import hookimpl
from . import Exporter, ForkSafe, ForkSafeSpans, batch_span_processor, periodic_reader

__all__ = ["make_exporter"]


def _one_line(span: Any) -> str:
    return str(span.to_json(indent=None)) + "\n"


def make_exporter(export_interval_s: float | None = None) -> Exporter:
    """The SDK's ``ConsoleMetricExporter`` on a periodic reader and ``ConsoleSpanExporter``
    (one line per span) behind a batch processor; both quiet in a forked child."""
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    class ForkSafeConsoleExporter(ForkSafe, ConsoleMetricExporter):
        pass

    class ForkSafeConsoleSpanExporter(ForkSafeSpans, ConsoleSpanExporter):
        pass

    return Exporter(
        periodic_reader(ForkSafeConsoleExporter(), export_interval_s),
        span_processor=batch_span_processor(
            ForkSafeConsoleSpanExporter(formatter=_one_line), export_interval_s
        ),
    )


@hookimpl
def register_exporters(register: Callable[[str, Callable[..., Exporter]], None]) -> None:
    register("console", make_exporter)
