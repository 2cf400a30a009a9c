"""MetricSpec: one declared series, validated when it is built.

A spec is the single source of truth for a series: the module that logs a key declares the
spec from the same constant, so a rename cannot orphan the series. Everything that can be
checked without OpenTelemetry is checked here, at construction, with a message that names
the spec and the field to change.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

__all__ = [
    "OPEN",
    "Kind",
    "MetricSpec",
    "Observation",
    "SpecError",
]

#: Marks an attribute key whose values are not a closed set; the spec's ``max_series`` caps it.
OPEN: None = None

#: What an observable callback yields: a value and the attributes it carries.
Observation = tuple[float, Mapping[str, str]]


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


# OTel API instrument-name syntax: a letter, then up to 254 of [A-Za-z0-9_.-/].
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-/]{0,254}")
# UCUM-ish: up to 63 printable ASCII characters without spaces; braces balanced, not nested.
_UNIT = re.compile(r"(?:[!-z|~]|\{[!-z|~]*\})*")
_DEFAULT_MAX_SERIES = 100

AttributeDecl = tuple[tuple[str, "frozenset[str] | None"], ...]


def _freeze_attributes(
    value: Mapping[str, Iterable[str] | None] | AttributeDecl | None,
) -> AttributeDecl:
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    frozen = []
    for key, allowed in items:
        if allowed is not None:
            if isinstance(allowed, str):
                raise SpecError(
                    f"attribute {key!r}: the allowed values must be a collection of strings, "
                    f"got the single string {allowed!r} (wrap it in a set)"
                )
            allowed = frozenset(allowed)
        frozen.append((key, allowed))
    return tuple(sorted(frozen, key=lambda kv: kv[0]))


def _freeze_buckets(value: Iterable[float] | None) -> tuple[float, ...] | None:
    return None if value is None else tuple(float(b) for b in value)


@attrs.frozen(eq=True)
class MetricSpec:
    """One declared series.

    ``attributes`` maps each allowed attribute key to a closed set of values, or to
    :data:`OPEN` for an open key; a metric with any open key is capped at ``max_series``
    distinct attribute sets. ``key`` is what callers record against (defaults to the name).
    ``buckets`` are explicit histogram boundaries; ``callback`` feeds an observable kind and
    returns an iterable of ``(value, attributes)`` pairs.
    """

    name: str
    kind: Kind = attrs.field(converter=Kind)
    unit: str = "1"
    description: str = ""
    key: str = attrs.field(default=attrs.Factory(lambda self: self.name, takes_self=True))
    attributes: AttributeDecl = attrs.field(default=(), converter=_freeze_attributes)
    max_series: int = _DEFAULT_MAX_SERIES
    buckets: tuple[float, ...] | None = attrs.field(default=None, converter=_freeze_buckets)
    callback: Callable[[], Iterable[Observation]] | None = attrs.field(default=None, eq=False)

    def __attrs_post_init__(self) -> None:
        problem = self._problem()
        if problem:
            field, message = problem
            raise SpecError(f"MetricSpec {self.name!r}: field {field!r}: {message}")

    def _problem(self) -> tuple[str, str] | None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            return "name", (
                "must start with a letter and hold at most 255 characters from "
                "[A-Za-z0-9_.-/] (OpenTelemetry instrument-name syntax)"
            )
        if not isinstance(self.unit, str) or len(self.unit) > 63 or not _UNIT.fullmatch(self.unit):
            return "unit", (
                f"{self.unit!r} is not a UCUM unit: at most 63 printable ASCII characters, no "
                "spaces, annotations in balanced braces (for example 's', 'By', '{token}', '1')"
            )
        if not isinstance(self.description, str):
            return "description", "must be a string"
        if not isinstance(self.key, str) or not self.key:
            return "key", "must be a non-empty string"
        for attr_key, allowed in self.attributes:
            if not isinstance(attr_key, str) or not attr_key:
                return "attributes", f"attribute keys must be non-empty strings, got {attr_key!r}"
            if allowed is not None and (
                not allowed or not all(isinstance(v, str) for v in allowed)
            ):
                return "attributes", f"{attr_key!r} must allow a non-empty set of strings"
        if not isinstance(self.max_series, int) or self.max_series < 1:
            return "max_series", "must be a positive int"
        if self.buckets is not None:
            if self.kind is not Kind.HISTOGRAM:
                return "buckets", f"only a histogram takes buckets, this is a {self.kind.value}"
            if not self.buckets or not all(math.isfinite(b) for b in self.buckets):
                return "buckets", "must be a non-empty sequence of finite numbers"
            if any(a >= b for a, b in zip(self.buckets, self.buckets[1:], strict=False)):
                return "buckets", "must be strictly increasing"
        if self.kind.observable:
            if not callable(self.callback):
                return "callback", f"a {self.kind.value} needs a callable that yields observations"
        elif self.callback is not None:
            return "callback", (
                f"only observable kinds take a callback; record a {self.kind.value} with "
                "rlmetrics.record() instead"
            )
        return None

    @property
    def attribute_keys(self) -> frozenset[str]:
        return frozenset(key for key, _ in self.attributes)

    @property
    def open_attributes(self) -> bool:
        """Whether any key is open, so the series count needs the ``max_series`` cap."""
        return any(allowed is None for _, allowed in self.attributes)

    def conflicts_with(self, other: MetricSpec) -> list[str]:
        """The fields in which two specs for the same name or key disagree."""
        return [
            field
            for field in ("name", "kind", "unit", "description", "key", "attributes", "buckets")
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
        }
