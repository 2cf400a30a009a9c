"""The module that builds the providers: the core's one import of the OpenTelemetry SDK.

``import rlmetrics`` stays light (no SDK, no gRPC, no prometheus_client); ``rlmetrics.start()``
imports this module, which builds every configured exporter, one MeterProvider with all
readers side by side and, beside it on the same Resource, one TracerProvider with every span
processor. If anything fails on the way, what was already built is stopped and released
before the error reaches the caller: no reader thread, server or socket is left.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import random
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from time import time_ns
from typing import TYPE_CHECKING, Any

import attrs
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import (
    Counter,
    Exemplar,
    ExemplarReservoir,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import (
    Gauge,
    Metric,
    MetricReader,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.metrics.view import View
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.util.types import Attributes

from ._fork import forget_in_child
from ._warn import describe_value, warn_once
from .configuration import (
    NON_NEGATIVE_INTEGER,
    ConfigurationError,
    check_variable,
    is_attribute_value,
)
from .exporters import Exporter
from .identity import RUN_ID_ATTR, new_run_id
from .storable import utf8_text

if TYPE_CHECKING:
    from .last_value import LastValue
    from .spec import MetricSpec

#: What a session's gauges hand each collection: every gauge with points, and its points.
GaugePoints = Callable[[], "list[tuple[MetricSpec, list[LastValue]]]"]

__all__ = [
    "EXEMPLAR_FILTERS",
    "RUN_ID_ATTR",
    "SAMPLERS",
    "TRACES_EXPORTER_ENV",
    "Built",
    "build_provider",
    "check_sdk_variables",
    "resource_attributes",
    "sdk_disabled",
    "traces_wanted",
]

#: The standard variable naming the span exporter; ``none`` turns span export off.
TRACES_EXPORTER_ENV = "OTEL_TRACES_EXPORTER"

#: The SDK's own limit on attribute sets a stream, where it has one: never reached, since the
#: registry enforces each series' declared cap (and overflow) the same way on every SDK.
_NO_SDK_LIMIT = sys.maxsize


@attrs.define
class Built:
    """The providers and the exporters built for them, by name.

    ``metric_readers`` counts the MeterProvider's readers (none: nothing is exported, so the
    registry is not bound); ``tracer_provider`` is None when no span processor was asked for.
    """

    provider: MeterProvider
    exporters: dict[str, Exporter] = attrs.Factory(dict)
    tracer_provider: TracerProvider | None = None
    metric_readers: int = 0
    gauges: _GaugeProducer | None = None

    def export_gauges(self, points: GaugePoints, scope_name: str, scope_version: str) -> None:
        """From now on every collection of every reader adds ``points`` (a session's gauges),
        in the scope of the meter ``scope_name``/``scope_version`` (:class:`_GaugeProducer`)."""
        if self.gauges is not None:
            self.gauges.read(points, InstrumentationScope(scope_name, scope_version))

    def providers(self) -> list[MeterProvider | TracerProvider]:
        return [p for p in (self.tracer_provider, self.provider) if p is not None]

    def shutdown_actions(self, timeout_ms: int) -> list[Callable[[], Any]]:
        """One shutdown per provider, to run side by side (the TracerProvider's takes no
        deadline: its batch processor's last export is bounded by its exporter's timeout)."""
        meter = self.provider
        actions: list[Callable[[], Any]] = [lambda: meter.shutdown(timeout_ms)]
        tracer = self.tracer_provider
        if tracer is not None:
            actions.append(tracer.shutdown)
        return actions

    def close_exporters(self) -> None:
        _close(self.exporters)

    def end_run(self) -> None:
        """Tell each exporter the run ended cleanly (:attr:`Exporter.end_run`), one after
        another: each bounds its own wait."""
        for name, exporter in self.exporters.items():
            try:
                exporter.end_run()
            except Exception:
                warn_once(f"exporter:{name}:end_run", f"rlmetrics: exporter {name!r} failed to end")


#: The span limits the SDK reads from the environment (integers of 0 or more).
_SPAN_LIMIT_VARIABLES = (
    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_SPAN_EVENT_COUNT_LIMIT",
    "OTEL_SPAN_LINK_COUNT_LIMIT",
    "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT",
    "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT",
)

#: What ``OTEL_METRICS_EXEMPLAR_FILTER`` takes, spelt exactly so (the SDK compares as is).
EXEMPLAR_FILTERS = ("always_on", "always_off", "trace_based")


def _check_exemplar_filter() -> None:
    """Refuse, naming the variable and the choices, an exemplar filter the SDK would refuse
    with a bare ``ValueError`` out of ``start()``."""
    value = os.environ.get("OTEL_METRICS_EXEMPLAR_FILTER")
    if value is not None and value not in EXEMPLAR_FILTERS:
        raise ConfigurationError(
            f"OTEL_METRICS_EXEMPLAR_FILTER={value!r} is none of the exemplar filters: "
            f"{', '.join(map(repr, EXEMPLAR_FILTERS))} (unset, trace_based)"
        )


#: The samplers ``OTEL_TRACES_SAMPLER`` names for a TracerProvider (the SDK lowercases it).
SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)


def _check_sampler() -> None:
    """Refuse, naming the variable, a sampler the SDK would replace with its default after a
    line of its own, and a ratio it would raise a bare ``ValueError`` for out of ``start()``
    (2, -0.1) or replace with 1.0 ("half")."""
    sampler = os.environ.get("OTEL_TRACES_SAMPLER", "").strip()
    if not sampler:
        return
    if sampler.lower() not in SAMPLERS:
        raise ConfigurationError(
            f"OTEL_TRACES_SAMPLER={sampler!r} is none of the samplers: "
            f"{', '.join(SAMPLERS)} (unset: parentbased_always_on)"
        )
    argument = os.environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    if not argument or not sampler.lower().endswith("traceidratio"):
        return  # no ratio to check (a ratio sampler without one samples every trace)
    try:
        ratio = float(argument)
    except ValueError:
        ratio = math.nan
    if not 0.0 <= ratio <= 1.0:  # False for NaN too
        raise ConfigurationError(
            f"OTEL_TRACES_SAMPLER_ARG={argument!r} must be a ratio from 0 to 1 (the share of "
            f"traces {sampler.lower()} samples); unset it to sample every trace"
        )


def _check_span_limits() -> None:
    """Refuse, naming it, a span limit variable (read by the TracerProvider's SpanLimits)
    that is no count."""
    for limit in _SPAN_LIMIT_VARIABLES:
        check_variable(limit, NON_NEGATIVE_INTEGER, int)


def check_sdk_variables() -> None:
    """Every OpenTelemetry SDK variable ``start()`` checks where it reads it, checked at once
    whatever the exporters will be: what ``rlmetrics config`` runs before a job. The
    compression is checked against what either OTLP transport takes (gRPC's one choice is
    checked again at ``start()``, where the transport is known)."""
    from .exporters import check_processor_variables, check_reader_variables
    from .exporters.otlp import (
        HTTP_COMPRESSIONS,
        check_compression,
        check_headers,
        check_insecure,
        check_metric_preferences,
        check_tls_files,
        otlp_timeout_s,
    )
    from .exporters.otlp_http import HTTP_PROTOBUF, check_endpoint, chosen_protocol

    _check_exemplar_filter()
    _check_span_limits()
    _check_sampler()
    _check_resource_variable()
    check_reader_variables()
    check_processor_variables()
    check_metric_preferences()
    over_http = chosen_protocol() == HTTP_PROTOBUF  # an unknown protocol raises, naming it
    for signal in ("metrics", "traces"):
        check_tls_files(signal)
        check_compression(signal, HTTP_COMPRESSIONS)
        check_headers(signal)
        check_insecure(signal)
        otlp_timeout_s(signal)  # raises for a timeout variable that is no positive number
        if over_http:
            check_endpoint(None, signal)


def sdk_disabled() -> bool:
    """Whether ``OTEL_SDK_DISABLED`` turns the SDK off, read as the SDK reads it."""
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


class _GaugeProducer:
    """rlmetrics' gauges as the metric data of every collection, beside what the SDK collected.

    A gauge keeps its last value per attribute set in rlmetrics (``instruments``; neither
    SDK's synchronous gauge can retract an attribute set). Exported through an observable
    gauge, each of its points cost the SDK a measurement, an exemplar check and an aggregation
    at every collection: 1.8x (SDK 1.44) to 2.5x (1.45) the collection of the same points set
    on synchronous gauges, the most of a collection's cost. The OpenTelemetry specification
    lets a MetricReader take metric producers, whose data every collection adds; the Python
    SDK has no parameter for them, so each reader's collect callback (set by its MeterProvider,
    called by every ``collect``: a periodic export, a Prometheus scrape, an in-memory read)
    is wrapped once here to add the gauges' points, made as the SDK makes a gauge's: no start
    time, the collection's time, and an exemplar only under the ``always_on`` filter (as an
    observable gauge kept one): the value at the collection's time, with no span, where the
    observable's named whatever span the collecting thread was in, never the one the value was
    recorded in.
    """

    def __init__(self, resource: Resource) -> None:
        # What to read and the scope to export it in, replaced whole (a collection may run
        # on the exporter's thread meanwhile); no session yet, no gauges.
        self._source: tuple[GaugePoints, InstrumentationScope] = (
            list,
            InstrumentationScope("rlmetrics"),
        )
        self._resource = resource
        # As the SDK and _views read it.
        self._exemplars = os.environ.get("OTEL_METRICS_EXEMPLAR_FILTER") == "always_on"

    def read(self, points: GaugePoints, scope: InstrumentationScope) -> None:
        self._source = (points, scope)

    def install(self, reader: MetricReader) -> None:
        collect = getattr(reader, "_collect", None)
        if not callable(collect):
            raise RuntimeError(
                f"rlmetrics: {type(reader).__name__} has no collect callback (its MeterProvider "
                "sets MetricReader._collect in opentelemetry-sdk 1.44 and 1.45), so rlmetrics' "
                "gauges cannot be exported through it; install an opentelemetry-sdk this "
                "rlmetrics supports"
            )

        def collect_with_gauges(metric_reader: MetricReader, timeout_millis: float = 10_000) -> Any:
            # The gauges first: what a family's callback records meanwhile is collected too.
            points, scope = self._source
            gauges = self._metrics(points)
            data = collect(metric_reader, timeout_millis=timeout_millis)
            return self._merged(data, gauges, scope)

        reader._collect = collect_with_gauges  # type: ignore[attr-defined]

    def _metrics(self, points: GaugePoints) -> list[Metric]:
        try:
            found = points()
        except Exception:  # never into the exporter's thread; this collection lacks them
            warn_once("gauges:collect", "rlmetrics: the gauges could not be read for a collection")
            return []
        now, exemplars = time_ns(), self._exemplars
        return [
            Metric(
                name=spec.name,
                description=spec.description,
                unit=spec.unit,
                data=Gauge(
                    data_points=[
                        NumberDataPoint(
                            attributes=last.attributes or {},
                            start_time_unix_nano=None,  # type: ignore[arg-type]
                            time_unix_nano=now,
                            value=(value := last.current),
                            exemplars=[Exemplar({}, value, now)] if exemplars else [],
                        )
                        for last in values
                    ]
                ),
            )
            for spec, values in found
        ]

    def _merged(
        self, data: MetricsData | None, gauges: list[Metric], scope: InstrumentationScope
    ) -> MetricsData | None:
        """``data`` with ``gauges`` in ``scope`` of its resource's metrics."""
        if not gauges:
            return data
        if data is None or not data.resource_metrics:
            return MetricsData(
                resource_metrics=[
                    ResourceMetrics(
                        resource=self._resource,
                        scope_metrics=[ScopeMetrics(scope, gauges, scope.schema_url or "")],
                        schema_url=self._resource.schema_url,
                    )
                ]
            )
        # One ResourceMetrics: the provider's resource.
        first, *others = data.resource_metrics
        scopes = list(first.scope_metrics)
        for index, scope_metrics in enumerate(scopes):
            if scope_metrics.scope == scope:
                scopes[index] = replace(scope_metrics, metrics=[*scope_metrics.metrics, *gauges])
                break
        else:
            scopes.append(ScopeMetrics(scope, gauges, scope.schema_url or ""))
        return replace(data, resource_metrics=[replace(first, scope_metrics=scopes), *others])


def _close(exporters: Mapping[str, Exporter]) -> None:
    for name, exporter in exporters.items():
        try:
            exporter.close()
        except Exception:
            warn_once(f"exporter:{name}:close", f"rlmetrics: exporter {name!r} failed to close")


class _EmptyResourceItem(logging.Filter):
    """Drops the SDK's 'Invalid key value resource attribute pair' line for an empty item of
    ``OTEL_RESOURCE_ATTRIBUTES`` (a trailing or doubled comma): the detector skips it, so it
    loses nothing, and the line came twice per start (rlmetrics reads the variable, then
    ``Resource.create`` reads it again). An item with no ``=`` is refused before
    (:func:`_check_resource_variable`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        pair = record.args[0] if isinstance(record.args, tuple) and record.args else None
        return not (
            str(record.msg).startswith("Invalid key value resource attribute pair")
            and isinstance(pair, str)
            and not pair.strip()
        )


logging.getLogger("opentelemetry.sdk.resources").addFilter(_EmptyResourceItem())


def _check_resource_variable() -> None:
    """Refuse, naming it, an ``OTEL_RESOURCE_ATTRIBUTES`` item with no ``=``: the SDK drops it
    with a line of its own (said once per resource made, three times a start), and every
    point of the run lacks the attribute meant (``rl.algorithm=grpo,rl.system``). An empty
    item (a trailing comma) means nothing: the SDK skips it, and its line is not shown."""
    text = os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    for item in text.split(","):  # as the SDK's OTELResourceDetector splits it
        if item.strip() and "=" not in item:
            raise ConfigurationError(
                f"OTEL_RESOURCE_ATTRIBUTES holds {item.strip()!r}, which is no key=value pair "
                "(the OpenTelemetry SDK would drop it): write each attribute as key=value, "
                "separated by commas, and URL-encode a comma in a value (%2C)"
            )


def resource_attributes(
    service_name: str | None,
    service_version: str | None,
    run_id: str | None,
    caller: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Resource attributes, later sources winning: defaults, environment, caller, arguments.

    The environment is ``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME``; the run id falls
    back to ``SLURM_JOB_ID``, then to a generated id, so every point of a run can be isolated.
    ``service.version`` is the user's service's version: set only when given (rlmetrics' own
    version is the instrumentation scope's).
    """
    attributes: dict[str, Any] = {"service.name": "rlmetrics", RUN_ID_ATTR: None}
    _check_resource_variable()
    attributes.update(OTELResourceDetector().detect().attributes)
    attributes.update(caller or {})
    explicit = {
        "service.name": service_name,
        "service.version": service_version,
        RUN_ID_ATTR: run_id,
    }
    attributes.update({k: v for k, v in explicit.items() if v is not None})
    if run_id is None and RUN_ID_ATTR not in (caller or {}):
        # The launcher's (the variable's own, which the detector took: an empty one is
        # refused, naming the variable), else a new one. Asked only when no id is given.
        attributes[RUN_ID_ATTR] = new_run_id()
    if isinstance(attributes[RUN_ID_ATTR], str) and not attributes[RUN_ID_ATTR].strip():
        raise ConfigurationError(
            f"resource attribute {RUN_ID_ATTR!r} is {attributes[RUN_ID_ATTR]!r}: a run id is "
            "a non-empty string; give the run's id, or leave the attribute out"
        )
    for key, value in attributes.items():
        if not is_attribute_value(value):
            # The SDK keeps None (an empty value on every OTLP export) and makes an object
            # None: the run's series without the attribute a dashboard selects them by.
            what = "None" if value is None else describe_value(value)
            raise ConfigurationError(
                f"resource attribute {key!r} is {what}: give text, a bool, a number or a list "
                "of one of those, or leave it out"
            )
        if isinstance(value, str) and utf8_text(value)[1]:
            # Decoded with surrogateescape (a variable or file name that is no UTF-8): no
            # exporter can encode it, and every scrape of the Prometheus endpoint would fail.
            raise ConfigurationError(
                f"resource attribute {key!r} is no UTF-8 text: {value!r}; give it as text"
            )
    return attributes


class _NoExemplars(ExemplarReservoir):
    """The exemplar reservoir of an observable instrument: one that never holds anything.

    An exemplar ties a measurement to the trace it was made in, and the default filter
    (``trace_based``) admits only measurements made inside a sampled span. An observable's
    measurements are made by its callback on the reader's thread, where no span is active, so
    its default reservoir stays empty while every point still pays for emptying it at each
    collection; this one costs nothing.
    """

    def offer(
        self, value: int | float, time_unix_nano: int, attributes: Attributes, context: Context
    ) -> None:
        return None

    def collect(self, point_attributes: Attributes) -> list[Any]:
        return []


def _views() -> list[View]:
    """:class:`_NoExemplars` for every observable instrument, unless the environment asks
    for every measurement to be an exemplar (``OTEL_METRICS_EXEMPLAR_FILTER=always_on``);
    and, on an SDK with a cardinality limit of its own (1.45.2: 2000 attribute sets a stream),
    a limit no declared series reaches: the registry caps each series at its ``max_series``
    and records the rest under ``otel.metric.overflow=true`` itself, so every SDK exports the
    same points (1.44 and 1.45.1 have no limit)."""
    reservoir: dict[str, Any] = {}
    if os.environ.get("OTEL_METRICS_EXEMPLAR_FILTER") != "always_on":  # as the SDK reads it
        reservoir["exemplar_reservoir_factory"] = _no_exemplars
    limit: dict[str, Any] = {}
    if "aggregation_cardinality_limit" in inspect.signature(View).parameters:
        limit["aggregation_cardinality_limit"] = _NO_SDK_LIMIT
    views = [
        View(instrument_type=kind, **reservoir, **limit)
        for kind in (ObservableGauge, ObservableCounter, ObservableUpDownCounter)
        if reservoir or limit
    ]
    if limit:
        views += [
            View(instrument_type=kind, **limit) for kind in (Counter, UpDownCounter, Histogram)
        ]
    return views


def _no_exemplars(_aggregation: type[Any]) -> Callable[..., ExemplarReservoir]:
    return _NoExemplars


class _IdGenerator(IdGenerator):
    """Span and trace ids from a generator of rlmetrics' own, seeded from the OS.

    The SDK's default draws from the ``random`` module, which training code seeds for
    reproducibility: every data-parallel rank seeded alike draws the same ids, and their spans
    collide. A private generator, reseeded in a forked child, is immune to that.
    """

    def __init__(self) -> None:
        self._random = random.Random(os.urandom(16))
        forget_in_child(self)

    def _after_fork_in_child(self) -> None:
        self._random = random.Random(os.urandom(16))

    def generate_span_id(self) -> int:
        span_id = 0
        while not span_id:
            span_id = self._random.getrandbits(64)
        return span_id

    def generate_trace_id(self) -> int:
        trace_id = 0
        while not trace_id:
            trace_id = self._random.getrandbits(128)
        return trace_id

    def is_trace_id_random(self) -> bool:
        return True


def traces_wanted(traces: bool) -> bool:
    """Whether spans are exported: ``start(traces=...)``, unless ``OTEL_TRACES_EXPORTER=none``."""
    return traces and os.environ.get(TRACES_EXPORTER_ENV, "").strip().lower() != "none"


#: The SDK's metric-reader logger. A periodic reader whose first interval ends before the
#: MeterProvider that registers it exists (a slow start on a loaded machine) warns "Cannot call
#: collect on a MetricReader until it is registered on a MeterProvider": harmless while
#: :func:`build_provider` is building that provider, so said at DEBUG then.
_READER_LOGGER = "opentelemetry.sdk.metrics._internal.export"
_UNREGISTERED = "Cannot call collect on a MetricReader until it is registered"
#: Set while a provider is being built (the reader's thread logs, not the building one).
_building = threading.Event()


class _UnregisteredWhileBuilding(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if _building.is_set() and record.getMessage().startswith(_UNREGISTERED):
            logging.getLogger("rlmetrics.providers").debug(
                "%s (the provider that registers it is being built)", record.getMessage()
            )
            return False
        return True


logging.getLogger(_READER_LOGGER).addFilter(_UnregisteredWhileBuilding())


def _takes_interval(factory: Callable[..., Any]) -> bool:
    """Whether ``factory`` accepts ``export_interval_s`` (named, or through ``**options``);
    True when its signature cannot be read."""
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(
        p.kind is inspect.Parameter.VAR_KEYWORD
        or (p.name == "export_interval_s" and p.kind is not inspect.Parameter.POSITIONAL_ONLY)
        for p in parameters
    )


def build_provider(
    resource: Mapping[str, Any],
    exporters: Mapping[str, tuple[Callable[..., Exporter], Mapping[str, Any]]],
    readers: Sequence[MetricReader],
    export_interval_s: float | None,
    span_processors: Sequence[SpanProcessor] = (),
    traces: bool = True,
) -> Built:
    """Build each exporter (``name: (factory, options)``), one MeterProvider over all metric
    readers and, when any exporter offers a span processor (or ``span_processors`` are given)
    and ``traces`` is true, one TracerProvider over them, on the same Resource."""
    built: dict[str, Exporter] = {}
    _building.set()
    try:
        for name, (factory, options) in exporters.items():
            if not _takes_interval(factory):
                raise TypeError(
                    f"exporter {name!r}: its factory "
                    f"{getattr(factory, '__qualname__', repr(factory))} takes no "
                    "export_interval_s; rlmetrics calls factory(export_interval_s=..., "
                    "**options): add the parameter (None: the reader's default)"
                )
            try:
                exporter = factory(export_interval_s=export_interval_s, **options)
            except Exception as exc:
                # Raised as it is (its type is what callers catch), saying whose it is.
                if hasattr(exc, "add_note"):  # Python 3.11+
                    exc.add_note(f"rlmetrics: raised by the factory of exporter {name!r}")
                raise
            if not isinstance(exporter, Exporter):
                raise TypeError(f"exporter {name!r}: {_not_an_exporter(exporter)}")
            built[name] = exporter
        if not traces:
            _drop_span_processors(built)
        metric_readers = [*(e.reader for e in built.values() if e.reader is not None), *readers]
        processors = [
            *(e.span_processor for e in built.values() if e.span_processor is not None),
            *(span_processors if traces else ()),
        ]
        _check_exemplar_filter()
        shared = Resource.create(dict(resource))
        # shutdown_on_exit=False: the SDK's atexit shutdown is unbounded with a dead
        # collector; rlmetrics registers its own, bounded one.
        provider = MeterProvider(
            metric_readers=metric_readers,
            resource=shared,
            views=_views(),
            shutdown_on_exit=False,
        )
        tracer_provider = None
        if processors:
            _check_span_limits()
            _check_sampler()
            tracer_provider = TracerProvider(
                resource=shared, id_generator=_IdGenerator(), shutdown_on_exit=False
            )
            for processor in processors:
                tracer_provider.add_span_processor(processor)
        gauges = _GaugeProducer(shared)
        if sdk_disabled():
            # The SDK's meters and tracers are no-ops now; rlmetrics' gauges, which it adds
            # to each collection itself, must be too, or they alone would be exported.
            warn_once(
                "otel:sdk-disabled",
                "rlmetrics: OTEL_SDK_DISABLED=true: OpenTelemetry is off, so telemetry "
                "exports nothing (no point, no span); the trackers still get every row",
                expected=True,
            )
        else:
            for reader in metric_readers:
                gauges.install(reader)
    except BaseException:
        _abandon(built)
        raise
    finally:
        _building.clear()
    return Built(provider, built, tracer_provider, len(metric_readers), gauges)


def _drop_span_processors(built: Mapping[str, Exporter]) -> None:
    """Traces are off: stop and forget the span processors the exporters built."""
    for name, exporter in built.items():
        processor, exporter.span_processor = exporter.span_processor, None
        if processor is not None:
            try:
                processor.shutdown()
            except Exception:
                warn_once(
                    f"exporter:{name}:spans",
                    f"rlmetrics: exporter {name!r}'s span processor did not stop",
                )


def _abandon(built: Mapping[str, Exporter]) -> None:
    """Stop the readers and span processors of exporters built for a start that failed, then
    release them."""
    for name, exporter in built.items():
        try:
            if exporter.reader is not None:
                exporter.reader.shutdown(timeout_millis=1000)
            if exporter.span_processor is not None:
                exporter.span_processor.shutdown()
        except Exception:
            warn_once(f"exporter:{name}:abandon", f"rlmetrics: exporter {name!r} did not stop")
    _close(built)


def _not_an_exporter(built: object) -> str:
    """What an exporter factory returned instead of an ``Exporter``, and how to wrap it."""
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import SpanProcessor

    if built is None:
        return "its factory returned None, not an rlmetrics.exporters.Exporter"
    kind = type(built).__name__
    shown = f"{'an' if kind[:1] in 'AEIOU' else 'a'} {kind}"
    wrap = ""
    if isinstance(built, MetricReader):
        wrap = ": return Exporter(reader) (rlmetrics.exporters.Exporter)"
    elif isinstance(built, SpanProcessor):
        wrap = ": return Exporter(span_processor=processor) (rlmetrics.exporters.Exporter)"
    return f"its factory returned {shown}, not an rlmetrics.exporters.Exporter{wrap}"
