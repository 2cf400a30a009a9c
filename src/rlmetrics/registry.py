"""MetricRegistry: declared series, frozen at telemetry start, recorded by key.

Families declare their specs at import (``declare``); ``rlmetrics.start()`` freezes the
registry and builds one instrument per spec (``bind``); ``record`` then writes by registry
key. Recording is the training loop's path, so it never raises: every bad value, key or
attribute set is dropped on its own with ``warn_once`` while the rest of the call lands.

Gauges are not exported through the SDK's synchronous gauge: SDK 1.44 forgets its value after
each collection and 1.45 keeps every attribute set forever. The registry keeps the last value
per attribute set itself and exports the table through an observable gauge, so every SDK
version exports the same series and ``retract`` can end one.
"""

from __future__ import annotations

import math
import numbers
import sys
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ._warn import warn_once
from .spec import Kind, MetricSpec

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter

__all__ = [
    "DeclarationError",
    "Declared",
    "LateDeclarationError",
    "MetricRegistry",
    "declare",
    "default_registry",
    "is_exporting",
    "record",
    "retract",
]

AttributeSet = frozenset[tuple[str, str]]
# Shared by every unlabelled record: the SDK reads attributes, it never mutates them.
_NO_ATTRIBUTES: tuple[AttributeSet, dict[str, str]] = (frozenset(), {})


class DeclarationError(ValueError):
    """Two declarations of one series disagree."""


class LateDeclarationError(DeclarationError):
    """A declaration arrived after the registry froze."""


@attrs.frozen
class Declared:
    """A spec with the group it belongs to and the module that declared it."""

    group: str
    spec: MetricSpec
    owner: str


def _caller_module(depth: int) -> str:
    try:
        return str(sys._getframe(depth + 1).f_globals.get("__name__", "<unknown>"))
    except ValueError:
        return "<unknown>"


def as_number(value: Any) -> float | int | None:
    """The finite real number ``value`` stands for, or None.

    Accepts Python and NumPy scalars and single-element arrays or tensors (through ``item()``);
    refuses bools (a flag is not a measurement), strings, NaN and infinities.
    """
    kind = type(value)
    if kind is float:  # the hot path: a plain float from a training dict
        return float(value) if math.isfinite(value) else None
    if kind is int:
        return int(value)
    if isinstance(value, bool):
        return None
    if not isinstance(value, numbers.Real):
        item = getattr(value, "item", None)
        if item is None or isinstance(value, (str, bytes)):
            return None
        try:
            value = item()
        except Exception:
            return None
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return None
    number = value if isinstance(value, int) else float(value)
    if isinstance(number, float) and not math.isfinite(number):
        return None
    return number


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
        self.counter = self.spec.kind is Kind.COUNTER
        self.admitted: set[AttributeSet] = set()
        self.table: dict[AttributeSet, tuple[float, dict[str, str]]] = {}
        self.lock = threading.Lock()
        self.instrument: Any = None
        self.write: Callable[[float, dict[str, str]], None] | None = None

    def admit(
        self, attributes: Mapping[str, Any] | None
    ) -> tuple[AttributeSet, dict[str, str]] | str:
        """The attribute set to record under, or why it is refused."""
        if not attributes:
            return _NO_ATTRIBUTES
        try:
            key = frozenset(attributes.items())
        except (AttributeError, TypeError):
            return f"attributes must be a mapping of str to str, got {type(attributes).__name__}"
        if key in self.admitted:
            return key, dict(attributes)
        checked = _check_attributes(self.spec, attributes)
        if isinstance(checked, str):
            return checked
        with self.lock:
            if self.spec.open_attributes and len(self.admitted) >= self.spec.max_series:
                return (
                    f"more than max_series={self.spec.max_series} distinct attribute sets; "
                    f"{dict(attributes)} dropped"
                )
            self.admitted.add(key)
        return key, dict(attributes)

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


