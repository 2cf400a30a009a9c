"""How the text report prints a number: fixed decimals, and a short form past a billion.

A logged value may be any finite float (1e308 is one): with fixed decimals it would print as
a 309-digit number and push the per-step table and its lines hundreds of characters wide.
"""

from __future__ import annotations

__all__ = ["FIXED_BELOW", "fixed"]

#: Magnitudes printed with fixed decimals; from here on, four significant digits.
FIXED_BELOW = 1e9


def fixed(value: float, digits: int = 1) -> str:
    """``value`` with ``digits`` decimals (``12.5``); past :data:`FIXED_BELOW`, and for inf or
    NaN, in four significant digits (``1e+308``)."""
    if abs(value) < FIXED_BELOW:
        return f"{value:.{digits}f}"
    return f"{value:.4g}"
