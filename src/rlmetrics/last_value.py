"""A gauge's last value per attribute set, as the collection reads it.

A gauge's table holds one per attribute set, and a step writes a number into it rather than
building a new object: the training loop's thread does the least it can per point. Every
collection of every reader reads ``current`` (``_providers``' gauge producer); a write racing
it gives the newer value or the older one, whole, either being the gauge's last value.
"""

from __future__ import annotations

__all__ = ["LastValue"]


class LastValue:
    """One attribute set's last value: ``current``, overwritten in place, and its attributes
    (None for none)."""

    __slots__ = ("attributes", "current")

    def __init__(self, value: int | float, attributes: dict[str, str | int] | None) -> None:
        self.current = value
        self.attributes = attributes
