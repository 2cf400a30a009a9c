"""tensorboard_value: every logged value maps to one kind TensorBoard shows, or is skipped."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rlmetrics_tensorboard.values import HISTOGRAM, SCALAR, SKIP, TEXT, tensorboard_value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, (SCALAR, 1.0)),
        (True, (SCALAR, 1.0)),
        ("warmup", (TEXT, "warmup")),
        ([1, None, math.nan, 2.5, True], (HISTOGRAM, [1.0, 2.5])),
        ([], (SKIP, None)),
        (None, (SKIP, None)),
        (Path("/x"), (SKIP, "a PosixPath value")),
        # float() of these raised OverflowError, which lost the whole row.
        pytest.param(10**400, (SKIP, "an int past float's range"), id="int-past-float"),
        pytest.param([1, -(10**400), 2.5], (HISTOGRAM, [1.0, 2.5]), id="list-int-past-float"),
    ],
)
def test_each_kind_of_value(value: Any, expected: tuple[str, Any]) -> None:
    assert tensorboard_value(value) == expected


def test_numpy_values() -> None:
    np = pytest.importorskip("numpy")
    assert tensorboard_value(np.float32(0.5)) == (SCALAR, 0.5)
    assert tensorboard_value(np.arange(3)) == (HISTOGRAM, [0.0, 1.0, 2.0])


_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(), st.builds(object)),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner),
    max_leaves=10,
)


@given(_values)
def test_every_value_maps_to_one_kind(value: Any) -> None:
    kind, payload = tensorboard_value(value)
    if kind == SCALAR:
        assert isinstance(payload, float)
    elif kind == TEXT:
        assert isinstance(payload, str)
    elif kind == HISTOGRAM:
        assert payload and all(isinstance(x, float) and math.isfinite(x) for x in payload)
    else:
        assert kind == SKIP and (payload is None or isinstance(payload, str))
