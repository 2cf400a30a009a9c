"""What a logged value becomes in TensorBoard, whose dashboards are scalars, text and
histograms.

* numbers (Python, NumPy, torch scalars) → a scalar; NaN and ±inf are kept (TensorBoard plots
  them at the chart's edge: a diverging loss stays visible);
* bools → a scalar ``1.0`` / ``0.0``;
* strings → text at the step (the Text dashboard);
* lists, tuples, arrays of numbers → a histogram of their finite numbers; an empty one, or one
  without finite numbers, is skipped;
* ``None`` → skipped silently (nothing was measured);
* anything else → skipped, one warning per kind of value.
"""

from __future__ import annotations

from typing import Any

from rlmetrics import as_plain, as_real
from rlmetrics.values import finite_float

__all__ = ["HISTOGRAM", "SCALAR", "SKIP", "TEXT", "tensorboard_value"]

SCALAR, TEXT, HISTOGRAM, SKIP = "scalar", "text", "histogram", "skip"


def tensorboard_value(value: Any) -> tuple[str, Any]:
    """``(SCALAR, float)``, ``(TEXT, str)``, ``(HISTOGRAM, [finite floats])``, or
    ``(SKIP, reason)`` (``reason`` None for a value that is simply absent)."""
    if value is None:
        return SKIP, None
    plain = as_plain(value)
    if isinstance(plain, bool):
        return SCALAR, float(plain)
    if isinstance(plain, str):
        return TEXT, plain
    number = as_real(plain)
    if number is not None:
        try:
            return SCALAR, float(number)
        except OverflowError:
            return SKIP, "an int past float's range"
    if isinstance(plain, (list, tuple)):
        finite = [n for e in plain if (n := finite_float(e)) is not None]
        return (HISTOGRAM, finite) if finite else (SKIP, None)
    return SKIP, f"a {type(value).__name__} value"
