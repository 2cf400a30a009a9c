"""Numbers near float's limit, read and printed without surprise.

A logged value may be any finite float, 1e308 included. Printed with fixed decimals it is a
309-digit number that pushes the per-step table hundreds of characters wide; averaged by
``statistics.fmean`` two of them raise ``OverflowError`` (its exact sum passes the largest
float), and ``statistics.median`` of two gives inf. These helpers keep such a value to
itself: a mean or a median of finite values is finite.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

__all__ = ["FIXED_BELOW", "fixed", "mean", "median", "pstdev"]

#: Magnitudes printed with fixed decimals; from here on, four significant digits.
FIXED_BELOW = 1e9


def fixed(value: float, digits: int = 1) -> str:
    """``value`` with ``digits`` decimals (``12.5``); past :data:`FIXED_BELOW`, and for inf or
    NaN, in four significant digits (``1e+308``)."""
    if abs(value) < FIXED_BELOW:
        return f"{value:.{digits}f}"
    return f"{value:.4g}"


def mean(values: Iterable[float]) -> float:
    """The arithmetic mean (``statistics.fmean``); for values whose sum passes float's
    largest, the mean of the values scaled to at most 1, scaled back: at most the largest
    value, so a mean of finite values is finite. Never outside the values' range (the
    division rounds)."""
    values = list(values)
    try:
        average = statistics.fmean(values)
    except OverflowError:
        largest = max(abs(v) for v in values)
        average = math.fsum(v / largest for v in values) / len(values) * largest
    # fmean's division rounds too: three 1.9s average 1.8999999999999997.
    return min(max(average, min(values)), max(values))


def median(values: Iterable[float]) -> float:
    """The median (``statistics.median``). Of an even count, the midpoint of the two middle
    values as ``low + (high - low) / 2``, which neither passes float's largest for two values
    near it (their sum would: inf) nor loses a subnormal (halving each first would: 0); where
    the gap itself passes it (values of opposite signs near the limit), each is halved."""
    ordered = sorted(values)
    if not ordered:
        raise statistics.StatisticsError("no median for empty data")
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    low, high = ordered[middle - 1], ordered[middle]
    gap = high - low
    midpoint = low + gap / 2 if math.isfinite(gap) else low / 2 + high / 2
    return min(max(midpoint, low), high)


def pstdev(values: Iterable[float]) -> float:
    """The population standard deviation (``statistics.pstdev``); inf where it passes
    float's largest, rather than ``OverflowError``."""
    try:
        return statistics.pstdev(values)
    except OverflowError:
        return math.inf
