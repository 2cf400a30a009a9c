"""One conversion of logged values, shared by the registry, the backends and the families."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlmetrics.values import as_number, as_plain, as_real, finite_float, key_attribute


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, 1),
        (2.5, 2.5),
        (True, None),
        ("1", None),
        (float("nan"), None),
        (float("-inf"), None),
        (None, None),
        ([1], None),
        (b"1", None),
    ],
)
def test_as_number(value: Any, expected: Any) -> None:
    assert as_number(value) == expected


def test_as_number_takes_item_of_scalar_like_objects() -> None:
    class Scalar:
        def __init__(self, v: Any) -> None:
            self.v = v

        def item(self) -> Any:
            return self.v

    assert as_number(Scalar(3.5)) == 3.5
    assert as_number(Scalar(float("nan"))) is None
    assert as_number(Scalar("s")) is None
    assert as_number(Scalar(True)) is None


class _Raises:
    """An object whose every conversion raises, as a broken tensor wrapper might."""

    def item(self) -> Any:
        raise RuntimeError("item")

    def tolist(self) -> Any:
        raise RuntimeError("tolist")

    def __float__(self) -> float:
        raise RuntimeError("float")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (float("nan"), "nan"),
        (Fraction(3, 2), 1.5),
        (Fraction(10**400), None),  # float() overflows: stands for nothing, never raises
        # A Decimal is a number a user logs (money, a config read with parse_float=Decimal):
        # before, it stood for nothing while a Fraction was a number.
        (Decimal("0.25"), 0.25),
        (Decimal("3"), 3.0),
        (Decimal("NaN"), "nan"),
        (Decimal("-Infinity"), float("-inf")),
        (Decimal("sNaN"), None),  # float() refuses a signalling NaN
        (Decimal("1e400"), float("inf")),
        (_Raises(), None),
        (True, None),
    ],
)
def test_as_real_keeps_non_finite_and_never_raises(value: Any, expected: Any) -> None:
    got = as_real(value)
    assert (str(got) if got != got else got) == expected


def test_as_plain_unwraps_scalars_and_arrays_once() -> None:
    class Array:
        def __init__(self, values: list[Any]) -> None:
            self.values = values

        def item(self) -> Any:
            if len(self.values) != 1:
                raise ValueError("only one element arrays can be converted")
            return self.values[0]

        def tolist(self) -> list[Any]:
            return list(self.values)

    assert as_plain(Array([2.5])) == 2.5
    assert as_plain(Array([1, 2, 3])) == [1, 2, 3]
    raising = _Raises()
    assert as_plain(raising) is raising
    assert as_plain([1, Array([2])])[1].values == [2]  # containers are left to the caller


@given(st.one_of(st.integers(), st.floats(), st.booleans(), st.text(), st.none()))
def test_as_number_is_finite_and_never_a_bool(value: Any) -> None:
    number = as_number(value)
    if number is not None:
        assert not isinstance(number, bool)
        assert number == value and number - number == 0


@given(st.one_of(st.integers(), st.floats(), st.booleans(), st.text(), st.none()))
def test_finite_float_is_the_finite_number_as_a_float(value: Any) -> None:
    number = finite_float(value)
    if number is None:
        # Not a finite number, or an int no float holds ("9" * 400 parsed by Prometheus).
        assert as_number(value) is None or abs(value) > 2.0**1023
    else:
        assert type(number) is float and number - number == 0
        assert number == float(value)


def test_finite_float_leaves_out_an_int_past_floats_range() -> None:
    assert finite_float(int("9" * 400)) is None
    assert finite_float(-(10**400)) is None
    assert finite_float(2**1023) == 2.0**1023


@pytest.mark.parametrize(
    ("name", "safe"),
    [
        ("generation_init", True),
        ("vllm_nccl_sparse_init", True),
        ("idle/validation", True),
        ("tq-save.v2", True),
        ("a" * 64, True),
        ("a" * 65, False),
        ("", False),
        ("api key=sk-123", False),
        ("phase\\n", False),
        ("fäse", False),
    ],
)
def test_key_attribute_values_are_a_safe_charset_and_length(name: str, safe: bool) -> None:
    assert (key_attribute(name) == name) is safe
    assert safe or key_attribute(name) is None


@given(st.text(max_size=100))
def test_key_attribute_never_lets_an_unsafe_value_through(name: str) -> None:
    value = key_attribute(name)
    assert value is None or (value == name and len(value) <= 64 and value.isascii())
