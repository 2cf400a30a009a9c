"""A gauge's last value per attribute set, as the observation its callback hands the SDK.

Imported when telemetry starts (it needs the OpenTelemetry API), never by ``import rlmetrics``.
"""

from __future__ import annotations

from opentelemetry.context import Context
from opentelemetry.metrics import Observation

__all__ = ["LastValue"]


class LastValue(Observation):
    """An observation whose value the recording thread overwrites in place.

    A gauge's table holds one per attribute set, and a step writes a float into it rather than
    building a new observation: the training loop's thread does the least it can per point.
    The collection reads ``value`` when the SDK turns the observation into a measurement; a
    write racing it gives the newer value or the older one, whole, either being the gauge's
    last value.
    """

    def __init__(
        self,
        value: int | float,
        attributes: dict[str, str | int] | None,
        context: Context | None = None,
    ) -> None:
        # With a ``context`` the SDK takes it rather than looking the current one up for
        # each observation of each collection (it reads it only for an exemplar's span).
        super().__init__(value, attributes, context)
        self.current = value

    @property
    def value(self) -> int | float:
        return self.current
