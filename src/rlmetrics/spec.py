"""MetricSpec: one declared series, validated when it is built.

A spec is the single source of truth for a series: the module that logs a key declares the
spec from the same constant, so a rename cannot orphan the series. Everything that can be
checked without OpenTelemetry is checked here, at construction, with a message that names
the spec and the field to change.
"""

from __future__ import annotations

import enum
import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

__all__ = [
    "LAST",
    "MAX",
    "MEAN",
    "MIN",
    "OPEN",
    "STRAGGLER",
    "SUM",
    "Kind",
    "MetricSpec",
    "Observation",
    "Reduce",
    "Reduction",
    "SpecError",
    "weighted_mean",
]

#: Marks an attribute key whose values are not a closed set; the spec's ``max_series`` caps it.
OPEN: None = None

#: What an observable callback yields: a value and the attributes it carries, as a mapping
#: or as a frozenset of ``(name, value)`` pairs its owner built once and hands back every
#: collection (the same object each time: the check finds it by identity).
Observation = tuple[float, Mapping[str, str | int] | frozenset[tuple[str, str | int]]]


class SpecError(ValueError):
    """A MetricSpec that cannot be exported as declared."""


class Kind(str, enum.Enum):
    """The OpenTelemetry instrument a spec is exported through."""

    COUNTER = "counter"
    UP_DOWN_COUNTER = "up_down_counter"
    HISTOGRAM = "histogram"
    GAUGE = "gauge"
    OBSERVABLE_GAUGE = "observable_gauge"
    OBSERVABLE_COUNTER = "observable_counter"
    OBSERVABLE_UP_DOWN_COUNTER = "observable_up_down_counter"

    @property
    def observable(self) -> bool:
        return self.value.startswith("observable_")

    @property
    def monotonic(self) -> bool:
        return self in (Kind.COUNTER, Kind.OBSERVABLE_COUNTER)


class Reduce(str, enum.Enum):
    """How one step's values of a series from many ranks make the run's value.

    ``straggler`` is for phase times: the run's value is the slowest rank's, and the merge
    adds the fastest, the mean, which rank was slowest and the skew (slowest over mean) as
    series of their own (:mod:`rlmetrics.families.ranks`), never a series per rank.
    """

    SUM = "sum"
    MEAN = "mean"
    WEIGHTED_MEAN = "weighted_mean"
    MIN = "min"
    MAX = "max"
    LAST = "last"
    STRAGGLER = "straggler"


@attrs.frozen
class Reduction:
    """A spec's reduction across ranks: a :class:`Reduce` kind and, for a weighted mean, the
    OpenTelemetry name of the series that weighs each rank's value (its sample count)."""

    kind: Reduce = attrs.field(converter=Reduce)
    weight: str | None = None

    def __attrs_post_init__(self) -> None:
        weighted = self.kind is Reduce.WEIGHTED_MEAN
        if weighted and not (isinstance(self.weight, str) and _NAME.fullmatch(self.weight)):
            raise SpecError(
                f"a weighted mean names the series that weighs it, got weight={self.weight!r}: "
                "use weighted_mean('<series name>')"
            )
        if not weighted and self.weight is not None:
            raise SpecError(f"only a weighted mean takes a weight; this is {self.kind.value}")

    def describe(self) -> str:
        """``sum``, ``weighted_mean(rl.train.samples)``…"""
        return self.kind.value if self.weight is None else f"{self.kind.value}({self.weight})"


def weighted_mean(weight: str) -> Reduction:
    """The mean of the ranks' values weighted by series ``weight`` (a count that sums)."""
    return Reduction(Reduce.WEIGHTED_MEAN, weight)


SUM = Reduction(Reduce.SUM)
MEAN = Reduction(Reduce.MEAN)
MIN = Reduction(Reduce.MIN)
MAX = Reduction(Reduce.MAX)
LAST = Reduction(Reduce.LAST)
STRAGGLER = Reduction(Reduce.STRAGGLER)


def _to_reduction(value: Any) -> Any:
    if isinstance(value, (str, Reduce)):
        try:
            return Reduction(value)
        except (ValueError, SpecError):
            return value
    return value


# OTel API instrument-name syntax: a letter, then up to 254 of [A-Za-z0-9_.-/].
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-/]{0,254}")
# UCUM-ish: up to 63 printable ASCII characters without spaces; braces balanced, not nested.
_UNIT = re.compile(r"(?:[!-z|~]|\{[!-z|~]*\})*")
_DEFAULT_MAX_SERIES = 100

AttributeDecl = tuple[tuple[str, "frozenset[str] | None"], ...]


