"""What a logged value stands for, and whether a point can be exported.

One conversion serves the registry, the backends and the families: a training loop logs Python
numbers, NumPy and torch scalars, one-element arrays, lists and tensors, and every consumer
must read them the same way. Nothing here raises: a value whose conversion raises (a
``.item()`` that fails, a ``__float__`` that overflows) simply stands for nothing.
"""

from __future__ import annotations

import math
import numbers
import re
import threading
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ._warn import describe_key, describe_value, warn_once
from .spec import MetricSpec
from .storable import utf8_text

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "OTHER",
    "AttributeSet",
    "Attributes",
    "BoundedValues",
    "as_number",
    "as_plain",
    "as_real",
    "as_step",
    "attribute_set",
    "check_attributes",
    "encodable",
    "finite_float",
    "first_elements",
    "key_attribute",
    "readable_items",
]

AttributeSet = frozenset[tuple[str, str | int]]
#: What ``record`` takes as attributes: a mapping, or an attribute set (a frozenset of
#: ``(key, value)`` pairs) a caller prepared once to skip building it on every call. Values
#: are strings; an open attribute's may be an int (``http.response.status_code``).
Attributes = Mapping[str, str | int] | AttributeSet | None

#: What an integer point can carry: OTLP encodes integer points as int64.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_NOT_SCALARS = (str, bytes, bytearray)
_PLAIN = frozenset({float, int, bool, str, type(None)})


def as_step(value: Any) -> int | None:
    """A trainer step as an int, or None when ``value`` is not one: a step is an integer from
    0 to int64's largest — a Python int or any integer with ``__index__`` (a NumPy or torch
    integer scalar), never a bool, a float or a string. Never raises."""
    if type(value) is int:
        number = value
    elif isinstance(value, bool):
        return None
    else:
        try:
            number = int(value.__index__())
        except Exception:
            return None
    return number if 0 <= number <= INT64_MAX else None


def as_real(value: Any) -> int | float | None:
    """The real number ``value`` stands for, NaN and infinities included, or None.

    Python ints and floats as they are; other reals (``Fraction``, NumPy scalars) through
    ``int()`` or ``float()``, a ``Decimal`` through ``float()``; one-element NumPy arrays and
    torch tensors through ``.item()``.
    Bools are not numbers here (a flag is not a measurement); neither are strings or bytes.
    """
    kind = type(value)
    if kind is float or kind is int:  # the hot path: plain numbers from a training dict
        return value  # type: ignore[no-any-return]
    if value is None or kind is bool or isinstance(value, _NOT_SCALARS):
        return None  # (None first: an absent key, looked up every step, skips the ABC checks)
    try:
        if kind is Decimal or isinstance(value, Decimal):
            # Not a numbers.Real (it refuses to mix with floats), but the number a user logs
            # (money, a config parsed with parse_float=Decimal): a float, NaN and infinities
            # as a float's; a signalling NaN, which float() refuses, stands for nothing.
            return float(value)
        if not isinstance(value, numbers.Real):
            item = getattr(value, "item", None)
            if not callable(item):
                return None
            value = item()  # raises for an array of more than one element
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                return None
        return int(value) if isinstance(value, numbers.Integral) else float(value)
    except Exception:
        return None


def as_number(value: Any) -> int | float | None:
    """The finite real number ``value`` stands for, or None (see :func:`as_real`)."""
    kind = type(value)
    if kind is float:  # the hot path, without a call: finite unless x - x is not 0
        return value if value - value == 0 else None  # type: ignore[no-any-return]
    if kind is int:
        return value  # type: ignore[no-any-return]
    number = as_real(value)
    if type(number) is float and not math.isfinite(number):
        return None
    return number


def finite_float(value: Any) -> float | None:
    """``value`` as a finite float, or None: a finite real number (see :func:`as_number`)
    that a float can hold. An int past float's range is not one: Prometheus' parser gives a
    sample of hundreds of digits as such an int, and ``float()`` of it raises."""
    number = as_number(value)
    if number is None:
        return None
    try:
        return float(number)
    except OverflowError:
        return None


def encodable(number: int | float) -> bool:
    """Whether an exporter can carry ``number`` as a point: an int within int64, or a finite
    float (``as_number`` gives only those floats). One out-of-range int would otherwise make
    every later OTLP export of its instrument fail to encode."""
    return type(number) is not int or INT64_MIN <= number <= INT64_MAX


def first_elements(value: Any, keep: int) -> Any:
    """A sequence or array longer than ``keep`` as its first ``keep`` elements (its own
    slice: an array stays an array), before converting it: converting ten million values to
    keep a few thousand costs seconds. Text, a mapping, or a value without a length or a
    slice, as it is."""
    if isinstance(value, (*_NOT_SCALARS, Mapping)):
        return value
    try:
        if len(value) > keep:
            return value[:keep]
    except Exception:  # no length (a scalar, a 0-d array) or no slice: as it is
        pass
    return value


