"""Which x-axis each W&B series is plotted against, and the ``define_metric`` calls for it.

W&B's own ``step`` is a history-row counter that must only grow: a row logged with a smaller
``step=`` is dropped ("Steps must be monotonically increasing"). rlmetrics therefore never
passes ``step=``; every row carries its axis as an ordinary value instead:

* trainer-correlated dicts carry ``rlmetrics/step`` (the trainer step), and their keys are
  bound to it with ``define_metric(..., step_metric="rlmetrics/step", step_sync=True)``;
* the rollout-checkpoint streams (:data:`rlmetrics.events.ROLLOUT_EVENT_TYPES`) carry
  ``telemetry/wall_time_seconds`` (Unix time) and are bound to it, so they run on through a
  long or paused trainer step and across a restart without bending the trainer axis.

Bindings use the prefix glob ``<prefix>/*`` where it cannot also match a rollout stream, and
the exact key otherwise (a dict logged with an empty prefix, or a prefix such as ``timing``
whose glob would swallow ``timing/rollout_checkpoint/*``), so no key is ever claimed by two
globs and W&B's glob precedence never matters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rlmetrics.events import ROLLOUT_EVENT_TYPES, STEP_KEY, WALL_TIME_KEY

__all__ = ["StepAxes"]

DefineMetric = Callable[..., Any]


class StepAxes:
    """Remembers what has been bound and binds new prefixes and keys on first sight."""

    def __init__(self, define_metric: DefineMetric, rollout_prefixes: Iterable[str] | None = None):
        self._define = define_metric
        self.rollout_prefixes = frozenset(
            ROLLOUT_EVENT_TYPES if rollout_prefixes is None else rollout_prefixes
        )
        self._globs: set[str] = set()
        self._keys: set[str] = set()
        # The axes themselves are plain metrics; defining them first makes them selectable
        # as x-axes before any series uses them.
        self._define(STEP_KEY)
        self._define(WALL_TIME_KEY)
        for prefix in sorted(self.rollout_prefixes):
            self._define(f"{prefix}/*", step_metric=WALL_TIME_KEY)

    def is_rollout(self, prefix: str) -> bool:
        return prefix in self.rollout_prefixes

    def _glob_is_safe(self, prefix: str) -> bool:
        """``prefix/*`` matches no rollout stream's keys (and is not one)."""
        return bool(prefix) and not any(
            rollout == prefix or rollout.startswith(prefix + "/")
            for rollout in self.rollout_prefixes
        )

    def bind(self, prefix: str, keys: Iterable[str]) -> None:
        """Bind a trainer-correlated dict's keys (full names) to ``rlmetrics/step``."""
        if self._glob_is_safe(prefix):
            if prefix not in self._globs:
                self._globs.add(prefix)
                self._define(f"{prefix}/*", step_metric=STEP_KEY, step_sync=True)
            # Axis keys in the dict are unprefixed, so the glob does not cover them.
            keys = (key for key in keys if not key.startswith(prefix + "/"))
        for key in keys:
            if key in (STEP_KEY, WALL_TIME_KEY) or key in self._keys:
                continue
            if any(key.startswith(rollout + "/") for rollout in self.rollout_prefixes):
                continue  # already on the wall-clock axis by its stream's glob
            self._keys.add(key)
            self._define(key, step_metric=STEP_KEY, step_sync=True)
