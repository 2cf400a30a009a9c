"""Step-time regressions in a run's JSONL: a baseline learnt from the first steps, the steps
that are confirmed slower (not one noisy step), and the series that moved with them.

- **Step time**: ``efficiency/step_wall_time_s`` (the driver's wall clock of each step) when
  the run logs it, else the time between the first rows of consecutive steps.
- **Baseline**: the first :data:`BASELINE_STEPS` steps that have a step time, however long the
  run. Its p50 needs at least 20 values (NeMo-RL's data-plane rule: a percentile only where the
  sample can resolve it), so a run shorter than the baseline plus one confirmation window is
  too short to judge, and says so. A p90 would need 40, and is not read: a baseline of 40
  steps would learn a slowdown that starts in steps 21-40 as normal, and judge nothing before
  step 45.
- **Slow step**: a step time above both ``SLOW_RATIO`` times the baseline p50 and the p50 plus
  ``NOISE_SIGMAS`` robust standard deviations (1.4826 times the baseline's median absolute
  deviation).
- **Confirmed regression**: at least :data:`CONFIRM_SLOW` slow steps within
  :data:`CONFIRM_WINDOW` consecutive steps; overlapping windows merge into one regression,
  from its first slow step to its last.
- **What moved with it**: the series of the families' own groups — ``engine`` (``vllm/*``),
  ``efficiency`` (categories, by measurement), ``host memory`` and ``gpu`` (``ray/node.*``
  rows), ``gym`` (``gym/*`` rows) — ranked by how closely they follow the step time over the
  baseline and the regression (Spearman's rank correlation), among those whose mean shifted by
  at least :data:`MOVED_SIGMAS` baseline standard deviations. The efficiency family's rules
  hold: a ``wall_clock`` step-window category is seconds of the step, so it also says which
  share of the extra step time it explains; a ``collector_wall_clock`` or ``thread_seconds``
  category is cumulative over the run, so its per-step increase is compared (and thread-seconds
  are never called time); ``init/total`` is a run constant and is left out, as is a category of
  unknown measurement.
"""

from __future__ import annotations

import bisect
import itertools
import math
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from ..events import EFFICIENCY_PREFIX, TRAIN_PREFIXES, WALL_TIME_KEY
from ..families import efficiency
from ..values import finite_float
from . import numbers
from .numbers import fixed

__all__ = [
    "BASELINE_STEPS",
    "CONFIRM_SLOW",
    "CONFIRM_WINDOW",
    "MOVED_SIGMAS",
    "NOISE_SIGMAS",
    "SLOW_RATIO",
    "Regression",
    "RegressionReport",
    "StepTimes",
    "find_regressions",
    "render_regressions",
]

BASELINE_STEPS = 20
#: The fewest values a p50 is read from.
P50_VALUES = 20
SLOW_RATIO = 1.25
NOISE_SIGMAS = 4.0
CONFIRM_WINDOW, CONFIRM_SLOW = 5, 3
MOVED_SIGMAS = 3.0
#: Series listed per regression.
TOP = 10

_STEP_WALL_KEY = EFFICIENCY_PREFIX + "step_wall_time_s"
_NOT_CATEGORIES = frozenset(
    {
        "step_wall_time",
        "total_wall_time",
        "total_waste",
        "productive_time",
        "thread_seconds_total",
        "efficiency_pct",
        "efficiency_pct_is_per_step",
    }
)
_MAD_TO_SIGMA = 1.4826


@attrs.frozen
class Series:
    """One series of a family's group: its key, its group, and what its values are."""

    key: str
    group: str
    measurement: str | None = None  # efficiency categories: the clock that measured them
    cumulative: bool = False  # compared by per-step increase


def _number(value: Any) -> float | None:
    # A bool is no number here (as_real's rule), and an int no float holds stands for nothing.
    return finite_float(value)


