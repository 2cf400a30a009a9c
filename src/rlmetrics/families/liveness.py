"""Liveness: the newest trainer step, when it arrived, and how long steps usually take.

A run that stalls (a hung collective, a dead rollout server, a deadlocked data loader) keeps
its process and its metrics endpoint alive, and every gauge keeps showing its last value: from
the outside it looks like a run that is merely slow. These series tell the two apart:

- ``rl.step.number``: the newest trainer step logged;
- ``rl.step.last_timestamp``: when it was first logged (Unix seconds), so
  ``time() - rl_step_last_timestamp_seconds`` is how long the run has been silent;
- ``rl.step.interval.median``: the median time between consecutive logged steps over the last
  20 of them, published only once 20 are known (a median from fewer cannot be told from noise:
  the efficiency family's rule, p50 from at least 20 values).

A step is any dict the training loop logs with a trainer step higher than the newest one seen
in this telemetry session, whatever its prefix, except the setup phases (step 0 by convention)
and the wall-clock streams (rollout checkpoints, which carry ``telemetry/wall_time_seconds``
and count samples, not steps). Logging step 7 again, or an older step from a sampler thread,
changes nothing. A step's efficiency summary is a step too: a loop timed with
``rlmetrics.step(n)`` and no Logger delivers only that. The state is
:mod:`rlmetrics.liveness`'s, which the Prometheus endpoint's health path reads too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import hookimpl, stall_watch
from ..events import SETUP_TIMING_PREFIX, WALL_TIME_KEY
from ..liveness import MEDIAN_WINDOW, liveness
from ..registry import declare, record
from ..spec import MAX, MIN, Kind, MetricSpec
from ..values import as_number

if TYPE_CHECKING:
    from ..events import EfficiencySummary
    from ..telemetry import Telemetry

__all__ = [
    "GROUP",
    "is_trainer_step",
    "INTERVAL_MEDIAN",
    "LAST_TIMESTAMP",
    "NUMBER",
    "log_metrics",
    "telemetry_started",
    "telemetry_stopping",
]

GROUP = "rl.step"
NUMBER = "rl.step.number"
LAST_TIMESTAMP = "rl.step.last_timestamp"
INTERVAL_MEDIAN = "rl.step.interval.median"

declare(
    GROUP,
    [
        MetricSpec(
            NUMBER,
            Kind.GAUGE,
            unit="{step}",
            description="The newest trainer step the training loop logged",
            reduce=MIN,
        ),
        MetricSpec(
            LAST_TIMESTAMP,
            Kind.GAUGE,
            unit="s",
            description="When the newest trainer step was first logged, in Unix seconds: "
            "time() minus it is how long the run has been silent",
            reduce=MIN,
        ),
        MetricSpec(
            INTERVAL_MEDIAN,
            Kind.GAUGE,
            unit="s",
            description=f"Median time between consecutive logged steps over the last "
            f"{MEDIAN_WINDOW}; absent until {MEDIAN_WINDOW} intervals are known",
            reduce=MAX,
        ),
    ],
)


def is_trainer_step(metrics: Mapping[str, Any], prefix: str) -> bool:
    """Whether a dict logged at a step counts as a trainer step: not the setup phases (step 0
    by convention) and not a wall-clock stream (rollout checkpoints, which carry
    ``telemetry/wall_time_seconds`` and number their events by a counter of their own). The
    one rule /health, ``RLStepStalled`` and ``rlmetrics query`` apply."""
    return prefix != SETUP_TIMING_PREFIX and WALL_TIME_KEY not in metrics


def _as_step(step: Any) -> int | None:
    number = as_number(step)
    return None if number is None else int(number)


@hookimpl(tee=True)
def log_metrics(metrics: Mapping[str, Any], step: Any, prefix: str) -> None:
    # Called for every logged dict: the common case (another dict of the current step) costs
    # one comparison.
    if step.__class__ is not int:
        step = _as_step(step)
        if step is None:
            return
    if step <= liveness.step or not is_trainer_step(metrics, prefix):
        return
    liveness.advance(step, _publish)


@hookimpl(tee=True)
def on_efficiency_summary(summary: EfficiencySummary, step: int) -> None:
    # A step that ended (``rlmetrics.step(n)`` without a Logger reaches no log_metrics) is a
    # trainer step; through a Logger its dict was one already, and this changes nothing.
    if step.__class__ is int and step > liveness.step:
        liveness.advance(step, _publish)


def _publish(step: int, arrived: float, interval_median_s: float | None) -> None:
    values: dict[str, float] = {NUMBER: step, LAST_TIMESTAMP: arrived}
    if interval_median_s is not None:
        values[INTERVAL_MEDIAN] = interval_median_s
    record(GROUP, values)


@hookimpl
def telemetry_started(telemetry: Telemetry) -> None:
    liveness.reset()
    # Steps reach the liveness state only while telemetry exports (log_metrics is a tee):
    # without a reader every silence would look like a stall.
    stall_watch.watch(telemetry.exporting)


@hookimpl
def telemetry_stopping() -> None:
    stall_watch.watch(False)