def as_plain(value: Any) -> Any:
    """The plain Python form of a NumPy or torch value: a scalar or one-element array through
    ``.item()``, a longer array or tensor through ``.tolist()`` (one conversion, not one
    ``.item()`` per element); any other value, or one whose conversion raises, as it is."""
    if type(value) in _PLAIN or isinstance(value, (*_NOT_SCALARS, list, tuple, Mapping)):
        return value
    for method in ("item", "tolist"):
        try:  # getattr too: a property that raises is as broken as a method that does
            convert = getattr(value, method, None)
            if callable(convert):
                return convert()
        except Exception:
            continue
    return value


def readable_items(node: Mapping[Any, Any]) -> list[tuple[Any, Any]]:
    """A mapping's items, each read in its own guard: a mapping that raises on one entry (an
    OmegaConf ``DictConfig`` with a ``???`` field) costs that entry only."""
    if type(node) is dict:
        return list(node.items())
    try:
        keys = list(node)
    except Exception:
        warn_once(
            "flatten:unreadable",
            f"rlmetrics: a logged {type(node).__name__} could not be iterated; it is skipped",
        )
        return []
    entries = []
    for key in keys:
        try:
            entries.append((key, node[key]))
        except Exception:
            warn_once(
                "flatten:unreadable-entry",
                f"rlmetrics: an entry of a logged {type(node).__name__} could not be read; it "
                "is skipped and the rest of the dict is logged",
            )
    return entries


_KEY_ATTRIBUTE = re.compile(r"[A-Za-z0-9_./-]{1,64}")


def key_attribute(name: str, what: str | None = None) -> str | None:
    """``name`` (derived from a logged key: a setup phase, a checkpoint phase) if it is safe as
    an attribute value — at most 64 characters of ``[A-Za-z0-9_./-]`` — else None, reported
    once per ``what`` (``"setup phase"``) when given.

    A logged key is data: it may be long, carry whitespace or even a secret by mistake. A value
    outside this charset is not exported, and its warning gives its length, never its text.
    """
    if type(name) is str and _KEY_ATTRIBUTE.fullmatch(name):
        return name
    if what is not None:
        warn_once(
            f"key-attribute:{what}",
            f"rlmetrics: a {what} name ({describe_value(name)}) is not a safe attribute value "
            "(up to 64 of [A-Za-z0-9_./-]); not exported (the backends keep its key). Later "
            "ones are reported at DEBUG",
        )
    return None


#: The attribute value a :class:`BoundedValues` gives every value past its limit.
OTHER = "other"


class BoundedValues:
    """An open attribute's values kept bounded: the first ``limit`` distinct values stand for
    themselves, every later one for ``overflow`` (``other``).

    What a family uses when its attribute values come from logged keys (reward components,
    dataset names): the series stays within its cap and an export still says that values
    were folded, where dropping them would make a sum over the attribute undercount
    silently. Memory holds at most ``limit`` values, however many distinct ones arrive.
    """

    __slots__ = ("_lock", "_seen", "limit", "overflow")

    def __init__(self, limit: int, overflow: str = OTHER) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"BoundedValues: limit must be a positive int, got {limit!r}")
        self.limit = limit
        self.overflow = overflow
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        """``value`` if it is among the first ``limit`` distinct values, else ``overflow``."""
        if value in self._seen:  # the every-step case, without the lock
            return value
        with self._lock:
            if value not in self._seen:
                if len(self._seen) >= self.limit:
                    return self.overflow
                self._seen.add(value)
        return value

    def __len__(self) -> int:
        return len(self._seen)

    def clear(self) -> None:
        """Forget the values admitted so far (a new telemetry session starts over)."""
        with self._lock:
            self._seen = set()


def attribute_set(attributes: Attributes) -> AttributeSet:
    """The hashable attribute set ``attributes`` stands for (raises on an unhashable value)."""
    if isinstance(attributes, frozenset):
        return attributes
    return frozenset((attributes or {}).items())


def check_attributes(
    spec: MetricSpec, attributes: Any
) -> tuple[AttributeSet, dict[str, str | int]] | str:
    """``(hashable key, attributes)`` for an attribute set the spec allows, else why not.

    Only the declaration is checked here; the spec's ``max_series`` cap is the binding's.
    """
    if not attributes:
        return frozenset(), {}
    if not isinstance(attributes, Mapping):
        return f"attributes must be a mapping, got {type(attributes).__name__}"
    allowed = dict(spec.attributes)
    for attr, value in attributes.items():
        if attr not in allowed:
            declared = sorted(allowed) or "none"
            return f"attribute {describe_key(attr)} is not declared (declared: {declared})"
        closed = allowed[attr]
        if not isinstance(value, str) and not (closed is None and type(value) is int):
            # An open attribute may be an int, as semantic conventions type some
            # (http.response.status_code, process.pid); a closed set is strings.
            wanted = "a string" if closed is not None else "a string or an int"
            return f"attribute {attr!r} must be {wanted}, got {type(value).__name__}"
        if closed is not None and value not in closed:
            return f"attribute {attr!r} has a value outside its closed set {sorted(closed)}"
        if type(value) is str and utf8_text(value)[1]:
            # A name decoded with surrogateescape (a file name that is no UTF-8): no exporter
            # can encode it, and the Prometheus endpoint's every scrape would fail with it.
            return f"attribute {attr!r} has a value that is no UTF-8 text: {value!r}"
    plain = dict(attributes)
    return frozenset(plain.items()), plain