def _classify(prefix: str, key: str) -> Series | None:
    """The group a logged key belongs to, or None for keys no regression ranking reads."""
    full = f"{prefix}/{key}" if prefix else key
    if prefix in TRAIN_PREFIXES and key.startswith("vllm/"):
        return Series(key, "engine")
    if prefix in TRAIN_PREFIXES and key.startswith(EFFICIENCY_PREFIX) and key.endswith("_s"):
        category = key[len(EFFICIENCY_PREFIX) : -len("_s")]
        measurement = efficiency.MEASUREMENTS.get(category)
        if category in _NOT_CATEGORIES or measurement is None or category == "init/total":
            return None
        window = efficiency.efficiency_window(category, measurement)
        return Series(
            category, "efficiency", measurement, cumulative=window == efficiency.RUN_WINDOW
        )
    if full.startswith("ray/node."):
        return Series(full, "gpu" if ".gpu." in full else "host memory")
    if full.startswith("gym/"):
        return Series(full, "gym")
    return None


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def _spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    mx, my = numbers.mean(rx), numbers.mean(ry)
    sx = math.sqrt(sum((r - mx) ** 2 for r in rx))
    sy = math.sqrt(sum((r - my) ** 2 for r in ry))
    if sx == 0 or sy == 0:
        return None
    return sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True)) / (sx * sy)


def _sigma(values: Sequence[float]) -> float:
    median = numbers.median(values)
    return _MAD_TO_SIGMA * numbers.median(abs(v - median) for v in values)


@attrs.frozen
class Moved:
    """One series that moved with a regression."""

    series: str
    group: str
    measurement: str | None
    before: float  # mean over the baseline steps
    after: float  # mean over the regression's steps
    correlation: float  # Spearman's rho with the step time, baseline and regression steps
    shift_sigmas: float
    explains: float | None  # share of the extra step time (wall_clock step categories only)


@attrs.frozen
class Regression:
    """Steps ``start``..``end`` confirmed slower than the baseline."""

    start: int
    end: int
    slow_steps: tuple[int, ...]
    step_time_mean_s: float
    step_time_p50_s: float | None  # only from 20 steps or more
    ratio: float  # mean step time over the baseline p50
    moved: tuple[Moved, ...]


@attrs.frozen
class RegressionReport:
    """The verdict on a run: ``too_short``, ``no_step_time`` or ``judged``."""

    status: str
    reason: str
    step_time_source: str | None = None
    steps: int = 0
    baseline_steps: tuple[int, int] | None = None
    baseline_p50_s: float | None = None
    slow_above_s: float | None = None
    slow_steps: tuple[int, ...] = ()
    regressions: tuple[Regression, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(
            self, value_serializer=lambda _i, _f, v: list(v) if isinstance(v, tuple) else v
        )


class _Column:
    """Numbers by step in the order added, held compactly: steps in an ``array('q')`` (a
    list once one no int64 holds: a hand-made file's), readings in an ``array('d')``. A long
    run's every step of every grouped series is 16 bytes, not a dict entry and a float."""

    def __init__(self) -> None:
        self.steps: array[int] | list[int] = array("q")
        self.readings = array("d")

    def add(self, step: int, value: float) -> None:
        try:
            self.steps.append(step)
        except OverflowError:
            self.steps = [*self.steps, step]
        self.readings.append(value)

    def pairs(self) -> Iterator[tuple[int, float]]:
        return zip(self.steps, self.readings, strict=True)

    def by_step(self, pick: Callable[[Sequence[float]], float]) -> _ByStep:
        """One value a step, in step order: ``pick`` of the values added at it (in the order
        added)."""
        steps, readings = self.steps, self.readings
        order: Iterable[int] = range(len(steps))
        if any(a > b for a, b in itertools.pairwise(steps)):
            order = sorted(order, key=steps.__getitem__)  # stable: a step's values in order
        kept = _ByStep()
        for step, group in itertools.groupby(order, key=steps.__getitem__):
            kept.add(step, pick([readings[i] for i in group]))
        return kept


class _ByStep(Mapping[int, float], _Column):
    """One value a step, its steps ascending: a mapping read by bisection."""

    def __getitem__(self, step: int) -> float:
        at = bisect.bisect_left(self.steps, step)
        if at == len(self.steps) or self.steps[at] != step:
            raise KeyError(step)
        return self.readings[at]

    def __iter__(self) -> Iterator[int]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)


