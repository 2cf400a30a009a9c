"""What a logged value becomes in MLflow, whose metrics are one float per (key, step).

* numbers (Python, NumPy, torch 0-d or 1-element) → the float; NaN and ±inf are kept, since
  a diverging loss is exactly what a user needs to see (MLflow stores NaN as NaN and clamps
  ±inf to ±1.797e308 on SQL stores);
* bools → ``1.0`` / ``0.0``, so a flag can be plotted against the step (MLflow itself refuses
  bools as metric values);
* sequences of numbers (lists, tuples, arrays, tensors) → summaries ``key/mean``,
  ``key/p50``, ``key/p90``, ``key/max`` over their finite numeric elements, the way NeMo-RL's
  MLflow logger summarises per-sample lists; an empty list or one without numbers is skipped;
* ``None`` → skipped silently (nothing was measured);
* strings and anything else → skipped with one warning per key: MLflow has no string metric,
  and a run-level param or tag would silently keep only one of the per-step values.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["LIST_SUMMARIES", "Skipped", "metric_values"]

#: Summary suffixes for a logged list, in the order they are written.
LIST_SUMMARIES = ("mean", "p50", "p90", "max")
_MAX_DEPTH = 4


class Skipped:
    """A value MLflow cannot take; ``reason`` says why, for the one warning."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _scalar(value: Any, depth: int = 0) -> float | None:
    """The float a scalar-like value stands for (bools as 0/1), or None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (str, bytes)) or depth >= _MAX_DEPTH:
        return None
    # torch: numel(); NumPy: the int attribute size. Either tells a scalar from an array.
    numel = getattr(value, "numel", None)
    size = numel() if callable(numel) else getattr(value, "size", None)
    if not isinstance(size, int):
        size = None
    item = getattr(value, "item", None)
    # NumPy/torch scalars and one-element arrays or tensors; a longer array is a sequence.
    if callable(item) and (size is None or size == 1):
        try:
            return _scalar(item(), depth + 1)
        except Exception:
            return None
    return None


def _elements(value: Any) -> list[Any] | None:
    """The elements of a list-like value (list, tuple, array, tensor), else None."""
    if isinstance(value, (list, tuple)):
        return list(value)
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and not isinstance(value, (str, bytes)):
        try:
            out = tolist()
        except Exception:
            return None
        return out if isinstance(out, list) else None
    return None


def _percentile(ordered: list[float], q: float) -> float:
    """Linear-interpolation percentile (NumPy's default) of a sorted, non-empty list."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _summaries(elements: list[Any]) -> dict[str, float] | None:
    finite = sorted(
        n for e in elements
        if not isinstance(e, bool) and (n := _scalar(e)) is not None and math.isfinite(n)
    )
    if not finite:
        return None
    return {
        "mean": math.fsum(finite) / len(finite),
        "p50": _percentile(finite, 0.5),
        "p90": _percentile(finite, 0.9),
        "max": finite[-1],
    }


def metric_values(metrics: Mapping[str, Any]) -> Iterator[tuple[str, float | Skipped]]:
    """``(key, float)`` for each value MLflow can take, ``(key, Skipped)`` for the rest.

    A list yields its summaries under ``key/<summary>``; ``None`` yields nothing.
    """
    for key, value in metrics.items():
        if value is None:
            continue
        number = _scalar(value)
        if number is not None:
            yield key, number
            continue
        elements = _elements(value)
        if elements is not None:
            if not elements:
                continue
            summary = _summaries(elements)
            if summary is None:
                yield key, Skipped("a list without finite numbers")
                continue
            for name in LIST_SUMMARIES:
                yield f"{key}/{name}", summary[name]
            continue
        kind = "a string" if isinstance(value, (str, bytes)) else f"a {type(value).__name__} value"
        yield key, Skipped(kind)
