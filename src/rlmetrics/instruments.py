"""Binding declared specs to OpenTelemetry instruments, for one telemetry session.

A :class:`Session` exists only while telemetry is started: it holds one instrument per spec
and is what ``record`` writes through. Recording is the training loop's path, so it never
raises: every bad value, key or attribute set is dropped on its own with ``warn_once`` while
the rest of the call lands.

Gauges are not exported through the SDK's synchronous gauge: SDK 1.44 forgets its value after
each collection and 1.45 keeps every attribute set forever. A gauge keeps the last value per
attribute set here and exports the table through an observable gauge, so every SDK version
exports the same series and ``retract`` can end one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ._warn import describe_key, describe_value, warn_once
from .spec import Kind
from .values import AttributeSet, as_number, check_attributes, encodable

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter

    from .registry import Declared

__all__ = ["Session"]

# Shared by every unlabelled record: the SDK reads attributes, it never mutates them.
_NO_ATTRIBUTES: tuple[AttributeSet, dict[str, str]] = (frozenset(), {})


class _Series:
    """One spec's live state for a telemetry session."""

    __slots__ = (
        "admitted",
        "counter",
        "declared",
        "instrument",
        "lock",
        "observable",
        "spec",
        "table",
        "write",
    )

    def __init__(self, declared: Declared) -> None:
        self.declared = declared
        self.spec = declared.spec
        # Read on every record: precomputed rather than derived from the kind each time.
        self.observable = self.spec.kind.observable
        self.counter = self.spec.kind.monotonic
        self.admitted: set[AttributeSet] = set()
        self.table: dict[AttributeSet, tuple[float, dict[str, str]]] = {}
        self.lock = threading.Lock()
        self.instrument: Any = None
        self.write: Callable[[float, dict[str, str]], None] | None = None

    def point(
        self, value: Any, attributes: Any, admitted: set[AttributeSet]
    ) -> tuple[int | float, AttributeSet, dict[str, str]] | str:
        """``(number, attribute key, attributes)`` for an exportable point, else why not.

        ``admitted`` holds the attribute sets already counted against the spec's
        ``max_series`` cap: the session's for a recorded series, one collection's for an
        observed one.
        """
        spec = self.spec
        number = as_number(value)
        if number is None:
            return f"{describe_value(value)} is not a finite number"
        if not encodable(number):
            return "an int beyond the int64 range an exporter can encode"
        if self.counter and number < 0:
            return f"a {spec.kind.value} cannot take a negative value"
        if not attributes:
            return (number, *_NO_ATTRIBUTES)
        try:
            key = frozenset(attributes.items())
        except (AttributeError, TypeError):
            return f"attributes must be a mapping of str to str, got {type(attributes).__name__}"
        if key in admitted:
            return number, key, dict(attributes)
        checked = check_attributes(spec, attributes)
        if isinstance(checked, str):
            return checked
        with self.lock:
            if spec.open_attributes and len(admitted) >= spec.max_series:
                return f"more than max_series={spec.max_series} distinct attribute sets"
            admitted.add(key)
        return (number, *checked)

    def set_gauge(self, value: float, key: AttributeSet, attributes: dict[str, str]) -> None:
        with self.lock:
            self.table[key] = (value, attributes)

    def retract(self, key: AttributeSet) -> None:
        with self.lock:
            self.table.pop(key, None)
            self.admitted.discard(key)

    def gauge_snapshot(self) -> list[tuple[float, dict[str, str]]]:
        with self.lock:
            return list(self.table.values())