def _first(values: Sequence[float]) -> float:
    return values[0]


def _last(values: Sequence[float]) -> float:
    return values[-1]


def _mean(values: Sequence[float]) -> float:
    return values[0] if len(values) == 1 else numbers.mean(values)


class StepTimes:
    """What a judgement reads of a run's rows, taken one row at a time (:meth:`add`, in the
    order they were written) so a caller streams a long run instead of holding it: each step's
    time, and every grouped series' values per step, in arrays (:class:`_Column`).
    :meth:`judge` gives the verdict."""

    def __init__(self) -> None:
        self._walls = _Column()  # a step's last positive wall time counts
        self._first_time = _Column()  # a step's first row's time counts
        self._sums: dict[Series, _Column] = {}

    def add(self, row: Mapping[str, Any]) -> None:
        metrics, step, prefix = row.get("metrics"), row.get("step"), row.get("prefix", "")
        if not isinstance(metrics, Mapping) or not isinstance(step, int) or isinstance(step, bool):
            return
        if WALL_TIME_KEY in metrics or not isinstance(prefix, str):
            return  # a wall-clock stream (rollout checkpoints): not on the step axis
        if prefix in TRAIN_PREFIXES:
            wall = _number(metrics.get(_STEP_WALL_KEY))
            if wall is not None and wall > 0:
                self._walls.add(step, wall)
            logged = _number(row.get("time"))
            if logged is not None:
                self._first_time.add(step, logged)
        for key, value in metrics.items():
            series = _classify(prefix, str(key))
            number = _number(value)
            if series is not None and number is not None:
                column = self._sums.get(series)
                if column is None:
                    column = self._sums[series] = _Column()
                column.add(step, number)

    def per_step(
        self,
    ) -> tuple[Mapping[int, float], str | None, dict[Series, Mapping[int, float]]]:
        """Step times, their source, and every grouped series' value per step (the mean of
        the values a step logged; for a cumulative series, its increase since the step
        before)."""
        values: dict[Series, Mapping[int, float]] = {}
        for series, column in self._sums.items():
            means = column.by_step(_mean)
            values[series] = _increases(means) if series.cumulative else means
        if len(self._walls.steps):
            return self._walls.by_step(_last), _STEP_WALL_KEY, values
        first_time = self._first_time.by_step(_first)
        gaps = _ByStep()
        for (_a, at_a), (b, at_b) in itertools.pairwise(first_time.pairs()):
            if at_b > at_a:
                gaps.add(b, at_b - at_a)
        return gaps, ("time between logged steps" if len(gaps) else None), values

    def judge(self) -> RegressionReport:
        """The verdict on the rows added so far."""
        return _judge(*self.per_step())


def _increases(by_step: _ByStep) -> _ByStep:
    """A cumulative series' increase at each step since the step before (none at the first)."""
    increases = _ByStep()
    for (_a, before), (b, after) in itertools.pairwise(by_step.pairs()):
        increases.add(b, after - before)
    return increases


def find_regressions(rows: Iterable[Mapping[str, Any]]) -> RegressionReport:
    """Judge a run's step times (rows as :func:`rlmetrics.backends.jsonl.read_jsonl` gives
    them, in the order they were written)."""
    taken = StepTimes()
    for row in rows:
        taken.add(row)
    return taken.judge()