class _Session:
    """Instruments built on one Meter; exists only while telemetry is started."""

    def __init__(self, declared: Iterable[Declared], meter: Meter) -> None:
        from opentelemetry.metrics import Observation as OtelObservation

        self._observation = OtelObservation
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

    def _callback(self, series: _Series) -> Callable[[Any], list[Any]]:
        spec = series.spec
        where = f"{series.declared.group}/{spec.key}"

        def observe(_options: Any) -> list[Any]:
            if not self.active:
                return []
            if spec.kind is Kind.GAUGE:
                return [self._observation(v, a) for v, a in series.gauge_snapshot()]
            try:
                observed = list(spec.callback())  # type: ignore[misc]
            except Exception:
                warn_once(
                    f"observe:{where}",
                    f"rlmetrics: the callback of {spec.name!r} raised; "
                    "its series is skipped in this collection",
                )
                return []
            return list(self._checked_observations(series, observed))

        return observe

    def _checked_observations(self, series: _Series, observed: list[Any]) -> Iterator[Any]:
        spec = series.spec
        seen: set[AttributeSet] = set()
        for item in observed:
            try:
                value, attributes = item
            except (TypeError, ValueError):
                warn_once(
                    f"observe:{spec.name}:shape",
                    f"rlmetrics: the callback of {spec.name!r} "
                    f"must yield (value, attributes) pairs, got {item!r}",
                )
                continue
            number = as_number(value)
            if number is None or (spec.kind.monotonic and number < 0):
                warn_once(
                    f"observe:{spec.name}:value",
                    f"rlmetrics: {spec.name!r} observed {value!r}, which is not a finite "
                    f"{'non-negative ' if spec.kind.monotonic else ''}number; dropped",
                )
                continue
            admitted = _check_attributes(spec, attributes)
            if isinstance(admitted, str):
                warn_once(
                    f"observe:{spec.name}:attributes", f"rlmetrics: {spec.name!r}: {admitted}"
                )
                continue
            key, attrs_dict = admitted
            if spec.open_attributes and key not in seen and len(seen) >= spec.max_series:
                warn_once(
                    f"observe:{spec.name}:cap",
                    f"rlmetrics: {spec.name!r} observed more than "
                    f"max_series={spec.max_series} attribute sets; the rest are dropped",
                )
                continue
            seen.add(key)
            yield self._observation(number, attrs_dict)


def _check_attributes(
    spec: MetricSpec, attributes: Any
) -> tuple[AttributeSet, dict[str, str]] | str:
    """Validate one attribute set against a spec, without the series cap."""
    if not attributes:
        return frozenset(), {}
    if not isinstance(attributes, Mapping):
        return f"attributes must be a mapping, got {type(attributes).__name__}"
    allowed = dict(spec.attributes)
    for attr, value in attributes.items():
        if attr not in allowed:
            return f"attribute {attr!r} is not declared (declared: {sorted(allowed) or 'none'})"
        if not isinstance(value, str):
            return f"attribute {attr!r} must be a string, got {type(value).__name__}"
        closed = allowed[attr]
        if closed is not None and value not in closed:
            return f"attribute {attr}={value!r} is outside its closed set {sorted(closed)}"
    return frozenset(attributes.items()), dict(attributes)


