"""The sampling interval the Gym samplers take: a positive, finite number of seconds."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["checked_interval"]


def checked_interval(where: str, interval_s: Any) -> float:
    """``interval_s`` as seconds, or a TypeError / ValueError naming ``where`` and what to pass
    (a bare comparison would fail with Python's own "'>' not supported" for None or text)."""
    is_number = isinstance(interval_s, (int, float)) and not isinstance(interval_s, bool)
    if not is_number or not math.isfinite(interval_s) or interval_s <= 0:
        raise (ValueError if is_number else TypeError)(
            f"{where}: interval_s must be positive (a finite number of seconds), not "
            f"{interval_s!r:.40}"
        )
    return float(interval_s)