def _judge(
    times: Mapping[int, float], source: str | None, values: Mapping[Series, Mapping[int, float]]
) -> RegressionReport:
    if source is None:
        return RegressionReport(
            "no_step_time",
            "no step carries efficiency/step_wall_time_s and the rows carry no times",
        )
    steps = sorted(times)
    needed = BASELINE_STEPS + CONFIRM_WINDOW
    if len(steps) < needed:
        plural = "s" * (len(steps) != 1)
        timed = (
            f"{len(steps)} step{plural} with a step time"
            if source == _STEP_WALL_KEY
            # Said, or beside the goodput's "no step carried step_wall_time_s" it reads as if
            # some did.
            else f"{len(steps)} step time{plural}, from the {source} (no step carries "
            f"{_STEP_WALL_KEY})"
        )
        return RegressionReport(
            "too_short",
            f"too short to judge: {timed}; a baseline needs "
            f"{BASELINE_STEPS} (a p50 from fewer cannot be told from noise) and a regression "
            f"{CONFIRM_SLOW} slow steps in {CONFIRM_WINDOW} after it ({needed} in all)",
            step_time_source=source,
            steps=len(steps),
        )
    base_steps, judged = steps[:BASELINE_STEPS], steps[BASELINE_STEPS:]
    base = [times[s] for s in base_steps]
    p50 = numbers.median(base)
    threshold = max(SLOW_RATIO * p50, p50 + NOISE_SIGMAS * _sigma(base))
    slow = [s for s in judged if times[s] > threshold]
    confirmed = _confirmed(judged, set(slow))
    regressions = tuple(
        _regression(hits, steps, times, base_steps, p50, values) for hits in confirmed
    )
    if regressions:
        reason = f"{len(regressions)} confirmed regression(s)"
    else:
        reason = f"no confirmed regression in {len(judged)} steps judged" + (
            f" ({len(slow)} slow step(s) alone: noise, not confirmed)" if slow else ""
        )
    return RegressionReport(
        "judged",
        reason,
        step_time_source=source,
        steps=len(steps),
        baseline_steps=(base_steps[0], base_steps[-1]),
        baseline_p50_s=p50,
        slow_above_s=threshold,
        slow_steps=tuple(slow),
        regressions=regressions,
    )


def _confirmed(judged: Sequence[int], slow: set[int]) -> list[list[int]]:
    """The slow steps of each window of :data:`CONFIRM_WINDOW` judged steps holding at least
    :data:`CONFIRM_SLOW` of them, overlapping windows merged. Windows slide in step order, so
    a window that overlaps the last regression only adds its newer slow steps to it (a merge
    that re-sorted the whole regression, and a set of every slow step made for each window,
    made a run slower for its last 50 000 steps take half an hour)."""
    confirmed: list[list[int]] = []
    for i in range(len(judged)):
        hits = [s for s in judged[i : i + CONFIRM_WINDOW] if s in slow]
        if len(hits) < CONFIRM_SLOW:
            continue
        if confirmed and hits[0] <= confirmed[-1][-1]:
            last = confirmed[-1]
            last.extend(s for s in hits if s > last[-1])
        else:
            confirmed.append(hits)
    return confirmed


