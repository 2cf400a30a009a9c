"""Spans for tests: started telemetry that also traces into memory, and the finished spans as
plain :class:`SpanRecord` s to assert on."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import attrs

from ..telemetry import Telemetry, start

__all__ = ["SpanRecord", "in_memory_tracing", "span_records"]


@attrs.frozen
class SpanRecord:
    """One finished span: ids as lower-case hex (``parent_id`` None for a root), times in Unix
    ns, the status code's name (``UNSET``, ``OK``, ``ERROR``) and the events' names."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    attributes: dict[str, Any]
    start_ns: int
    end_ns: int
    status: str
    events: tuple[str, ...] = ()
    resource: dict[str, Any] = attrs.field(factory=dict, repr=False)

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def _record(span: Any) -> SpanRecord:
    parent = span.parent
    return SpanRecord(
        name=span.name,
        trace_id=f"{span.context.trace_id:032x}",
        span_id=f"{span.context.span_id:016x}",
        parent_id=None if parent is None else f"{parent.span_id:016x}",
        attributes=dict(span.attributes or {}),
        start_ns=span.start_time,
        end_ns=span.end_time,
        status=span.status.status_code.name,
        events=tuple(event.name for event in span.events),
        resource=dict(span.resource.attributes),
    )


def span_records(exporter: Any) -> list[SpanRecord]:
    """The spans an ``InMemorySpanExporter`` holds, in the order they ended."""
    return [_record(span) for span in exporter.get_finished_spans()]


@contextlib.contextmanager
def in_memory_tracing(**start_kwargs: Any) -> Iterator[tuple[Telemetry, Any, Any]]:
    """Start telemetry with an ``InMemoryMetricReader`` and an ``InMemorySpanExporter`` (behind
    a ``SimpleSpanProcessor``, so a span is there as soon as it ends): ``(handle, reader,
    spans)``; read them with :func:`~rlmetrics.testing.points` and :func:`span_records`."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    reader = InMemoryMetricReader()
    spans = InMemorySpanExporter()
    start_kwargs.setdefault("service_name", "rlmetrics-test")
    handle = start(
        readers=[reader, *start_kwargs.pop("readers", ())],
        span_processors=[SimpleSpanProcessor(spans), *start_kwargs.pop("span_processors", ())],
        **start_kwargs,
    )
    try:
        yield handle, reader, spans
    finally:
        handle.shutdown(timeout_s=5)
