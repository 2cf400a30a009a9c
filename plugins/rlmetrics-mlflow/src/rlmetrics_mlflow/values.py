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
import statistics
from collections.abc import Iterator, Mapping
from typing import Any

from rlmetrics import as_plain, as_real
from rlmetrics.values import finite_float

__all__ = ["LIST_SUMMARIES", "Skipped", "metric_values"]

#: Summary suffixes for a logged list, in the order they are written.
LIST_SUMMARIES = ("mean", "p50", "p90", "max")


class Skipped:
    """A value MLflow cannot take; ``reason`` says why, for the one warning."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _scalar(plain: Any) -> float | Skipped | None:
    """The float a plain value stands for (bools as 0/1, NaN kept), Skipped for a number no
    float holds, or None."""
    if isinstance(plain, bool):
        return float(plain)
    number = as_real(plain)
    if number is None:
        return None
    try:
        return float(number)
    except OverflowError:
        return Skipped("an int past float's range")


def _summaries(elements: list[Any]) -> dict[str, float] | None:
    finite = sorted(n for e in elements if (n := finite_float(e)) is not None)
    if not finite:
        return None
    # Deciles by linear interpolation between the closest ranks (NumPy's default percentile);
    # one element is its own every percentile.
    deciles = statistics.quantiles(finite, n=10, method="inclusive") if len(finite) > 1 else None
    return {
        "mean": math.fsum(finite) / len(finite),
        "p50": deciles[4] if deciles else finite[0],
        "p90": deciles[8] if deciles else finite[0],
        "max": finite[-1],
    }


def metric_values(metrics: Mapping[str, Any]) -> Iterator[tuple[str, float | Skipped]]:
    """``(key, float)`` for each value MLflow can take, ``(key, Skipped)`` for the rest.

    A list yields its summaries under ``key/<summary>``; ``None`` yields nothing.
    """
    for key, value in metrics.items():
        if value is None:
            continue
        plain = as_plain(value)
        number = _scalar(plain)
        if number is not None:
            yield key, number
            continue
        if isinstance(plain, (list, tuple)):
            elements = list(plain)
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
