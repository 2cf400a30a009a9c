"""The ``console`` exporter: each export printed to stdout as JSON, for a quick look."""

from __future__ import annotations

from collections.abc import Callable

from .. import hookimpl
from . import Exporter, ForkSafe, periodic_reader

__all__ = ["make_exporter"]


def make_exporter(export_interval_s: float | None = None) -> Exporter:
    """The SDK's ``ConsoleMetricExporter`` on a periodic reader (quiet in a forked child)."""
    from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

    class ForkSafeConsoleExporter(ForkSafe, ConsoleMetricExporter):
        pass

    return Exporter(periodic_reader(ForkSafeConsoleExporter(), export_interval_s))


@hookimpl
def register_exporters(register: Callable[[str, Callable[..., Exporter]], None]) -> None:
    register("console", make_exporter)