class Session:
    """Instruments built on one Meter; exists only while telemetry is started."""

    def __init__(self, declared: Iterable[Declared], meter: Meter) -> None:
        from opentelemetry.metrics import Observation

        self._observation = Observation
        self.active = True
        self.groups: dict[str, dict[str, _Series]] = {}
        for item in declared:
            series = _Series(item)
            self.groups.setdefault(item.group, {})[item.spec.key] = series
            self._build(series, meter)

    def _build(self, series: _Series, meter: Meter) -> None:
        spec = series.spec
        common: dict[str, Any] = {
            "name": spec.name,
            "unit": spec.unit,
            "description": spec.description,
        }
        if spec.kind is Kind.COUNTER:
            series.instrument = meter.create_counter(**common)
            series.write = series.instrument.add
        elif spec.kind is Kind.UP_DOWN_COUNTER:
            series.instrument = meter.create_up_down_counter(**common)
            series.write = series.instrument.add
        elif spec.kind is Kind.HISTOGRAM:
            if spec.buckets is not None:
                common["explicit_bucket_boundaries_advisory"] = list(spec.buckets)
            series.instrument = meter.create_histogram(**common)
            series.write = series.instrument.record
        else:
            create = {
                Kind.GAUGE: meter.create_observable_gauge,
                Kind.OBSERVABLE_GAUGE: meter.create_observable_gauge,
                Kind.OBSERVABLE_COUNTER: meter.create_observable_counter,
                Kind.OBSERVABLE_UP_DOWN_COUNTER: meter.create_observable_up_down_counter,
            }[spec.kind]
            series.instrument = create(callbacks=[self._callback(series)], **common)

    # -- recording (the training loop's path) -------------------------------------------------

    def record(
        self, group: str, values: Mapping[str, Any], attributes: Mapping[str, str] | None
    ) -> None:
        series_by_key = self.groups.get(group)
        if series_by_key is None:
            warn_once(
                f"record:{describe_key(group)}:group",
                f"rlmetrics.record: no metric group {describe_key(group)} is declared; declare "
                "its specs "
                "before rlmetrics.start()",
            )
            return
        for key, value in values.items():
            if value is None:
                continue
            series = series_by_key.get(key)
            if series is None:
                warn_once(
                    f"record:{group}:unknown-key",
                    f"rlmetrics.record: {describe_key(key)} is not a declared key of group "
                    f"{group!r}; "
                    "dropped (later unknown keys of this group are reported at DEBUG)",
                )
                continue
            if series.observable:
                warn_once(
                    f"record:{group}:{key}:observable",
                    f"rlmetrics.record: {series.spec.name!r} is a {series.spec.kind.value}, "
                    "exported through its callback; not recordable",
                )
                continue
            point = series.point(value, attributes, series.admitted)
            if isinstance(point, str):
                warn_once(
                    f"record:{group}:{key}:dropped",
                    f"rlmetrics.record: {series.spec.name} (key {key!r}) dropped a value: {point}",
                )
                continue
            number, attr_key, attr_dict = point
            if series.write is None:
                series.set_gauge(number, attr_key, attr_dict)
            else:
                series.write(number, attr_dict)

    def retract(self, group: str, key: str, attributes: Mapping[str, str] | None) -> None:
        series = self.groups[group][key]
        if series.spec.kind is not Kind.GAUGE:
            warn_once(
                f"retract:{group}:{key}",
                f"rlmetrics.retract: only gauges can retract an attribute set; "
                f"{series.spec.name!r} is a {series.spec.kind.value}",
            )
            return
        series.retract(frozenset((attributes or {}).items()))

    # -- observing (the exporter's thread) ---------------------------------------------------

    def _callback(self, series: _Series) -> Callable[[Any], list[Any]]:
        spec = series.spec

        def observe(_options: Any) -> list[Any]:
            if not self.active:
                return []
            if spec.kind is Kind.GAUGE:
                return [self._observation(v, a) for v, a in series.gauge_snapshot()]
            try:
                observed = list(spec.callback())  # type: ignore[misc]
            except Exception:
                warn_once(
                    f"observe:{spec.name}",
                    f"rlmetrics: the callback of {spec.name!r} raised; its series is skipped in "
                    "this collection",
                )
                return []
            return list(self._observations(series, observed))

        return observe

    def _observations(self, series: _Series, observed: list[Any]) -> Iterator[Any]:
        spec = series.spec
        seen: set[AttributeSet] = set()  # the cap applies to one collection's attribute sets
        for item in observed:
            try:
                value, attributes = item
            except (TypeError, ValueError):
                warn_once(
                    f"observe:{spec.name}:shape",
                    f"rlmetrics: the callback of {spec.name!r} must yield (value, attributes) "
                    f"pairs, got a {type(item).__name__}",
                )
                continue
            point = series.point(value, attributes, seen)
            if isinstance(point, str):
                warn_once(
                    f"observe:{spec.name}:dropped",
                    f"rlmetrics: {spec.name!r} dropped an observation: {point}",
                )
                continue
            number, _key, attr_dict = point
            yield self._observation(number, attr_dict)