def _freeze_attributes(value: Any) -> Any:
    """``{key: allowed}`` → sorted ``((key, frozenset | None), ...)``; anything malformed is
    left as it is for the validator to name."""
    if value is None:
        return ()
    try:
        items = value.items() if isinstance(value, Mapping) else value
        frozen = []
        for key, allowed in items:
            if allowed is not None and not isinstance(allowed, str):
                allowed = frozenset(allowed)
            frozen.append((key, allowed))
        return tuple(sorted(frozen, key=lambda kv: str(kv[0])))
    except (TypeError, ValueError):
        return value


def _freeze_buckets(value: Any) -> Any:
    if value is None or isinstance(value, (str, bytes)):
        return value
    try:
        return tuple(float(b) for b in value)
    except (TypeError, ValueError):
        return value


def _to_kind(value: Any) -> Any:
    try:
        return Kind(value)
    except ValueError:
        return value


_Validator = Callable[["MetricSpec", "attrs.Attribute[Any]", Any], None]


def _check(problem: Callable[[MetricSpec, Any], str | None]) -> _Validator:
    """An attrs validator raising :class:`SpecError` that names the spec and the field."""

    def validate(spec: MetricSpec, attribute: attrs.Attribute[Any], value: Any) -> None:
        message = problem(spec, value)
        if message:
            raise SpecError(f"MetricSpec {spec.name!r}: field {attribute.name!r}: {message}")

    return validate


def _name_problem(spec: MetricSpec, name: Any) -> str | None:
    if isinstance(name, str) and _NAME.fullmatch(name):
        return None
    return (
        "must start with a letter and hold at most 255 characters from [A-Za-z0-9_.-/] "
        "(OpenTelemetry instrument-name syntax)"
    )


def _kind_problem(spec: MetricSpec, kind: Any) -> str | None:
    if isinstance(kind, Kind):
        return None
    return f"{kind!r} is not a kind; choose from {[k.value for k in Kind]}"


def _unit_problem(spec: MetricSpec, unit: Any) -> str | None:
    if isinstance(unit, str) and len(unit) <= 63 and _UNIT.fullmatch(unit):
        return None
    return (
        f"{unit!r} is not a UCUM unit: at most 63 printable ASCII characters, no spaces, "
        "annotations in balanced braces (for example 's', 'By', '{token}', '1')"
    )


def _description_problem(spec: MetricSpec, description: Any) -> str | None:
    return None if isinstance(description, str) else "must be a string"


def _key_problem(spec: MetricSpec, key: Any) -> str | None:
    return None if isinstance(key, str) and key else "must be a non-empty string"


def _attributes_problem(spec: MetricSpec, attributes: Any) -> str | None:
    if not isinstance(attributes, tuple):
        return "must map attribute keys to a collection of strings or OPEN"
    for key, allowed in attributes:
        if not isinstance(key, str) or not key:
            return f"attribute keys must be non-empty strings, got {key!r}"
        if isinstance(allowed, str):
            return (
                f"attribute {key!r}: the allowed values must be a collection of strings, got "
                f"the single string {allowed!r} (wrap it in a set)"
            )
        if allowed is not None and (not allowed or not all(isinstance(v, str) for v in allowed)):
            return f"{key!r} must allow a non-empty set of strings"
    return _label_problem(spec, [key for key, _ in attributes])


#: Labels the Prometheus exporter gives every sample itself (the scope's, the overflow set's);
#: an attribute that became one would overwrite it.
_EXPORTER_LABELS = frozenset(
    {"otel_scope_name", "otel_scope_version", "otel_scope_schema_url", "otel_metric_overflow"}
)


def _label_problem(spec: MetricSpec, keys: list[str]) -> str | None:
    """Why two of ``keys`` (or one and a label the exporter sets) would be one Prometheus
    label: the exporter keeps one value of them, and the others are lost on the endpoint."""
    from .dashboard.promql import prometheus_label  # it imports this module

    taken = set(_EXPORTER_LABELS)
    if spec.kind is Kind.HISTOGRAM:
        taken.add("le")  # each bucket's bound
    seen: dict[str, str] = {}
    for key in keys:
        label = prometheus_label(key)
        if label in taken:
            return (
                f"attribute {key!r} becomes the Prometheus label {label!r}, which the exporter "
                "sets itself: its values would be lost there; name the attribute otherwise"
            )
        if label in seen:
            return (
                f"attributes {seen[label]!r} and {key!r} both become the Prometheus label "
                f"{label!r}: one's values would be lost there; rename one"
            )
        seen[label] = key
    return None


def _max_series_problem(spec: MetricSpec, max_series: Any) -> str | None:
    if isinstance(max_series, int) and not isinstance(max_series, bool) and max_series >= 1:
        return None
    return "must be a positive int"


