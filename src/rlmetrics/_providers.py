"""The module that builds the MeterProvider: the core's one import of the OpenTelemetry SDK.

``import rlmetrics`` stays light (no SDK, no gRPC, no prometheus_client); ``rlmetrics.start()``
imports this module, which builds every configured exporter and one MeterProvider with all
readers side by side. If anything fails on the way, what was already built is stopped and
released before the error reaches the caller: no reader thread, server or socket is left.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import (
    ExemplarReservoir,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
)
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.metrics.view import View
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.util.types import Attributes

from ._warn import warn_once
from .exporters import Exporter

__all__ = ["RUN_ID_ATTR", "Built", "build_provider", "resource_attributes"]

RUN_ID_ATTR = "rlmetrics.run.id"


@attrs.define
class Built:
    """The provider and the exporters built for it, by name."""

    provider: MeterProvider
    exporters: dict[str, Exporter] = attrs.Factory(dict)

    def close_exporters(self) -> None:
        _close(self.exporters)


def _close(exporters: Mapping[str, Exporter]) -> None:
    for name, exporter in exporters.items():
        try:
            exporter.close()
        except Exception:
            warn_once(f"exporter:{name}:close", f"rlmetrics: exporter {name!r} failed to close")


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
    attributes: dict[str, Any] = {
        "service.name": "rlmetrics",
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
    for every measurement to be an exemplar (``OTEL_METRICS_EXEMPLAR_FILTER=always_on``)."""
    if os.environ.get("OTEL_METRICS_EXEMPLAR_FILTER") == "always_on":  # as the SDK reads it
        return []
    return [
        View(instrument_type=kind, exemplar_reservoir_factory=_no_exemplars)
        for kind in (ObservableGauge, ObservableCounter, ObservableUpDownCounter)
    ]


def _no_exemplars(_aggregation: type[Any]) -> Callable[..., ExemplarReservoir]:
    return _NoExemplars


def build_provider(
    resource: Mapping[str, Any],
    exporters: Mapping[str, tuple[Callable[..., Exporter], Mapping[str, Any]]],
    readers: Sequence[MetricReader],
    export_interval_s: float | None,
) -> Built:
    """Build each exporter (``name: (factory, options)``) and one provider over all readers."""
    built: dict[str, Exporter] = {}
    try:
        for name, (factory, options) in exporters.items():
            exporter = factory(export_interval_s=export_interval_s, **options)
            if not isinstance(exporter, Exporter):
                raise TypeError(
                    f"exporter {name!r}: its factory returned a {type(exporter).__name__}, "
                    "not an rlmetrics.exporters.Exporter"
                )
            built[name] = exporter
        # shutdown_on_exit=False: the SDK's atexit shutdown is unbounded with a dead
        # collector; rlmetrics registers its own, bounded one.
        provider = MeterProvider(
            metric_readers=[*(e.reader for e in built.values()), *readers],
            resource=Resource.create(dict(resource)),
            views=_views(),
            shutdown_on_exit=False,
        )
    except BaseException:
        _abandon(built)
        raise
    return Built(provider, built)


def _abandon(built: Mapping[str, Exporter]) -> None:
    """Stop the readers of exporters built for a start that failed, then release them."""
    for name, exporter in built.items():
        try:
            exporter.reader.shutdown(timeout_millis=1000)
        except Exception:
            warn_once(f"exporter:{name}:abandon", f"rlmetrics: exporter {name!r} did not stop")
    _close(built)
