"""The regression judgement's per-step values as they were taken before they were held
compactly: each step's time and each grouped series' value per step as Python floats in
dicts (a copy of ``StepTimes`` as it was). The compact ones are held equal to these (a
hypothesis property), so holding them in arrays changed what a long run costs in memory,
not what the judgement answers."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from rlmetrics.events import TRAIN_PREFIXES, WALL_TIME_KEY
from rlmetrics.report import numbers
from rlmetrics.report.regressions import _STEP_WALL_KEY, Series, _classify, _number

__all__ = ["DictStepTimes"]


class DictStepTimes:
    """``StepTimes`` as it was: dicts of Python floats."""

    def __init__(self) -> None:
        self._walls: dict[int, float] = {}
        self._first_time: dict[int, float] = {}
        self._sums: dict[Series, dict[int, float | list[float]]] = {}

    def add(self, row: Mapping[str, Any]) -> None:
        metrics, step, prefix = row.get("metrics"), row.get("step"), row.get("prefix", "")
        if not isinstance(metrics, Mapping) or not isinstance(step, int) or isinstance(step, bool):
            return
        if WALL_TIME_KEY in metrics or not isinstance(prefix, str):
            return
        if prefix in TRAIN_PREFIXES:
            wall = _number(metrics.get(_STEP_WALL_KEY))
            if wall is not None and wall > 0:
                self._walls[step] = wall
            logged = _number(row.get("time"))
            if logged is not None and step not in self._first_time:
                self._first_time[step] = logged
        for key, value in metrics.items():
            series = _classify(prefix, str(key))
            number = _number(value)
            if series is not None and number is not None:
                by_step = self._sums.setdefault(series, {})
                held = by_step.get(step)
                if held is None:
                    by_step[step] = number
                elif isinstance(held, list):
                    held.append(number)
                else:
                    by_step[step] = [held, number]

    def per_step(self) -> tuple[dict[int, float], str | None, dict[Series, dict[int, float]]]:
        values: dict[Series, dict[int, float]] = {}
        for series, by_step in self._sums.items():
            means = {
                step: numbers.mean(v) if isinstance(v, list) else v
                for step, v in sorted(by_step.items())
            }
            if series.cumulative:
                ordered = sorted(means)
                means = {b: means[b] - means[a] for a, b in itertools.pairwise(ordered)}
            values[series] = means
        if self._walls:
            return self._walls, _STEP_WALL_KEY, values
        first_time = self._first_time
        ordered = sorted(first_time)
        gaps = {
            b: first_time[b] - first_time[a]
            for a, b in itertools.pairwise(ordered)
            if first_time[b] > first_time[a]
        }
        return gaps, ("time between logged steps" if gaps else None), values
