"""metric_values: numbers and bools as floats, lists summarised, the rest skipped."""

from __future__ import annotations

import math
from typing import Any

import pytest
from rlmetrics_mlflow.values import Skipped, metric_values


class _Scalar:
    """Shaped like a NumPy scalar or a 0-d tensor: ``item()`` and ``size == 1``."""

    size = 1

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value


class _Tensor:
    """Shaped like a torch tensor: ``numel()``, ``item()`` only when one element, ``tolist()``."""

    def __init__(self, values: list[float]) -> None:
        self.values = values

    def numel(self) -> int:
        return len(self.values)

    def item(self) -> float:
        if len(self.values) != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return self.values[0]

    def tolist(self) -> list[float]:
        return list(self.values)


def _values(metrics: dict[str, Any]) -> dict[str, Any]:
    return dict(metric_values(metrics))


def test_numbers_bools_and_scalars_become_floats() -> None:
    out = _values(
        {"i": 3, "f": 0.5, "t": True, "n": False, "s": _Scalar(2.5), "one": _Tensor([4.0])}
    )
    assert out == {"i": 3.0, "f": 0.5, "t": 1.0, "n": 0.0, "s": 2.5, "one": 4.0}
    assert all(type(v) is float for v in out.values())


def test_nan_and_infinities_are_kept() -> None:
    out = _values({"nan": math.nan, "inf": math.inf})
    assert math.isnan(out["nan"]) and out["inf"] == math.inf


def test_lists_become_summaries_over_their_finite_numbers() -> None:
    out = _values({"r": [1, 2, 3, 4, math.nan, "x", None, True], "t": _Tensor([1.0, 3.0])})
    assert out == {
        "r/mean": 2.5,
        "r/p50": 2.5,
        "r/p90": pytest.approx(3.7),
        "r/max": 4.0,
        "t/mean": 2.0,
        "t/p50": 2.0,
        "t/p90": pytest.approx(2.8),
        "t/max": 3.0,
    }


def test_an_int_past_floats_range_is_skipped_and_the_rest_lands() -> None:
    # float() of it raised OverflowError, which lost the whole row.
    out = _values({"huge": 10**400, "r": [1, -(10**400), 3], "ok": 2.0})
    assert out.pop("huge").reason == "an int past float's range"
    assert out == {
        "r/mean": 2.0,
        "r/p50": 2.0,
        "r/p90": pytest.approx(2.8),
        "r/max": 3.0,
        "ok": 2.0,
    }


def test_none_and_empty_lists_are_dropped_silently() -> None:
    assert _values({"none": None, "empty": [], "tuple": ()}) == {}


def test_text_and_objects_are_skipped_with_a_reason() -> None:
    out = _values({"s": "hello", "b": b"x", "o": object(), "l": ["a", "b"]})
    assert {k: v.reason for k, v in out.items() if isinstance(v, Skipped)} == {
        "s": "a string",
        "b": "a string",
        "o": "a object value",
        "l": "a list without finite numbers",
    }


def test_numpy_values() -> None:
    np = pytest.importorskip("numpy")
    out = _values({"s": np.float32(1.5), "a": np.array([1.0, 2.0, 3.0]), "b": np.bool_(True)})
    assert out == {
        "s": 1.5,
        "a/mean": 2.0,
        "a/p50": 2.0,
        "a/p90": pytest.approx(2.8),
        "a/max": 3.0,
        "b": 1.0,
    }
