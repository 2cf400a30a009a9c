"""Which x-axis each W&B series is plotted against, and the ``define_metric`` calls for it.

W&B's own ``step`` is a history-row counter that must only grow: a row logged with a smaller
``step=`` is dropped ("Steps must be monotonically increasing"). rlmetrics therefore never
passes ``step=``; every row carries its axis as an ordinary value instead:

* a dict that carries ``telemetry/wall_time_seconds`` (Unix time) is an independent event
  stream (rlmetrics stamps the rollout-checkpoint streams with it) and its keys are bound to
  that axis, so they run on through a long or paused trainer step and across a restart;
* every other dict is trainer-correlated: it carries ``rlmetrics/step`` (the trainer step),
  and its keys are bound to it with ``define_metric(..., step_sync=True)``.

The signal is the dict's own content, so this backend names no family. Keys are bound one by
one on first sight, never by glob: a glob chosen early (``timing/*``) could later claim a key
of the other axis (``timing/rollout_checkpoint/...``), and W&B's glob precedence would decide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rlmetrics.events import STEP_KEY, WALL_TIME_KEY

__all__ = ["AXES", "StepAxes"]

DefineMetric = Callable[..., Any]
#: The axis keys themselves: plain metrics, selectable as x-axes.
AXES = (STEP_KEY, WALL_TIME_KEY)


class StepAxes:
    """Remembers which keys are bound and binds each new one to its dict's axis."""

    def __init__(self, define_metric: DefineMetric) -> None:
        self._define = define_metric
        self._bound: set[str] = set()
        # Defining the axes first makes them selectable as x-axes before any series uses them.
        for axis in AXES:
            self._define(axis)

    def bind(self, keys: Iterable[str], axis: str) -> None:
        """Bind every new key among ``keys`` (full names) to ``axis``."""
        for key in keys:
            if key in AXES or key in self._bound:
                continue
            self._bound.add(key)
            if axis == STEP_KEY:
                self._define(key, step_metric=STEP_KEY, step_sync=True)
            else:
                self._define(key, step_metric=axis)
