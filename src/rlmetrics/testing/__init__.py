"""Helpers for testing rlmetrics and its plugins against the real SDK.

``in_memory_telemetry()`` starts telemetry with an ``InMemoryMetricReader`` on an isolated
copy of the registry; ``points(reader)`` collects once and flattens what was exported into
plain :class:`Point` records to assert on. :mod:`rlmetrics.testing.peers` holds real peers on
127.0.0.1: a metrics endpoint for a family that scrapes one, a peer that never answers, an OTLP
receiver. :mod:`rlmetrics.testing.logs` tells what rlmetrics said from what the libraries
around it said; :mod:`rlmetrics.testing.unanswered` starts a tracker whose server never
answers. Plugin test suites (and demo parts) use these too.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from .. import _warn, plugins, registry
from .._process_state import reset_process_state, resets_process_state
from ..telemetry import Telemetry, current, start
from ..tracing._state import reset as reset_tracing
from .children import main_thread_blocked_in, run_to_exit
from .logs import CapturedLog, captured_log, own_records
from .peers import (
    BlackHole,
    ExpositionServer,
    OtlpHttpReceiver,
    OtlpPoint,
    OtlpReceiver,
    RefusingServer,
)
from .traces import SpanRecord, in_memory_tracing, span_records

__all__ = [
    "FUZZ_PROFILE_ENV",
    "HYPOTHESIS_PROFILE_ENV",
    "BlackHole",
    "CapturedLog",
    "ExpositionServer",
    "OtlpPoint",
    "OtlpHttpReceiver",
    "OtlpReceiver",
    "Point",
    "RefusingServer",
    "SpanRecord",
    "captured_log",
    "data_points",
    "in_memory_telemetry",
    "in_memory_tracing",
    "isolated_state",
    "load_hypothesis_profile",
    "main_thread_blocked_in",
    "own_records",
    "points",
    "reset_process_state",
    "run_to_exit",
    "single",
    "span_records",
    "wait_until",
]

#: Names the hypothesis profile a test session runs: ``suite`` (the default) or ``fuzz``.
HYPOTHESIS_PROFILE_ENV = "RLMETRICS_HYPOTHESIS_PROFILE"
#: The same variable under its first name.
FUZZ_PROFILE_ENV = HYPOTHESIS_PROFILE_ENV


@attrs.frozen
class Point:
    """One exported data point, with the instrument it belongs to."""

    name: str
    unit: str
    kind: str  # "gauge", "sum" or "histogram"
    monotonic: bool | None
    attributes: dict[str, Any]
    value: float | None = None  # gauge and sum
    count: int | None = None  # histogram
    sum: float | None = None
    bucket_counts: tuple[int, ...] = ()
    bounds: tuple[float, ...] = ()
    resource: dict[str, Any] = attrs.field(factory=dict, repr=False)


def _metrics(data: Any) -> Iterator[tuple[Any, Any]]:
    """Each ``(resource_metrics, metric)`` of a collected ``MetricsData`` (None holds none)."""
    if data is None:
        return
    for resource_metrics in data.resource_metrics:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                yield resource_metrics, metric


def points(reader: Any) -> list[Point]:
    """Collect once from ``reader`` (an InMemoryMetricReader) and flatten the result."""
    out: list[Point] = []
    for resource_metrics, metric in _metrics(reader.get_metrics_data()):
        resource = dict(resource_metrics.resource.attributes)
        kind = type(metric.data).__name__.lower()
        monotonic = getattr(metric.data, "is_monotonic", None)
        for dp in metric.data.data_points:
            common = {
                "name": metric.name,
                "unit": metric.unit,
                "kind": kind,
                "monotonic": monotonic,
                "attributes": dict(dp.attributes or {}),
                "resource": resource,
            }
            if kind == "histogram":
                out.append(
                    Point(
                        count=dp.count,
                        sum=dp.sum,
                        bucket_counts=tuple(dp.bucket_counts),
                        bounds=tuple(dp.explicit_bounds),
                        **common,
                    )
                )
            else:
                out.append(Point(value=dp.value, **common))
    return out


def data_points(data: Any, name: str) -> list[Any]:
    """The SDK's own data points of metric ``name`` in ``data`` (a collected ``MetricsData``),
    for what :class:`Point` leaves out: a histogram's ``max``, a point's exemplars."""
    return [
        point
        for _resource_metrics, metric in _metrics(data)
        if metric.name == name
        for point in metric.data.data_points
    ]


def single(found: list[Point], name: str, **attributes: Any) -> Point:
    """The one point named ``name`` whose attributes include ``attributes``."""
    matches = [
        p
        for p in found
        if p.name == name and all(p.attributes.get(k) == v for k, v in attributes.items())
    ]
    if len(matches) != 1:
        raise AssertionError(f"expected one {name} {attributes}, found {matches}")
    return matches[0]


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy and return that; fail the test
    (``AssertionError`` naming ``what``) after ``timeout_s``. For what no event announces:
    a reader's next collection, a store another thread writes, a process's exit."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout_s:.1f} s waiting for {what or predicate}"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


# One entry per isolated_state() being inside: only the outermost resets process state.
_depth: list[None] = []


@resets_process_state
def _forget_the_current_context() -> None:
    """The calling thread's OpenTelemetry context back to an empty one: a span a test entered
    and never left (a step whose loop died inside it) would otherwise be the parent of the
    next test's spans. Only when OpenTelemetry's context module is loaded already."""
    context = sys.modules.get("opentelemetry.context")
    if context is not None:
        context.attach(context.Context())


@contextlib.contextmanager
def isolated_state(
    replacement: registry.MetricRegistry | None = None,
) -> Iterator[registry.MetricRegistry]:
    """A fresh copy of the default registry's declarations (or ``replacement``'s, say an
    empty one's) and fresh plugin and warn-once state, restored afterwards, so one test's
    start/declare cannot leak into the next. Yields the default registry.

    The outermost ``isolated_state()`` also resets every plugin module's process state (see
    ``rlmetrics.resets_process_state``) when it starts and when it ends, so what one test
    counted or chose for the process never reaches another; a nested one leaves it alone, so
    a test can choose process settings (``rlmetrics_ray.configure(...)``) and then start an
    isolated session that uses them. Make it an autouse fixture of your suite's conftest, so
    every test is inside one."""
    # Import every installed plugin first, so their import-time declarations land in the
    # process registry that every test's copy starts from.
    plugins.get_plugins()
    outermost = not _depth
    if outermost:
        reset_process_state()
    default, saved_plugins = registry._default, plugins._plugins
    saved_in_process = dict(plugins._in_process)
    # The default registry's contents are swapped, never the object: rlmetrics.record and
    # its siblings are bound to it. The stand-in holds the process's state meanwhile.
    stand_in = replacement if replacement is not None else default.copy()
    default._exchange(stand_in)
    plugins._plugins = None
    _warn._reset()
    reset_tracing()
    _depth.append(None)
    try:
        yield default
    finally:
        handle = current()
        if handle is not None:
            handle.shutdown(timeout_s=5)
        default._exchange(stand_in)
        plugins._plugins = saved_plugins
        plugins._in_process.clear()
        plugins._in_process.update(saved_in_process)
        _warn._reset()
        reset_tracing()
        _depth.pop()
        if outermost:
            reset_process_state()


def load_hypothesis_profile() -> str:
    """Register rlmetrics' hypothesis profiles and load the one ``RLMETRICS_HYPOTHESIS_PROFILE``
    names (``suite`` when it is unset). Call it at the top of every test folder's
    ``conftest.py``, so a folder run alone gets the same profile as the whole suite.

    - ``suite``: hypothesis' 100 examples a property, **no deadline** and the ``too_slow``
      health check off. A property's verdict never depends on how busy the machine is: a
      shared CI runner can take any time over one example, so time is never a failure here
      (performance is measured in ``benchmarks/``). A failure prints its reproduction blob.
    - ``fuzz``: the same, at 10**5 examples a property and with every health check off, since
      hostile strategies trip the size and filter checks on purpose (``tox -e fuzz``).

    A property that sets ``max_examples`` itself keeps it; none sets a ``deadline``, which
    would override the profile's.
    """
    import os

    try:
        from hypothesis import HealthCheck, settings
    except ImportError:
        raise ImportError(
            "rlmetrics.testing.load_hypothesis_profile() sets hypothesis' profiles, and "
            "hypothesis is not installed: pip install hypothesis (in the test environment)"
        ) from None

    settings.register_profile(
        "suite", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
    )
    settings.register_profile(
        "fuzz",
        parent=settings.get_profile("suite"),
        max_examples=100_000,
        suppress_health_check=list(HealthCheck),
    )
    name = os.environ.get(HYPOTHESIS_PROFILE_ENV) or "suite"
    try:
        settings.get_profile(name)  # checked first: a failed load_profile leaves it half-set
    except Exception:
        raise ValueError(
            f"{HYPOTHESIS_PROFILE_ENV}={name!r} names no hypothesis profile; use 'suite' "
            "(the default) or 'fuzz'"
        ) from None
    settings.load_profile(name)
    return name


@contextlib.contextmanager
def in_memory_telemetry(**start_kwargs: Any) -> Iterator[tuple[Telemetry, Any]]:
    """Start telemetry with an InMemoryMetricReader (plus any ``start`` arguments)."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    start_kwargs.setdefault("service_name", "rlmetrics-test")
    handle = start(readers=[reader, *start_kwargs.pop("readers", ())], **start_kwargs)
    try:
        yield handle, reader
    finally:
        handle.shutdown(timeout_s=5)