def _buckets_problem(spec: MetricSpec, buckets: Any) -> str | None:
    if buckets is None:
        return None
    if spec.kind is not Kind.HISTOGRAM:
        return f"only a histogram takes buckets, this is a {getattr(spec.kind, 'value', spec.kind)}"
    if not isinstance(buckets, tuple) or not buckets or not all(math.isfinite(b) for b in buckets):
        return "must be a non-empty sequence of finite numbers"
    if any(a >= b for a, b in itertools.pairwise(buckets)):
        return "must be strictly increasing"
    if buckets[0] < 0:
        return (
            "must not go below 0: a histogram takes no negative value (the SDK drops it), so "
            "those buckets never fill; a value that can be negative wants a gauge, or an "
            "up-down counter of its sum beside a counter of how many"
        )
    return None


def _reduce_problem(spec: MetricSpec, reduce: Any) -> str | None:
    if reduce is None or isinstance(reduce, Reduction):
        return None
    return (
        f"{reduce!r} is not a reduction; use one of rlmetrics.spec's SUM, MEAN, MIN, MAX, LAST, "
        "STRAGGLER or weighted_mean('<weight series>')"
    )


def _callback_problem(spec: MetricSpec, callback: Any) -> str | None:
    if not isinstance(spec.kind, Kind):
        return None  # the kind's own validator reports it
    if spec.kind.observable:
        if not callable(callback):
            return f"a {spec.kind.value} needs a callable that yields observations"
    elif callback is not None:
        return (
            f"only observable kinds take a callback; record a {spec.kind.value} with "
            "rlmetrics.record() instead"
        )
    return None


@attrs.frozen(eq=True)
class MetricSpec:
    """One declared series.

    ``attributes`` maps each allowed attribute key to a closed set of values, or to
    :data:`OPEN` for an open key; a metric with any open key is capped at ``max_series``
    distinct attribute sets. ``key`` is what callers record against (defaults to the name).
    ``buckets`` are explicit histogram boundaries; ``callback`` feeds an observable kind and
    returns an iterable of ``(value, attributes)`` pairs (see :data:`Observation`).
    ``reduce`` says how the series merges across ranks (:class:`Reduction`); left out, a
    mean for a gauge and a sum otherwise (:attr:`reduction`).
    """

    name: str = attrs.field(validator=_check(_name_problem))
    kind: Kind = attrs.field(converter=_to_kind, validator=_check(_kind_problem))
    unit: str = attrs.field(default="1", validator=_check(_unit_problem))
    description: str = attrs.field(default="", validator=_check(_description_problem))
    key: str = attrs.field(
        default=attrs.Factory(lambda self: self.name, takes_self=True),
        validator=_check(_key_problem),
    )
    attributes: AttributeDecl = attrs.field(
        default=(), converter=_freeze_attributes, validator=_check(_attributes_problem)
    )
    max_series: int = attrs.field(
        default=_DEFAULT_MAX_SERIES, validator=_check(_max_series_problem)
    )
    buckets: tuple[float, ...] | None = attrs.field(
        default=None, converter=_freeze_buckets, validator=_check(_buckets_problem)
    )
    callback: Callable[[], Iterable[Observation]] | None = attrs.field(
        default=None, eq=False, validator=_check(_callback_problem)
    )
    reduce: Reduction | None = attrs.field(
        default=None, converter=_to_reduction, validator=_check(_reduce_problem)
    )

    @property
    def reduction(self) -> Reduction:
        """How the series merges across ranks: the declared one, else a sum for everything
        but a gauge (counts, in-flight totals and histogram buckets add up) and a mean for a
        gauge."""
        if self.reduce is not None:
            return self.reduce
        if self.kind in (Kind.GAUGE, Kind.OBSERVABLE_GAUGE):
            return MEAN
        return SUM

    @property
    def open_attributes(self) -> bool:
        """Whether any key is open, so the series count needs the ``max_series`` cap."""
        return any(allowed is None for _, allowed in self.attributes)

    def conflicts_with(self, other: MetricSpec) -> list[str]:
        """The fields in which two specs for the same name or key disagree."""
        return [
            field
            for field in (
                "name",
                "kind",
                "unit",
                "description",
                "key",
                "attributes",
                "buckets",
                "reduce",
            )
            if getattr(self, field) != getattr(other, field)
        ]

    def describe(self) -> dict[str, Any]:
        """A JSON-friendly view of the spec, for docs and ``rlmetrics plugins``."""
        return {
            "name": self.name,
            "kind": self.kind.value,
            "unit": self.unit,
            "description": self.description,
            "key": self.key,
            "attributes": {
                key: (None if allowed is None else sorted(allowed))
                for key, allowed in self.attributes
            },
            "buckets": list(self.buckets) if self.buckets is not None else None,
            "reduce": self.reduction.describe(),
        }
