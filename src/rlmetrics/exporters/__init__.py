"""Exporters: where OpenTelemetry points and spans go, offered by plugins like everything else.

A plugin's ``register_exporters`` hook calls ``register(name, factory)``;
``rlmetrics.start(exporters=[name])`` calls ``factory(export_interval_s=..., **options)`` and
attaches the :class:`Exporter` it returns: its metric reader to the process's one
MeterProvider, its span processor to the one TracerProvider beside it. The core's own
``otlp``, ``otlp_file``, ``prometheus`` and ``console`` exporters are entry points of the core
distribution, loaded, listed and deniable like any third-party one.

A factory imports the OpenTelemetry SDK (and its exporter package) when called, never at
module level: plugin modules are imported by every process that uses rlmetrics.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from ..configuration import (
    POSITIVE_INTEGER,
    POSITIVE_NUMBER,
    ConfigurationError,
    check_variable,
)
from ..hooks import collect_offers
from ..plugins import Plugins, get_plugins
from .tally import ExportTally, SpanDrops

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import SpanProcessor

__all__ = [
    "Exporter",
    "ExporterFactory",
    "ForkSafe",
    "ForkSafeSpans",
    "available_exporters",
    "batch_span_processor",
    "check_processor_variables",
    "check_reader_variables",
    "periodic_reader",
    "push_exporter",
    "span_drops",
]


def _nothing() -> None:
    return None


@attrs.define
class Exporter:
    """What an exporter factory returns.

    :param reader: the ``MetricReader`` to attach (a ``PeriodicExportingMetricReader`` around a
        push exporter, or a pull reader such as Prometheus'); None for an exporter of spans
        only.
    :param address: ``(host, port)`` a pull exporter listens on, for ``Telemetry`` to report.
    :param close: releases what the reader does not (an HTTP server); called once, after the
        providers shut down, or when ``start()`` fails after this exporter was built.
    :param span_processor: the ``SpanProcessor`` to attach to the TracerProvider (a
        ``BatchSpanProcessor`` around a push ``SpanExporter``: :func:`batch_span_processor`);
        None for an exporter of metrics only. Dropped (and shut down) when the caller turns
        traces off (``start(traces=False)``, ``OTEL_TRACES_EXPORTER=none``).
    :param end_run: called once when the run ends cleanly, before the providers shut down
        (not when it ends by an exception): a pull exporter publishes the end and waits,
        bounded by an option of its own, for one last scrape to take it.
    """

    reader: MetricReader | None = None
    address: tuple[str, int] | None = None
    close: Callable[[], None] = _nothing
    span_processor: SpanProcessor | None = None
    end_run: Callable[[], None] = _nothing


ExporterFactory = Callable[..., Exporter]


class ForkSafe:
    """Mixin for a push ``MetricExporter``: in a process forked after it was built, every
    export is dropped (and reported done), so a child never sends the parent's values under
    the parent's identity. The SDK restarts a periodic reader's thread in a forked child; this
    is what keeps that thread quiet until the child starts telemetry of its own.

    ``class MyExporter(ForkSafe, MetricExporter): ...`` (the mixin first).

    It also counts its exports and their outcomes in ``rlmetrics_tally``
    (:class:`~rlmetrics.exporters.tally.ExportTally`), which the health path and the
    ``rlmetrics.exporter.exports`` series report.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rlmetrics_pid = os.getpid()
        self.rlmetrics_tally = ExportTally()

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
        if os.getpid() != self._rlmetrics_pid:
            from opentelemetry.sdk.metrics.export import MetricExportResult

            return MetricExportResult.SUCCESS
        try:
            result = super().export(metrics_data, timeout_millis=timeout_millis, **kwargs)  # type: ignore[misc]
        except BaseException:
            self.rlmetrics_tally.add(succeeded=False)
            raise
        self.rlmetrics_tally.add(succeeded=getattr(result, "name", None) == "SUCCESS")
        return result


class ForkSafeSpans:
    """Mixin for a push ``SpanExporter``: what :class:`ForkSafe` is for metrics. The SDK's
    batch span processor restarts its thread in a forked child, which would send the spans
    the parent had queued under the parent's identity; this drops them (reported done).

    ``class MySpanExporter(ForkSafeSpans, SpanExporter): ...`` (the mixin first).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rlmetrics_pid = os.getpid()

    def export(self, spans: Any) -> Any:
        if os.getpid() != self._rlmetrics_pid:
            from opentelemetry.sdk.trace.export import SpanExportResult

            return SpanExportResult.SUCCESS
        return super().export(spans)  # type: ignore[misc]


def available_exporters(plugins: Plugins | None = None) -> dict[str, tuple[str, ExporterFactory]]:
    """``{name: (offering plugin, factory)}`` from every plugin's ``register_exporters``."""
    plugins = plugins or get_plugins()
    return collect_offers("exporter", plugins.hooks.register_exporters, plugins)


def check_reader_variables(interval_given: bool = False) -> None:
    """Refuse, naming it, a ``PeriodicExportingMetricReader`` variable the SDK would take
    with a bare error or replace with its default (the interval only where no interval is
    given, since then it is read)."""
    if not interval_given:
        check_variable("OTEL_METRIC_EXPORT_INTERVAL", POSITIVE_NUMBER, float, "milliseconds")
    check_variable("OTEL_METRIC_EXPORT_TIMEOUT", POSITIVE_NUMBER, float, "milliseconds")


def check_processor_variables(delay_given: bool = False) -> None:
    """The same for a ``BatchSpanProcessor``'s variables."""
    if not delay_given:
        check_variable("OTEL_BSP_SCHEDULE_DELAY", POSITIVE_INTEGER, int, "milliseconds")
    check_variable("OTEL_BSP_EXPORT_TIMEOUT", POSITIVE_INTEGER, int, "milliseconds")
    check_variable("OTEL_BSP_MAX_QUEUE_SIZE", POSITIVE_INTEGER, int)
    check_variable("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", POSITIVE_INTEGER, int)
    queue, batch = _span_queue_and_batch()
    if batch is not None and batch > queue:
        raise ConfigurationError(
            f"{_BATCH}={os.environ[_BATCH].strip()!r} is more spans than the span queue "
            f"holds ({_QUEUE}, {queue}{'' if _set(_QUEUE) else ' unless set'}): "
            "give a batch size of at most the queue's, or a larger queue"
        )


_QUEUE, _BATCH = "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
#: The SDK's batch span processor's defaults for those two.
_SDK_QUEUE, _SDK_BATCH = 2048, 512


def _set(name: str) -> bool:
    return bool(os.environ.get(name, "").strip())


def _span_queue_and_batch() -> tuple[int, int | None]:
    """The span queue's size and the batch size the environment gives (None: not given), as
    the SDK reads them (checked as positive integers before)."""
    queue = int(os.environ[_QUEUE]) if _set(_QUEUE) else _SDK_QUEUE
    return queue, int(os.environ[_BATCH]) if _set(_BATCH) else None


def _span_batch_size() -> dict[str, int]:
    """The batch size a batch span processor is given: none (the SDK reads its variable, or
    takes 512) unless the queue is smaller than that default, whose batches then take the
    queue's size (the SDK raised a bare ValueError for a queue of 100 alone)."""
    queue, batch = _span_queue_and_batch()
    if batch is None and queue < _SDK_BATCH:
        return {"max_export_batch_size": queue}
    return {}


def periodic_reader(
    exporter: Any, export_interval_s: float | None, reader_class: type | None = None
) -> MetricReader:
    """``exporter`` (a push ``MetricExporter``) on a ``PeriodicExportingMetricReader`` (or
    ``reader_class``) exporting every ``export_interval_s`` seconds; None means
    ``OTEL_METRIC_EXPORT_INTERVAL``, else the SDK's 60 s."""
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    check_reader_variables(interval_given=export_interval_s is not None)
    interval_ms = None if export_interval_s is None else export_interval_s * 1000.0
    reader: MetricReader = (reader_class or PeriodicExportingMetricReader)(
        exporter, export_interval_millis=interval_ms
    )
    _pushers[reader] = exporter
    return reader


def batch_span_processor(
    exporter: Any, export_interval_s: float | None, processor_class: type | None = None
) -> SpanProcessor:
    """``exporter`` (a push ``SpanExporter``) behind a ``BatchSpanProcessor`` (or
    ``processor_class``): spans are queued as they end (a full queue drops, never blocks;
    what it drops, and the spans of a failed export, are counted: :func:`span_drops`)
    and exported every ``export_interval_s`` seconds from the processor's own thread; None
    means ``OTEL_BSP_SCHEDULE_DELAY``, else the SDK's 5 s."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    check_processor_variables(delay_given=export_interval_s is not None)
    delay_ms = None if export_interval_s is None else export_interval_s * 1000.0
    processor: SpanProcessor = (processor_class or BatchSpanProcessor)(
        exporter, schedule_delay_millis=delay_ms, **_span_batch_size()
    )
    _count_drops(processor)
    return processor


class _CountingProcessorMetrics:
    """The SDK batch processor's own metrics object (SDK 1.44 and 1.45 keep one on every
    ``BatchProcessor``, and tell it of each span their full queue drops, ``drop_items``),
    which also tells a :class:`SpanDrops`: the one place the SDK accounts for such a drop,
    so every drop is counted exactly once, by the thread whose span ended."""

    def __init__(self, inner: Any, drops: SpanDrops) -> None:
        self._inner = inner
        self._drops = drops

    def drop_items(self, count: int, *args: Any, **kwargs: Any) -> None:
        # 1.45 also drops spans that end after shutdown ("already_shutdown"): the session's
        # end, not a queue that did not keep up.
        reason = args[0] if args else kwargs.get("error_type", "queue_full")
        if reason == "queue_full":
            self._drops.full(count)
        self._inner.drop_items(count, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _counting_export(export: Callable[..., Any], drops: SpanDrops) -> Callable[..., Any]:
    """``export`` (a span exporter's) counting the spans of each export that fails, and
    those a collector took but rejected (the OTLP exporters' ``rlmetrics_rejected``)."""

    def counted(spans: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = export(spans, *args, **kwargs)
        except BaseException:
            drops.failed(len(spans))
            raise
        if getattr(result, "name", None) != "SUCCESS":
            drops.failed(len(spans))
        else:
            rejected = getattr(getattr(export, "__self__", None), "rlmetrics_rejected", 0)
            if isinstance(rejected, int) and rejected > 0:
                drops.failed(min(rejected, len(spans)))
        return result

    return counted


def _count_drops(processor: Any) -> None:
    """Count what ``processor`` loses in a :class:`SpanDrops` (see :func:`span_drops`): what
    its full queue drops, and the spans of its exports that fail. A processor without the
    SDK's batch processor inside counts none."""
    batch: Any = getattr(processor, "_batch_processor", None)
    metrics = getattr(batch, "_metrics", None)
    if metrics is None or not callable(getattr(metrics, "drop_items", None)):
        return
    drops = SpanDrops(queue_size=getattr(batch, "_max_queue_size", 0))
    batch._metrics = _CountingProcessorMetrics(metrics, drops)
    exporter = getattr(batch, "_exporter", None)
    # On the exporter object the processor calls (any class, the file's included); the
    # processor's shutdown, which reads the exporter's own signature, is left as it is. An
    # exporter that takes no attribute says its failures itself.
    with contextlib.suppress(AttributeError):
        exporter.export = _counting_export(exporter.export, drops)  # type: ignore[union-attr]
    processor.rlmetrics_drops = drops


def span_drops(processor: Any) -> SpanDrops | None:
    """What :func:`batch_span_processor`'s ``processor`` lost, to a full queue or a failed
    export; None for any other processor (or none)."""
    drops = getattr(processor, "rlmetrics_drops", None)
    return drops if isinstance(drops, SpanDrops) else None


# Each periodic reader built here and the push exporter it drives, so the health path can
# report an exporter's outcomes without the reader's private attributes.
_pushers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def push_exporter(reader: Any) -> Any | None:
    """The push exporter :func:`periodic_reader` put on ``reader``; None for any other
    reader (a pull reader such as Prometheus', a caller's own) or none at all (an exporter of
    spans only)."""
    return None if reader is None else _pushers.get(reader)
