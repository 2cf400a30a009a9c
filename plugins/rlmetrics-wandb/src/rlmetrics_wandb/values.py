"""What a logged value becomes in a W&B history row.

W&B users expect ``wandb.log`` semantics, so values go through as they are wherever W&B takes
them: numbers, bools and strings as themselves, NaN and ±inf as NaN/Infinity (a diverging loss
stays visible), lists as lists, NumPy arrays and torch tensors by W&B's own rules (over 32
elements they become histograms), W&B media objects (``wandb.Image``, ``wandb.Histogram``…)
untouched. Two exceptions:

* ``None`` is skipped: nothing was measured, and a null would break a chart's line;
* a value ``wandb.log`` cannot serialise (any other object) would make W&B refuse the whole
  row, so it is logged as its ``str()`` instead;
* an int past int64 (a hash-like id) is its text: W&B keeps an int64 exactly but writes a
  wider one as a double, rounded (``2**64 + 1`` as ``1.8446744073709552e+19``; ``10**400``
  as Infinity). The backend says so once (:data:`WIDE_INT`).

The run's config (:func:`config_value`) is JSON that W&B reads as doubles: an int past ±2⁵³
would arrive rounded and NaN as null, so those are given as their text, which arrives exactly.
"""

from __future__ import annotations

import math
import numbers
from decimal import Decimal
from typing import Any

from rlmetrics import as_real
from rlmetrics.storable import printable_int

__all__ = ["EXACT_INT", "INT64", "SKIP", "WideInt", "config_value", "to_wandb"]

#: The largest int a double holds exactly: W&B's config stores numbers as doubles.
EXACT_INT = 2**53

#: The ints W&B's history keeps exactly: int64.
INT64 = range(-(2**63), 2**63)


class WideInt(str):
    """An int past :data:`INT64`, as its text (``"<int of N digits>"`` for one too long to
    print): the backend says the first once."""

    __slots__ = ()


#: Returned for a value that should not appear in the row at all.
SKIP: Any = object()

# Packages whose arrays, tensors and scalars wandb converts itself.
_NATIVE_MODULES = ("numpy", "torch", "jax", "jaxlib", "tensorflow", "wandb", "pandas")


def _is_native(value: Any) -> bool:
    module = type(value).__module__ or ""
    return module.split(".", 1)[0] in _NATIVE_MODULES


def to_wandb(value: Any, _depth: int = 0) -> Any:
    """``value`` as ``run.log`` should get it, or :data:`SKIP`."""
    if value is None:
        return SKIP
    if type(value) is int and value not in INT64:
        return WideInt(printable_int(value))
    if isinstance(value, (bool, str, int, float)) or _is_native(value):
        return value
    if isinstance(value, (numbers.Real, Decimal)):  # Fraction, Decimal: JSON needs a float
        # None when float() overflows, an infinity for a finite Decimal no float holds:
        # then the text below, which keeps the number.
        number = as_real(value)
        finite_decimal = isinstance(value, Decimal) and value.is_finite()
        if number is not None and (math.isfinite(number) or not finite_decimal):
            return number
    if isinstance(value, (list, tuple)) and _depth < 8:
        # None stays inside a list (it is a position); odd elements become text.
        return [None if item is None else to_wandb(item, _depth + 1) for item in value]
    try:
        return str(value)
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"


def config_value(value: Any, texts: list[str], key: str = "") -> Any:
    """A plain hyperparameter (from :func:`rlmetrics.hyperparams.to_hyperparams`) as W&B's
    config keeps it exactly: an int past ±2⁵³ and a NaN or infinity as their text (each key
    given so is appended to ``texts``, for the one warning), dicts and lists value by value."""
    if type(value) is int and abs(value) > EXACT_INT:
        texts.append(key)
        return str(value)
    if type(value) is float and not math.isfinite(value):
        texts.append(key)
        return repr(value)
    if isinstance(value, dict):
        return {k: config_value(v, texts, f"{key}/{k}" if key else k) for k, v in value.items()}
    if isinstance(value, list):
        return [config_value(v, texts, f"{key}/{i}") for i, v in enumerate(value)]
    return value
