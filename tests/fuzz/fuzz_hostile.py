"""Hostile values for the fuzz properties: everything a training loop might hand rlmetrics.

None, NaN and infinities, ints past int64 and past Python's 4300-digit string limit, bools,
NumPy scalars and arrays, objects whose ``.item()`` / ``__float__`` / ``__repr__`` raise,
bytes and strings, nested and self-referencing mappings, non-string keys, and mappings that
raise when read.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from hypothesis import strategies as st

__all__ = ["hostile_dicts", "hostile_keys", "hostile_values"]


class ItemRaises:
    @property
    def item(self) -> Any:
        raise RuntimeError("item")


class FloatRaises(float):
    def __float__(self) -> float:
        raise RuntimeError("__float__")


class ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("__repr__")

    __str__ = __repr__


class TolistRaises:
    def item(self) -> Any:
        raise ValueError("more than one element")

    def tolist(self) -> Any:
        raise RuntimeError("tolist")


class RaisingMapping(Mapping[str, Any]):
    """A mapping with one unreadable entry (OmegaConf's ``???``), or one that cannot even be
    iterated."""

    def __init__(self, iterable: bool) -> None:
        self._iterable = iterable

    def __getitem__(self, key: str) -> Any:
        if key == "missing":
            raise KeyError("Missing mandatory value")
        return 1.0

    def __iter__(self) -> Iterator[str]:
        if not self._iterable:
            raise RuntimeError("cannot iterate")
        return iter(["ok", "missing"])

    def __len__(self) -> int:
        return 2


def _looped(inner: dict[Any, Any]) -> dict[Any, Any]:
    inner["self"] = inner
    inner["again"] = inner
    return inner


# Built lazily (st.builds): hypothesis describes a strategy by its elements' repr, and some of
# these refuse to be repr'd.
_broken = st.one_of(
    st.builds(ItemRaises),
    st.builds(FloatRaises, st.just(1.5)),
    st.builds(ReprRaises),
    st.builds(TolistRaises),
    st.builds(RaisingMapping, st.booleans()),
    st.builds(object),
    st.builds(pow, st.just(10), st.just(5000)),  # past the 4300-digit limit: no repr either
)
_odd = st.sampled_from(
    [
        2**63,
        -(2**63) - 1,
        2**64,
        10**400,
        math.nan,
        math.inf,
        -math.inf,
        np.float32(2.5),
        np.int64(7),
        np.bool_(True),
        np.float64("nan"),
        np.array(3.0),
        np.array([1.0]),
        np.array([1.0, 2.0, 3.0]),
        np.zeros((2, 2)),
    ]
)

hostile_values: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.binary(max_size=20),
    st.lists(st.one_of(st.integers(), st.floats(), st.none()), max_size=5),
    _broken,
    _odd,
)

hostile_keys: st.SearchStrategy[Any] = st.one_of(
    st.text(max_size=30),
    st.integers(),
    st.none(),
    st.tuples(st.integers()),
    st.builds(ReprRaises),
    st.sampled_from([1.5, b"bytes"]),
)

hostile_dicts: st.SearchStrategy[dict[Any, Any]] = st.recursive(
    st.dictionaries(hostile_keys, hostile_values, max_size=6),
    lambda children: st.one_of(
        st.dictionaries(hostile_keys, st.one_of(hostile_values, children), max_size=4),
        children.map(_looped),
    ),
    max_leaves=25,
)