class MetricRegistry:
    """Declarations by group and key; instruments while a telemetry session is bound."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._by_key: dict[tuple[str, str], Declared] = {}
        self._by_name: dict[str, Declared] = {}
        self._frozen = False
        self._session: _Session | None = None

    # -- declaration ----------------------------------------------------------------------

    def declare(self, group: str, specs: Iterable[MetricSpec], *, owner: str | None = None) -> None:
        """Declare ``specs`` under ``group``; raise on a conflict or after freeze.

        Identical re-declaration (a module imported twice, a reload) is a no-op.
        """
        owner = owner or _caller_module(1)
        specs = list(specs)
        if not isinstance(group, str) or not group:
            raise DeclarationError(
                f"rlmetrics.declare from {owner}: group must be a non-empty string"
            )
        for spec in specs:
            if not isinstance(spec, MetricSpec):
                raise DeclarationError(
                    f"rlmetrics.declare({group!r}) from {owner}: expected MetricSpec, got {spec!r}"
                )
        with self._lock:
            if self._frozen:
                names = ", ".join(s.name for s in specs)
                raise LateDeclarationError(
                    f"rlmetrics.declare({group!r}) from {owner} came after telemetry started, "
                    f"so {names} would never be exported: declarations freeze at "
                    "rlmetrics.start(). "
                    f"Import {owner} before rlmetrics.start(), or register it as an entry point in "
                    "the 'rlmetrics' group so it loads at start."
                )
            pending: list[Declared] = []
            for spec in specs:
                item = Declared(group, spec, owner)
                self._check_conflict(item, pending)
                pending.append(item)
            for item in pending:
                self._by_key[(group, item.spec.key)] = item
                self._by_name[item.spec.name.lower()] = item

    def _check_conflict(self, item: Declared, pending: list[Declared]) -> None:
        spec = item.spec
        rivals = [
            self._by_key.get((item.group, spec.key)),
            self._by_name.get(spec.name.lower()),
            *(
                p
                for p in pending
                if p.spec.key == spec.key or p.spec.name.lower() == spec.name.lower()
            ),
        ]
        for rival in rivals:
            if rival is None:
                continue
            fields = rival.spec.conflicts_with(spec)
            if rival.group != item.group:
                fields.insert(0, "group")
            if fields:
                raise DeclarationError(
                    f"conflicting declarations of {spec.name!r} (key {spec.key!r}): "
                    f"{item.owner} declares it in group {item.group!r} and {rival.owner} in group "
                    f"{rival.group!r}; they differ in {', '.join(fields)}. One series has one "
                    "declaration: make them identical or rename one."
                )

    def declared(self) -> list[Declared]:
        """Every declaration, in declaration order."""
        with self._lock:
            return list(self._by_key.values())

    def keys(self, group: str) -> Collection[str]:
        """The registry keys declared under ``group``."""
        session = self._session
        if session is not None:  # frozen: the session's index answers without a scan
            return session.groups.get(group, {}).keys()
        with self._lock:
            return frozenset(key for g, key in self._by_key if g == group)

    @property
    def frozen(self) -> bool:
        return self._frozen

    def freeze(self) -> None:
        """Close declaration (telemetry start does this through ``bind``)."""
        with self._lock:
            self._frozen = True

    # -- sessions -------------------------------------------------------------------------

    def bind(self, meter: Meter) -> None:
        """Freeze and build every declared instrument on ``meter``; recording starts."""
        with self._lock:
            self._frozen = True
            self._session = _Session(self._by_key.values(), meter)

    def release(self) -> None:
        """End the session: recording becomes a no-op and declaration reopens."""
        with self._lock:
            if self._session is not None:
                self._session.active = False
            self._session = None
            self._frozen = False

    @property
    def exporting(self) -> bool:
        return self._session is not None

    # -- recording ------------------------------------------------------------------------

    def record(
        self,
        group: str,
        values: Mapping[str, Any],
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        """Record ``values`` by registry key under ``attributes``. Never raises; skips None."""
        session = self._session
        if session is None:
            return
        try:
            self._record(session, group, values, attributes)
        except Exception:
            warn_once(f"record:{group}", f"rlmetrics.record({group!r}) failed; values dropped")

    def _record(
        self,
        session: _Session,
        group: str,
        values: Mapping[str, Any],
        attributes: Mapping[str, str] | None,
    ) -> None:
        series_by_key = session.groups.get(group)
        if series_by_key is None:
            warn_once(
                f"record:{group}:group",
                f"rlmetrics.record: no metric group {group!r} is "
                "declared; declare its specs before rlmetrics.start()",
            )
            return
        for key, value in values.items():
            if value is None:
                continue
            series = series_by_key.get(key)
            if series is None:
                warn_once(
                    f"record:{group}:{key}:unknown",
                    f"rlmetrics.record: {key!r} is not a declared key of group {group!r}; dropped",
                )
                continue
            spec = series.spec
            number = as_number(value)
            if number is None:
                warn_once(
                    f"record:{group}:{key}:value",
                    f"rlmetrics.record: {key!r}={value!r} is not a finite number; dropped",
                )
                continue
            if series.observable:
                warn_once(
                    f"record:{group}:{key}:observable",
                    f"rlmetrics.record: {spec.name!r} is "
                    f"a {spec.kind.value}, exported through its callback; not recordable",
                )
                continue
            if series.counter and number < 0:
                warn_once(
                    f"record:{group}:{key}:negative",
                    f"rlmetrics.record: counter {spec.name!r} cannot take {number}; dropped",
                )
                continue
            admitted = series.admit(attributes)
            if isinstance(admitted, str):
                warn_once(
                    f"record:{group}:{key}:attributes",
                    f"rlmetrics.record: {spec.name!r}: {admitted}",
                )
                continue
            attr_key, attr_dict = admitted
            if series.write is None:
                series.set_gauge(number, attr_key, attr_dict)
            else:
                series.write(number, attr_dict)

    def retract(self, group: str, key: str, attributes: Mapping[str, str] | None = None) -> None:
        """Stop exporting one gauge attribute set (it disappears from the next collection)."""
        session = self._session
        if session is None:
            return
        try:
            series = session.groups[group][key]
            if series.spec.kind is not Kind.GAUGE:
                warn_once(
                    f"retract:{group}:{key}",
                    f"rlmetrics.retract: only gauges can retract "
                    f"an attribute set; {series.spec.name!r} is a {series.spec.kind.value}",
                )
                return
            series.retract(frozenset((attributes or {}).items()))
        except Exception:
            warn_once(f"retract:{group}:{key}", f"rlmetrics.retract({group!r}, {key!r}) failed")

    def copy(self) -> MetricRegistry:
        """An unfrozen registry holding the same declarations (tests)."""
        clone = MetricRegistry()
        with self._lock:
            clone._by_key = dict(self._by_key)
            clone._by_name = dict(self._by_name)
        return clone


_default = MetricRegistry()


def default_registry() -> MetricRegistry:
    """The process-wide registry that ``declare``/``record`` and ``start()`` use."""
    return _default


def declare(group: str, specs: Iterable[MetricSpec]) -> None:
    """Declare ``specs`` under ``group`` in the default registry (call at import time)."""
    _default.declare(group, specs, owner=_caller_module(1))


def record(
    group: str, values: Mapping[str, Any], attributes: Mapping[str, str] | None = None
) -> None:
    """Record ``values`` by registry key; a no-op unless telemetry is exporting. Never raises."""
    _default.record(group, values, attributes)


def retract(group: str, key: str, attributes: Mapping[str, str] | None = None) -> None:
    """End one attribute set of a gauge in the default registry."""
    _default.retract(group, key, attributes)


def is_exporting() -> bool:
    """Whether a started telemetry session is exporting (every tee is a no-op otherwise)."""
    return _default.exporting
