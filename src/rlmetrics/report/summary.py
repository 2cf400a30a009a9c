"""A run's JSONL summarised: goodput and idle time per step, setup cost, trends, vLLM tokens
and failures, rollout-checkpoint latencies and outcomes.

The efficiency numbers obey the spec's measurement and window rules, which a naive sum breaks:

- a step's goodput is its wall time minus its ``wall_clock``/``step`` idle categories, over its
  wall time (a step-window category absent from a step spent 0 s there);
- ``run``-window values are cumulative: the report shows the last one, never a sum over steps;
- ``thread_seconds`` are summed over concurrent worker threads, so they are not durations: the
  report shows them as saturation (thread-seconds per second of run = threads busy at once);
- ``init/total`` is the wait before the first step, republished every step: overhead, counted
  once;
- setup: ``total_setup`` as logged; phases overlap and are never summed.

Rows come from :func:`rlmetrics.backends.jsonl.read_jsonl`, which skips a torn last line.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..events import (
    EFFICIENCY_PREFIX,
    SETUP_TIMING_PREFIX,
    TRAIN_PREFIXES,
    WALL_TIME_KEY,
    CheckpointOutcome,
    CheckpointRestore,
    CheckpointSave,
    setup_phase,
)
from ..families import efficiency
from ..values import finite_float
from .numbers import mean, median
from .regressions import StepTimes
from .signals import GPU_PREFIX, summarise_signals

__all__ = ["ReportBuilder", "RunReport", "build_report", "measurement_of", "read_report"]

_VLLM_COUNTERS = (
    "vllm/prompt_tokens",
    "vllm/generation_tokens",
    "vllm/generations_ok",
    "vllm/generations_failed",
)
_VLLM_MEANS = ("vllm/prompt_length_mean", "vllm/generation_length_mean")
_TRENDS = (("reward", "reward"), ("kl_penalty", "kl"), ("loss", "loss"))
_TREND_KEYS = frozenset(key for key, _name in _TRENDS)
_SECONDS_SUFFIX = "_s"
_NOT_CATEGORIES = frozenset(
    {"step_wall_time", "total_wall_time", "total_waste", "productive_time", "thread_seconds_total"}
)


def measurement_of(category: str) -> str | None:
    """The clock that measured an efficiency category (the efficiency family's table)."""
    return efficiency.MEASUREMENTS.get(category)


def _is_step_category(category: str) -> bool:
    measurement = measurement_of(category)
    return (
        measurement == efficiency.WALL_CLOCK
        and efficiency.efficiency_window(category, measurement) == efficiency.STEP_WINDOW
    )


@attrs.frozen
class RunReport:
    """Everything ``rlmetrics report`` shows; :meth:`as_dict` is ``--json``."""

    source: str
    rows: int
    skipped_lines: int
    steps: tuple[dict[str, Any], ...]
    goodput: dict[str, Any]
    setup: dict[str, Any] | None
    trends: dict[str, dict[str, float]]
    vllm: dict[str, Any] | None
    checkpoints: dict[str, Any] | None
    #: The run's id (None for rows written without one) and how often it was resumed.
    run_id: str | None = None
    resumed: int = 0
    #: How often it was started again without resume (only the last attempt is reported).
    reruns: int = 0
    #: Trainer steps logged more than once in the run (the later values are shown).
    repeated_steps: tuple[int, ...] = ()
    #: The run's configuration (``Logger.log_hyperparams``), nested as logged.
    hyperparams: dict[str, Any] | None = None
    #: Sample rows: how many, and the first rows of the latest table.
    samples: dict[str, Any] | None = None
    #: Step-time regressions and what moved with them (:mod:`.regressions`), judged on the
    #: whole run whatever steps the report shows.
    regressions: dict[str, Any] | None = None
    #: Reward components, validation datasets, the vLLM engine's state, GPUs (``signals``).
    signals: dict[str, Any] | None = None
    #: The steps shown, when not all (``--steps``, ``--tail``), and how many the run logged.
    selection: str | None = None
    steps_logged: int | None = None
    #: The series ``--keys`` chose, ``{key: [[step, value], ...]}``, in the order named.
    series: dict[str, list[tuple[int, float]]] | None = None
    #: The key map the run was read through, and how it was chosen (``.keymap``).
    key_map: dict[str, str] | None = None
    #: Every numeric series of the steps shown, for the HTML page's curves (read only when
    #: ``--html`` asks; not in ``as_dict``: in ``--json``, ``--keys`` chooses the series).
    curves: dict[str, list[tuple[int, float]]] | None = None

    @property
    def chosen_steps(self) -> tuple[int, int] | None:
        """The steps ``--steps`` or ``--tail`` chose (from the first shown to the last), or
        None when the report shows every step: what the page's trajectory table and timeline
        and the ``--timeline`` picture draw, the same steps as the curves. A selection no step
        matched is an empty range."""
        if self.selection is None:
            return None
        shown = [row["step"] for row in self.steps if type(row.get("step")) is int]
        return (min(shown), max(shown)) if shown else (1, 0)

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(
            self,
            filter=lambda field, _value: field.name != "curves",
            value_serializer=lambda _i, _f, v: list(v) if isinstance(v, tuple) else v,
        )


def _number(value: Any) -> float | None:
    # finite_float, not float(): an int no float holds (10**400 is valid JSON) costs only
    # itself, as NaN does, instead of an OverflowError that ends the report.
    return finite_float(value)


def _efficiency(metrics: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if key.startswith(EFFICIENCY_PREFIX) and key.endswith(_SECONDS_SUFFIX):
            category = key[len(EFFICIENCY_PREFIX) : -len(_SECONDS_SUFFIX)]
            number = _number(value)
            if category not in _NOT_CATEGORIES and number is not None:
                out[category] = number
    return out


def _percent(part: float, whole: float) -> float:
    """``part`` as a percentage of ``whole``, within 0-100 (rounding can pass 100 by an ulp)."""
    return min(100.0, max(0.0, 100.0 * part / whole))


def _trend(values: Sequence[float]) -> dict[str, float]:
    quarter = max(1, len(values) // 4)
    return {
        "first": values[0],
        "last": values[-1],
        "min": min(values),
        "max": max(values),
        "first_quarter_mean": mean(values[:quarter]),
        "last_quarter_mean": mean(values[-quarter:]),
    }


def _latency(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "mean": mean(ordered),
        "p50": median(ordered),
        "max": ordered[-1],
    }


class ReportBuilder:
    """A run's report taken one row at a time (:meth:`add`, in the order the rows were written)
    so a long run is summarised as it is read, not held: each step keeps only the keys the
    report reads of it (efficiency, trends, vLLM, reward components, validation datasets), not
    every key the trainer logged. :meth:`report` is :func:`build_report` of the rows added."""

    def __init__(self) -> None:
        self.by_step: dict[int, dict[str, Any]] = {}
        self.setup: dict[str, Any] | None = None
        self.saves: list[dict[str, float]] = []
        self.restores: list[dict[str, float]] = []
        self.attempts: dict[str, int] = {}
        self.reasons: dict[str, int] = {}
        self.attempt_log: list[dict[str, Any]] = []
        self.gpu_rows: list[Mapping[str, Any]] = []
        self.count = 0
        self.step_times = StepTimes()
        self._read: dict[Any, bool] = {}

    def _reads(self, key: Any) -> bool:
        """Whether a step's key is one the report reads (told once per key)."""
        known = self._read.get(key)
        if known is None:
            known = self._read[key] = _read_at_a_step(key)
        return known

    def add(self, row: Mapping[str, Any]) -> None:
        self.count += 1
        self.step_times.add(row)
        metrics = row.get("metrics")
        prefix = row.get("prefix", "")
        if not isinstance(metrics, Mapping):
            return
        step = row.get("step")
        if prefix in TRAIN_PREFIXES and isinstance(step, int):
            kept = {k: v for k, v in metrics.items() if self._reads(k)}
            self.by_step.setdefault(step, {}).update(kept)
        elif prefix == SETUP_TIMING_PREFIX:
            self.setup = _setup(metrics)
        elif prefix == GPU_PREFIX:
            self.gpu_rows.append(metrics)
        elif prefix == CheckpointSave.PREFIX:
            self.saves.append(_numbers(metrics))
        elif prefix == CheckpointRestore.PREFIX:
            self.restores.append(_numbers(metrics))
        elif prefix == CheckpointOutcome.PREFIX:
            outcome = CheckpointOutcome.from_metrics(metrics)
            name = outcome.outcome or "unknown"  # (a dict's outcome is always one of three)
            self.attempts[name] = self.attempts.get(name, 0) + 1
            if outcome.reason:
                self.reasons[outcome.reason] = self.reasons.get(outcome.reason, 0) + 1
            self.attempt_log.append(
                {
                    "wall_time_s": outcome.wall_time_s,
                    "outcome": outcome.outcome,
                    "reason": outcome.reason,
                }
            )

    def report(self, source: str = "", skipped: int = 0) -> RunReport:
        """The report of the rows added so far."""
        by_step = self.by_step
        steps = [_step_row(step, by_step[step]) for step in sorted(by_step)]
        return RunReport(
            source=source,
            rows=self.count,
            skipped_lines=skipped,
            steps=tuple(steps),
            goodput=_goodput(steps, by_step),
            setup=self.setup,
            trends={
                name: _trend(values)
                for key, name in _TRENDS
                if (values := [s[name] for s in steps if s.get(name) is not None])
            },
            vllm=_vllm(by_step),
            checkpoints=_checkpoints(
                self.saves, self.restores, self.attempts, self.reasons, self.attempt_log
            ),
            regressions=self.step_times.judge().as_dict(),
            signals=summarise_signals(by_step, self.gpu_rows),
        )


def _read_at_a_step(key: Any) -> bool:
    """Whether the report reads ``key`` of a step's train dicts: an efficiency key, a trend, a
    vLLM key, a reward component or a validation dataset's metric (each parser takes a key
    alone, so a key it finds nothing in alone it finds nothing in beside others)."""
    from ..families.training import dataset_metrics, reward_components

    if not isinstance(key, str):
        return True  # (no JSON row has one; a hand-made dict is read as it was)
    return (
        key.startswith((EFFICIENCY_PREFIX, "vllm/"))
        or key in _TREND_KEYS
        or bool(reward_components({key: None}))
        or bool(dataset_metrics({key: None}))
    )


def build_report(
    rows: Iterable[Mapping[str, Any]], source: str = "", skipped: int = 0
) -> RunReport:
    """Summarise the rows of one run's JSONL (in the order they were written)."""
    builder = ReportBuilder()
    for row in rows:
        builder.add(row)
    return builder.report(source=source, skipped=skipped)


def _numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: n for k, v in metrics.items() if (n := _number(v)) is not None}


def _setup(metrics: Mapping[str, Any]) -> dict[str, Any]:
    phases = {
        phase: number
        for key, value in metrics.items()
        if (phase := setup_phase(key)) is not None and (number := _number(value)) is not None
    }
    return {"total_setup_s": phases.get("total_setup"), "phases": phases}


def _step_row(step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
    seconds = _efficiency(metrics)
    wall = _number(metrics.get(EFFICIENCY_PREFIX + "step_wall_time_s"))
    idle = {c: s for c, s in seconds.items() if _is_step_category(c)}
    row: dict[str, Any] = {"step": step, "wall_time_s": wall, "idle_s": idle}
    if wall is not None and wall > 0:
        productive = max(0.0, wall - sum(idle.values()))
        row["productive_s"] = productive
        row["goodput_pct"] = _percent(productive, wall)
    per_step = _number(metrics.get(EFFICIENCY_PREFIX + "efficiency_pct_is_per_step"))
    logged = _number(metrics.get(EFFICIENCY_PREFIX + "efficiency_pct"))
    if logged is not None and per_step:
        row["logged_efficiency_pct"] = logged
    for key, name in _TRENDS:
        row[name] = _number(metrics.get(key))
    return row


def _goodput(
    steps: Sequence[dict[str, Any]], by_step: Mapping[int, Mapping[str, Any]]
) -> dict[str, Any]:
    timed = [s for s in steps if s.get("goodput_pct") is not None]
    wall = sum(s["wall_time_s"] for s in timed)
    idle: dict[str, float] = {}
    for s in timed:
        for category, seconds in s["idle_s"].items():
            idle[category] = idle.get(category, 0.0) + seconds
    # A step whose idle exceeds its wall time (a malformed log) counts as 0 productive.
    productive = sum(s["productive_s"] for s in timed)
    # Run-window values are cumulative: the latest of each, in step order, never a sum.
    latest: dict[str, float] = {}
    elapsed: float | None = None
    for step in sorted(by_step):
        latest.update(_efficiency(by_step[step]))
        elapsed = _number(by_step[step].get(EFFICIENCY_PREFIX + "total_wall_time_s")) or elapsed
    collector = {
        c: s for c, s in latest.items() if measurement_of(c) == efficiency.COLLECTOR_WALL_CLOCK
    }
    threads = {
        c: {"thread_seconds": s, "threads_busy": s / elapsed if elapsed else None}
        for c, s in latest.items()
        if measurement_of(c) == efficiency.THREAD_SECONDS
    }
    unknown = sorted(c for c in latest if measurement_of(c) is None)
    return {
        "steps": len(timed),
        "step_wall_time_s": wall,
        "idle_s": idle,
        "productive_s": productive,
        "goodput_pct": _percent(productive, wall) if wall > 0 else None,
        "init_total_s": latest.get("init/total"),
        "run_elapsed_s": elapsed,
        "collector_wall_clock_s": collector,
        "thread_seconds": threads,
        "unknown_categories": unknown,
    }


def _vllm(by_step: Mapping[int, Mapping[str, Any]]) -> dict[str, Any] | None:
    seen = [s for s, m in by_step.items() if any(k in m for k in (*_VLLM_COUNTERS, *_VLLM_MEANS))]
    if not seen:
        return None
    first, last = min(seen), max(seen)
    totals = {
        key.split("/", 1)[1]: sum(
            n for m in by_step.values() if (n := _number(m.get(key))) is not None
        )
        for key in _VLLM_COUNTERS
    }
    means = {
        key.split("/", 1)[1]: mean(values)
        for key in _VLLM_MEANS
        if (values := [n for m in by_step.values() if (n := _number(m.get(key))) is not None])
    }
    missing = [s for s in range(first, last + 1) if s in by_step and s not in seen]
    finished = totals["generations_ok"] + totals["generations_failed"]
    return {
        **totals,
        "failed_share": totals["generations_failed"] / finished if finished else None,
        "mean_of_step_means": means,
        "steps_with_reading": len(seen),
        "steps_without_reading": missing,
    }


def _checkpoints(
    saves: Sequence[Mapping[str, float]],
    restores: Sequence[Mapping[str, float]],
    attempts: Mapping[str, int],
    reasons: Mapping[str, int],
    attempt_log: Sequence[Mapping[str, Any]],
) -> dict[str, Any] | None:
    if not (saves or restores or attempts):
        return None

    def phases(event: Mapping[str, float]) -> dict[str, float]:
        return {
            k[: -len("_seconds")]: v
            for k, v in event.items()
            if k.endswith("_seconds") and not k.startswith("total_") and k != WALL_TIME_KEY
        }

    return {
        "attempts": dict(attempts),
        "reasons": dict(reasons),
        "attempt_log": list(attempt_log),
        "save_latency_s": _latency(
            [e["total_save_seconds"] for e in saves if "total_save_seconds" in e]
        ),
        "restore_latency_s": _latency(
            [e["total_load_seconds"] for e in restores if "total_load_seconds" in e]
        ),
        "saves": [
            {
                "wall_time_s": e.get(WALL_TIME_KEY),
                "total_s": e.get("total_save_seconds"),
                "phases_s": phases(e),
            }
            for e in saves
        ],
        "restores": [
            {
                "wall_time_s": e.get(WALL_TIME_KEY),
                "total_s": e.get("total_load_seconds"),
                "phases_s": phases(e),
            }
            for e in restores
        ],
    }


def read_report(path: str | os.PathLike[str], run: str | None = None) -> RunReport:
    """The report of one run of the JSONL at ``path``: the one ``run`` names, else the last
    one in the file (a torn or malformed line is skipped and counted). Every run:
    :func:`rlmetrics.report.runs.read_reports`."""
    from .runs import read_reports

    return read_reports(path, run)[-1]