def _regression(
    hits: Sequence[int],
    steps: Sequence[int],
    times: Mapping[int, float],
    base_steps: Sequence[int],
    p50: float,
    values: Mapping[Series, Mapping[int, float]],
) -> Regression:
    start, end = hits[0], hits[-1]
    span = list(steps[bisect.bisect_left(steps, start) : bisect.bisect_right(steps, end)])
    span_times = [times[s] for s in span]
    mean = numbers.mean(span_times)
    extra = mean - numbers.mean(times[s] for s in base_steps)
    moved = []
    for series, by_step in values.items():
        before = [by_step[s] for s in base_steps if s in by_step]
        after = [by_step[s] for s in span if s in by_step]
        if len(before) < P50_VALUES or len(after) < CONFIRM_SLOW:
            continue  # too few values to tell a shift from noise
        shift = numbers.mean(after) - numbers.mean(before)
        scale = max(_sigma(before), numbers.pstdev(before), 1e-9 * abs(numbers.mean(before)))
        sigmas = abs(shift) / scale if scale > 0 else (math.inf if shift else 0.0)
        if sigmas < MOVED_SIGMAS:
            continue
        paired = [s for s in (*base_steps, *span) if s in by_step]
        rho = _spearman([by_step[s] for s in paired], [times[s] for s in paired])
        if rho is None:
            continue
        explains = (
            shift / extra
            if series.measurement == efficiency.WALL_CLOCK and not series.cumulative and extra > 0
            else None
        )
        moved.append(
            Moved(
                series=series.key,
                group=series.group,
                measurement=series.measurement,
                before=numbers.mean(before),
                after=numbers.mean(after),
                correlation=rho,
                shift_sigmas=sigmas,
                explains=explains,
            )
        )
    moved.sort(key=lambda m: (-abs(m.correlation), -m.shift_sigmas, m.series))
    return Regression(
        start=start,
        end=end,
        slow_steps=tuple(hits),
        step_time_mean_s=mean,
        step_time_p50_s=numbers.median(span_times) if len(span) >= P50_VALUES else None,
        ratio=mean / p50,
        moved=tuple(moved[:TOP]),
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{fixed(value)} s"


def _moved_line(rank: int, moved: Mapping[str, Any]) -> str:
    measurement = moved["measurement"]
    unit = ""
    if measurement == efficiency.THREAD_SECONDS:
        what = f"{moved['series']} (thread-seconds added per step, not a duration)"
    elif measurement == efficiency.COLLECTOR_WALL_CLOCK:
        what = f"{moved['series']} (collector clock, added per step)"
        unit = " s"
    elif measurement == efficiency.WALL_CLOCK:
        what, unit = f"{moved['series']} (driver wall clock)", " s"
    else:
        what = moved["series"]
    line = (
        f"    {rank}. {moved['group']:<12} {what}: {moved['before']:.4g} -> "
        f"{moved['after']:.4g}{unit} (rho {moved['correlation']:+.2f}, "
        f"{moved['shift_sigmas']:.0f} sigma)"
    )
    if moved["explains"] is not None:
        line += f", {100 * moved['explains']:.0f}% of the extra step time"
    return line


def render_regressions(report: Mapping[str, Any]) -> list[str]:
    """The report's section on step-time regressions (``RegressionReport.as_dict()``)."""
    lines = ["", "Step-time regressions:"]
    if report["status"] != "judged":
        return [*lines, f"  {report['reason']}"]
    first, last = report["baseline_steps"]
    lines.append(
        f"  baseline: p50 {_seconds(report['baseline_p50_s'])} over steps {first}-{last} "
        f"({report['step_time_source']}); a step is slow above "
        f"{_seconds(report['slow_above_s'])}, a regression is {CONFIRM_SLOW} slow steps in "
        f"{CONFIRM_WINDOW}"
    )
    if not report["regressions"]:
        return [*lines, f"  {report['reason']}"]
    for regression in report["regressions"]:
        p50 = regression["step_time_p50_s"]
        lines.append(
            f"  steps {regression['start']}-{regression['end']}: {regression['ratio']:.2f}x the "
            f"baseline (mean {_seconds(regression['step_time_mean_s'])}"
            + (f", p50 {_seconds(p50)}" if p50 is not None else "")
            + f"; {len(regression['slow_steps'])} slow steps)"
        )
        if regression["moved"]:
            lines.append("   moved with it, closest to the step time first:")
            lines += [_moved_line(i, m) for i, m in enumerate(regression["moved"], start=1)]
        else:
            lines.append(
                "   no series of the engine, efficiency, memory or Gym groups moved with it"
            )
    return lines
