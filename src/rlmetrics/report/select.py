"""What a report is about: the steps it shows (``--steps A:B``, ``--tail N``) and the keys it
plots (``--keys``).

Only rows at a trainer step are selected by step: every row but the setup phases (logged once,
at step 0) and the rollout-checkpoint streams (whose step is the stream's own sample index).
A key is named as the report names it: a train dict's key as logged (``reward``), any other
prefix's with it (``validation/accuracy``).
"""

from __future__ import annotations

import difflib
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from ..events import ROLLOUT_EVENT_TYPES, SETUP_TIMING_PREFIX, TRAIN_PREFIXES
from ..values import finite_float

__all__ = [
    "NumericSeries",
    "Thinning",
    "StepSelection",
    "UnknownKeys",
    "choose",
    "is_step_row",
    "key_name",
    "numeric_series",
    "step_values",
]


class UnknownKeys(LookupError):
    """``--keys`` named keys the run did not log (the message names close ones)."""


def is_step_row(row: Mapping[str, Any]) -> bool:
    """Whether ``row`` is at a trainer step (not setup, not a rollout-checkpoint stream)."""
    prefix = row.get("prefix", "")
    return (
        type(row.get("step")) is int
        and prefix != SETUP_TIMING_PREFIX
        and prefix not in ROLLOUT_EVENT_TYPES
    )


def key_name(prefix: str, key: str) -> str:
    """The name a report gives a logged key: as logged in a train dict, else under its
    prefix."""
    return key if prefix in TRAIN_PREFIXES else f"{prefix}/{key}"


@attrs.frozen
class StepSelection:
    """The steps a report shows: ``first``..``last`` (inclusive, either open), or the last
    ``tail`` steps of each run."""

    first: int | None = None
    last: int | None = None
    tail: int | None = None

    @classmethod
    def parse(cls, text: str) -> StepSelection:
        """``A:B``, ``A:``, ``:B`` or ``A`` (one step); ``ValueError`` saying what is wrong."""
        first, sep, last = text.partition(":")
        try:
            bounds = (
                int(first) if first.strip() else None,
                (int(last) if last.strip() else None) if sep else int(first),
            )
        except ValueError:
            raise ValueError(f"expected steps as A:B, A:, :B or A, got {text!r}") from None
        if bounds[0] is not None and bounds[1] is not None and bounds[0] > bounds[1]:
            raise ValueError(f"A must not be after B in A:B, got {text!r}")
        return cls(*bounds)

    def describe(self) -> str:
        if self.tail is not None:
            return f"the last {self.tail} steps"
        first = "" if self.first is None else self.first
        last = "" if self.last is None else self.last
        return f"steps {first}:{last}"

    def steps(self, logged: Iterable[int]) -> set[int]:
        """The steps of ``logged`` this selection keeps."""
        ordered = sorted(set(logged))
        if self.tail is not None:
            return set(ordered[-self.tail :]) if self.tail > 0 else set()
        return {
            s
            for s in ordered
            if (self.first is None or s >= self.first) and (self.last is None or s <= self.last)
        }

    def apply(self, rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """``rows`` without the step rows outside the selection (the others all kept)."""
        kept = self.steps(row["step"] for row in rows if is_step_row(row))
        return [row for row in rows if not is_step_row(row) or row["step"] in kept]


def step_values(rows: Iterable[Mapping[str, Any]]) -> Iterator[tuple[int, str, str, Any]]:
    """``(step, prefix, key, value)`` of every value logged at a trainer step, in file order
    (the rows a report reads that are not a trainer step's are passed over)."""
    for row in rows:
        metrics = row.get("metrics")
        if not is_step_row(row) or not isinstance(metrics, Mapping):
            continue
        prefix = row.get("prefix", "")
        for key, value in metrics.items():
            yield row["step"], prefix, key, value


#: A curve's points made fewer (the HTML page's thinning), or None.
Thinning = Callable[[list[tuple[int, float]]], list[tuple[int, float]]]


class _Points:
    """One series' points as logged: steps and values in two arrays (16 bytes a point, not a
    dict entry, an int and a float), a step logged twice in both; a step no 64-bit integer
    holds makes the steps a list."""

    def __init__(self) -> None:
        self.steps: array[int] | list[int] = array("q")
        self.values = array("d")

    def add(self, step: int, value: float) -> None:
        try:
            self.steps.append(step)
        except OverflowError:
            self.steps = [*self.steps, step]
        self.values.append(value)

    def ordered(self) -> list[tuple[int, float]]:
        """In step order, a step logged twice at its later value."""
        return sorted(dict(zip(self.steps, self.values, strict=True)).items())


class NumericSeries:
    """:func:`numeric_series` taken one row at a time (:meth:`add`): every number logged at a
    trainer step of the series ``wanted`` names (of every series when None), and the names of
    the others (a ``--keys`` mistake is told the names the run logged) without their points."""

    def __init__(self, wanted: Collection[str] | None = None) -> None:
        self.wanted = None if wanted is None else frozenset(wanted)
        self._names: dict[str, None] = {}  # every name with a number, in the order first seen
        self._points: dict[str, _Points] = {}

    def add(self, row: Mapping[str, Any]) -> None:
        for step, prefix, key, value in step_values((row,)):
            number = finite_float(value)  # an int no float holds is no point (no OverflowError)
            if number is None:
                continue
            name = key_name(prefix, key)
            self._names[name] = None
            if self.wanted is None or name in self.wanted:
                points = self._points.get(name)
                if points is None:
                    points = self._points[name] = _Points()
                points.add(step, number)

    def series(self, thin: Thinning | None = None) -> dict[str, list[tuple[int, float]]]:
        """``{key name: [(step, value), ...]}`` in step order (each made fewer by ``thin``,
        one series at a time, so every point of every series is never held at once); a series
        not wanted has no points."""
        out: dict[str, list[tuple[int, float]]] = {}
        for name in self._names:
            found = self._points.get(name)
            points = [] if found is None else found.ordered()
            out[name] = points if thin is None else thin(points)
        return out


def numeric_series(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """``{key name: [(step, value), ...]}`` of every number logged at a trainer step, in step
    order (a step logged twice keeps its later value)."""
    taken = NumericSeries()
    for row in rows:
        taken.add(row)
    return taken.series()


def choose(
    wanted: Sequence[str], series: Mapping[str, list[tuple[int, float]]]
) -> dict[str, list[tuple[int, float]]]:
    """The series ``wanted`` names, in that order; :class:`UnknownKeys` naming any the run did
    not log, with the closest logged names."""
    missing = [key for key in wanted if key not in series]
    if missing:
        hints = []
        for key in missing:
            close = difflib.get_close_matches(key, list(series), n=3)
            hints.append(f"{key!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        logged = ", ".join(sorted(series)[:30]) or "none"
        more = f" and {len(series) - 30} more" if len(series) > 30 else ""
        raise UnknownKeys(
            f"--keys: the run logged no numbers under {'; '.join(hints)}. Logged at trainer "
            f"steps: {logged}{more}"
        )
    return {key: series[key] for key in wanted}
