"""One JSONL file, several runs: the rows split by run id, each run with its configuration,
its latest samples, the steps it logged again after going back, and the key map that reads it.

Every row the JSONL backend writes carries ``run_id``; a file appended to by several runs (or by
one run and its resumed continuation, which shares its id) is split here, in the order the runs
first appear. Rows without a run id (files written before rlmetrics 0.3) are one run whose id is
None.

A run is one or more attempts: a ``resume`` row starts the next, and so does a step logged under
a prefix below the latest step that prefix reached (a run that went back to its checkpoint).
Rows at one step of one attempt are one step (a trainer that logs its end-of-training summary
at the last step adds to that step; it does not repeat it). A step two attempts logged is a
repeat: the report shows it as the last attempt logged it, never a mix of the two, and says
which steps repeated.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Generator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import attrs

from .._warn import logger
from ..backends.jsonl import (
    END_KIND,
    HYPERPARAMS_KIND,
    RESUME_KIND,
    SkippedLines,
    named_lines,
    read_jsonl,
    samples_path,
    starts_over,
)
from ..events import TRAIN_PREFIXES
from .keymap import FoundKeyMap, RunKeys, found_key_map
from .regressions import StepTimes
from .select import NumericSeries, StepSelection, Thinning, choose, is_step_row
from .summary import ReportBuilder, RunReport

__all__ = [
    "SAMPLES_SHOWN",
    "DamagedRows",
    "NotARunFile",
    "RowCensus",
    "RunNotFound",
    "not_a_run_problem",
    "read_reports",
    "run_row_problem",
    "run_rows",
    "samples_beside",
    "split_runs",
]

#: Sample rows a report keeps (the first rows of the latest table of the run).
SAMPLES_SHOWN = 3


#: A run's file as logrotate leaves it: its ``.jsonl`` name, then a number (``.1``) or a date
#: (``-20261207``), compressed or not — the names ``rlmetrics mcp`` lists as runs.
_ROTATED = re.compile(r"(?P<stem>.+)\.jsonl(?P<tail>(?:[.-][0-9]+)?(?:\.(?:gz|bz2|xz))?)")


def samples_beside(path: str | os.PathLike[str]) -> Path:
    """The samples file of the run's JSONL ``path``: the writer's name
    (:func:`~rlmetrics.backends.jsonl.samples_path`), or for a rotated file
    (``metrics.jsonl.1.gz``) the samples file rotated beside it (``metrics.samples.jsonl.1.gz``)."""
    path = Path(path)
    rotated = _ROTATED.fullmatch(path.name)
    if rotated is not None and rotated["tail"]:
        return path.with_name(f"{rotated['stem']}.samples.jsonl{rotated['tail']}")
    return samples_path(path)


class RunNotFound(LookupError):
    """``--run`` named a run the file does not hold."""


class NotARunFile(ValueError):
    """The file given as a run's metrics JSONL holds no metrics row (a traces file, a samples
    file, a CSV): an empty report of it would look like a run that logged nothing."""


def run_row_problem(row: Mapping[str, Any]) -> str | None:
    """Why a row :func:`read_jsonl` passed is still no row of a run, or None: a ``run_id``
    that is there but no string (the JSONL backend writes the run's id as one; a row without
    one, or with null, is of a file from before run ids), or a negative ``step`` (a trainer
    step counts from 0). Such a row is damaged: filing it under a run named ``5`` or ``None``
    or at step -4 would report what no run logged."""
    run_id = row.get("run_id")
    if run_id is not None and not isinstance(run_id, str):
        return f"run_id {json.dumps(run_id)[:40]} is not a string"
    step = row.get("step")
    if type(step) is int and step < 0:
        return f"step {step} is negative"
    return None


class DamagedRows:
    """The rows :func:`run_rows` left out: how many, and the first few with their line and
    what is wrong (rows the reader read whole)."""

    #: Damaged rows a summary names (the rest are counted).
    SHOWN = 5

    def __init__(self) -> None:
        self.count = 0
        self.first: list[tuple[int | None, str]] = []

    def add(self, why: str, number: int | None = None) -> None:
        self.count += 1
        if len(self.first) < self.SHOWN:
            self.first.append((number, why))

    def named(self) -> str:
        """``line 6 (step -4 is negative), line 9 (run_id 5 is not a string)``."""
        return named_lines(self.first, self.count)

    def summary(self, path: str | os.PathLike[str]) -> str:
        """``2 rows of m.jsonl skipped as damaged: line 6 (step -4 is negative), ...``."""
        return (
            f"rlmetrics: {self.count} row{'s' * (self.count != 1)} of {os.fspath(path)} "
            f"skipped as damaged: {self.named()}"
        )


def run_rows(
    rows: Iterable[dict[str, Any]], damaged: DamagedRows, lines: Sequence[int] = ()
) -> list[dict[str, Any]]:
    """``rows`` without those :func:`run_row_problem` finds damaged, each counted into
    ``damaged`` with its line number from ``lines`` (what ``read_jsonl(lines=)`` filled): a
    damaged row costs only itself. ``rlmetrics report``, ``check --run`` and ``query`` read a
    run's rows through this one rule."""
    kept = []
    for index, row in enumerate(rows):
        problem = run_row_problem(row)
        if problem is None:
            kept.append(row)
        else:
            damaged.add(problem, lines[index] if index < len(lines) else None)
    return kept


class RowCensus:
    """What the rows of a file are, taken one row at a time (:meth:`add`) so a long file is
    judged as it is read: whether any is a run's row, and otherwise what the file looks like
    (:meth:`problem`)."""

    def __init__(self) -> None:
        self.rows = 0
        self.ranks: set[int] = set()
        self.of_a_run = self.spans = self.samples = False

    def add(self, row: Mapping[str, Any]) -> None:
        self.rows += 1
        if type(rank := row.get("rank")) is int:
            self.ranks.add(rank)
        if not self.of_a_run and (
            isinstance(row.get("metrics"), Mapping)
            or row.get("kind") in (HYPERPARAMS_KIND, RESUME_KIND, END_KIND)
        ):
            self.of_a_run = True
        self.spans = self.spans or "resourceSpans" in row
        self.samples = self.samples or "sample" in row

    def problem(self, path: str | os.PathLike[str], skipped: SkippedLines) -> str | None:
        """Why these rows (``every_row``) of ``path`` are no run's metrics JSONL, naming what
        the file looks like and what to give instead; None when a row carries ``metrics`` or
        is a record about a run (its configuration, a resume: a run that has not logged a step
        yet is still a run)."""
        ranks = sorted(self.ranks)
        if len(ranks) > 1:
            # Ray Train's controller writes every rank's raw rows into one file: read as a
            # run, each step would be the values of the rank written last.
            named = ", ".join(map(str, ranks[:8])) + (", …" if len(ranks) > 8 else "")
            return (
                f"{os.fspath(path)} is not a run's metrics JSONL: it holds the raw rows of "
                f"{len(ranks)} ranks ({named}), each rank's own values; give the run's JSONL "
                "(the one rank 0's Logger writes), or one rank's file (rlmetrics.rank1.jsonl)"
            )
        if self.of_a_run:
            return None
        if self.spans:
            what = "it holds OTLP spans (a traces file: rlmetrics report takes it with --traces)"
        elif self.samples:
            what = "it holds sample rows (the samples file written beside a run's JSONL)"
        elif self.rows:
            what = f"none of its {self.rows} JSON objects is a metrics row"
        elif skipped.count:
            what = f"none of its {skipped.count} lines is a JSON object (another format?)"
        else:
            samples = samples_beside(path)
            if samples.is_file():  # the file its run writes, before its first metrics row
                return (
                    f"{os.fspath(path)} is empty: its run has logged no metrics row yet, only "
                    f"samples ({samples}); give it again once the run logs a step"
                )
            what = "it is empty"
        return (
            f"{os.fspath(path)} is not a run's metrics JSONL: {what}; give the file the "
            "Logger's jsonl backend writes (run/metrics.jsonl)"
        )


def not_a_run_problem(
    path: str | os.PathLike[str], rows: Iterable[Mapping[str, Any]], skipped: SkippedLines
) -> str | None:
    """:meth:`RowCensus.problem` of the rows :func:`read_jsonl` read from ``path``
    (``every_row``)."""
    census = RowCensus()
    for row in rows:
        census.add(row)
    return census.problem(path, skipped)


@attrs.define
class _Run:
    rows: list[dict[str, Any]] = attrs.Factory(list)
    hyperparams: dict[str, Any] = attrs.Factory(dict)
    resumed: int = 0
    repeated: set[int] = attrs.Factory(set)
    #: The attempt each row of ``rows`` belongs to (a resume or a step back starts the next).
    attempts: list[int] = attrs.Factory(list)
    attempt: int = 0
    #: In the current attempt: the latest step each prefix logged.
    latest: dict[str, int] = attrs.Factory(dict)
    #: The attempt that last logged each step.
    last_attempt: dict[int, int] = attrs.Factory(dict)
    #: How often the run was started again without resume: only its last attempt is kept.
    reruns: int = 0
    #: Whether ``rows`` keeps the rows (a report streamed from the file keeps only the rest).
    keep_rows: bool = True

    def add(self, row: Mapping[str, Any]) -> int:
        """Take ``row`` (kept in ``rows`` when ``keep_rows``); the attempt it belongs to."""
        if is_step_row(row):
            step, prefix = row["step"], row.get("prefix", "")
            if step < self.latest.get(prefix, step):
                self._next_attempt()
            self.latest[prefix] = step
            if self.last_attempt.get(step, self.attempt) != self.attempt:
                self.repeated.add(step)
            self.last_attempt[step] = self.attempt
        if self.keep_rows:
            self.rows.append(dict(row))
            self.attempts.append(self.attempt)
        return self.attempt

    def _next_attempt(self) -> None:
        self.attempt += 1
        self.latest = {}

    def resume(self) -> None:
        self.resumed += 1
        self._next_attempt()

    def shown_rows(self) -> list[dict[str, Any]]:
        """The rows without the step rows an attempt logged that a later one logged again."""
        return [
            row
            for row, attempt in zip(self.rows, self.attempts, strict=True)
            if not is_step_row(row) or self.last_attempt[row["step"]] == attempt
        ]


def split_runs(rows: Iterable[Mapping[str, Any]]) -> dict[str | None, _Run]:
    """``{run id: its last attempt's rows, configuration, resume count and repeated steps}``,
    in order."""
    runs: dict[str | None, _Run] = {}
    for row in rows:
        _place(runs, row)
    return runs


def _place(
    runs: dict[str | None, _Run], row: Mapping[str, Any], keep_rows: bool = True
) -> tuple[str | None, _Run, int] | None:
    """File ``row`` under its run in ``runs``: its run id, run and attempt when it is one of the
    run's rows, None when it is a record about the run (configuration, resume, rerun)."""
    run_id = row.get("run_id")
    key = run_id if isinstance(run_id, str) else None
    run = runs.get(key)
    if run is None:
        run = runs[key] = _Run(keep_rows=keep_rows)
    if starts_over(row):
        # A new attempt (a rerun without resume): what the earlier ones logged is theirs,
        # left out, as each tracker keeps the attempts apart.
        runs[key] = _Run(reruns=run.reruns + 1, keep_rows=keep_rows)
        return None
    kind = row.get("kind")
    if kind == HYPERPARAMS_KIND and isinstance(row.get("hyperparams"), Mapping):
        run.hyperparams.update(row["hyperparams"])
    elif kind == RESUME_KIND:
        run.resume()
    elif kind is None:
        return key, run, run.add(row)
    return None


def _samples(path: Path) -> dict[str | None, dict[str, Any]]:
    """Per run: how many sample rows the samples file holds, and the first rows of the latest
    table (its step and name)."""
    out: dict[str | None, dict[str, Any]] = {}
    if not path.is_file():
        return out
    for row in read_jsonl(path):
        sample = row.get("sample")
        if not isinstance(sample, Mapping):
            continue
        run_id = row.get("run_id") if isinstance(row.get("run_id"), str) else None
        found = out.setdefault(run_id, {"rows": 0, "tables": 0, "latest": None})
        found["rows"] += 1
        table = (row.get("step"), row.get("name"), row.get("time"))
        latest = found["latest"]
        if latest is None or latest["key"] != table:
            found["tables"] += 1
            latest = found["latest"] = {"key": table, "rows": []}
        if len(latest["rows"]) < SAMPLES_SHOWN:
            latest["rows"].append(dict(sample))
    return {
        run_id: {
            "rows": found["rows"],
            "tables": found["tables"],
            "latest_step": found["latest"]["key"][0],
            "latest_name": found["latest"]["key"][1],
            "shown": found["latest"]["rows"],
        }
        for run_id, found in out.items()
    }


def read_reports(
    path: str | os.PathLike[str],
    run: str | None = None,
    skipped: SkippedLines | None = None,
    *,
    steps: StepSelection | None = None,
    keys: Sequence[str] | None = None,
    key_map: str | None = None,
    damaged: DamagedRows | None = None,
    curves: bool = False,
    thin_curves: Thinning | None = None,
) -> list[RunReport]:
    """The report of every run in the JSONL at ``path`` (or of the one ``run`` names), each
    with its configuration, its latest samples (from the samples file beside it) and its
    repeated steps. Raises :class:`RunNotFound` for a ``run`` the file does not hold.

    ``steps`` limits each report to those steps (its regressions are still judged on the whole
    run); ``keys`` adds those series (:class:`~.select.UnknownKeys` names any a run did not
    log); ``curves`` every numeric series of the steps shown (the HTML page's), each made fewer
    by ``thin_curves`` when given (a series at a time: a long run's every point of every
    series is never held as a list). Each run is read
    through ``key_map`` (a key map's name), else through the map its rows show its trainer
    applied (:func:`~.keymap.found_key_map`); an unknown name raises ``ValueError``, a file with
    no metrics row :class:`NotARunFile`. Lines that are no row are counted into ``skipped``,
    rows no run holds (:func:`run_row_problem`) into ``damaged`` (each report's
    ``skipped_lines`` counts both); without them, one warning each says how many and names the
    first few."""
    path = Path(path)
    bad = SkippedLines() if skipped is None else skipped
    broken = DamagedRows() if damaged is None else damaged
    runs, last_line = _first_pass(path, bad, broken)
    if skipped is None and bad.count:
        logger.warning(bad.summary(path))
    if damaged is None and broken.count:
        logger.warning(broken.summary(path))
    runs = runs or {None: _Run(keep_rows=False)}
    if run is not None:
        if run not in runs:
            held = ", ".join(str(r) for r in runs) or "none"
            raise RunNotFound(f"{path} holds no run {run!r} (runs: {held})")
        runs = {run: runs[run]}
    readers: dict[str, RunKeys] = {}
    shown: dict[str | None, _ShownRows] = {}
    for run_id, found in runs.items():
        read = found_key_map(found.hyperparams, key_map)
        reader = None
        if read is not None:
            reader = readers.get(read.name) or readers.setdefault(read.name, RunKeys(read.name))
        shown[run_id] = _ShownRows(found, read, reader, steps, keys, curves)
    _second_pass(path, last_line, runs, shown)
    samples = _samples(samples_beside(path))
    reports = []
    for run_id, found in runs.items():
        taken = shown[run_id]
        report = taken.builder.report(source=str(path), skipped=bad.count + broken.count)
        if steps is not None and taken.all_step_times is not None:
            report = attrs.evolve(
                report,
                selection=steps.describe(),
                steps_logged=len(found.last_attempt),
                regressions=taken.all_step_times.judge().as_dict(),
            )
        reports.append(
            attrs.evolve(
                report,
                run_id=run_id,
                resumed=found.resumed,
                reruns=found.reruns,
                repeated_steps=tuple(sorted(found.repeated)),
                hyperparams=found.hyperparams or None,
                samples=samples.get(run_id),
                series=None
                if keys is None or taken.series is None
                else choose(keys, taken.series.series()),
                key_map=None if taken.read is None else taken.read.as_dict(),
                curves=None if taken.curves is None else taken.curves.series(thin_curves),
            )
        )
    return reports


class _LatestLine(list[int]):
    """``read_jsonl(lines=)`` that keeps only the latest row's line number (a long file's
    every line number is not held)."""

    latest: int | None = None

    def append(self, number: int) -> None:
        self.latest = number


def _first_pass(
    path: Path, bad: SkippedLines, broken: DamagedRows
) -> tuple[dict[str | None, _Run], int]:
    """Every run of the file without its rows (its attempts, the attempt that last logged each
    step, its configuration), taken as the file is read; and the line of the last row read,
    where the second pass stops (a file still being written reads as it was read here).
    Raises :class:`NotARunFile`."""
    census = RowCensus()
    runs: dict[str | None, _Run] = {}
    line = _LatestLine()
    for row in read_jsonl(path, every_row=True, skipped=bad, lines=line):
        census.add(row)
        problem = run_row_problem(row)
        if problem is None:
            _place(runs, row, keep_rows=False)
        else:
            broken.add(problem, line.latest)
    problem = census.problem(path, bad)
    if problem is not None:
        raise NotARunFile(problem)
    return runs, line.latest or 0


class _ShownRows:
    """What the report of one run takes of the rows it shows, as the second pass reads them:
    each row read through the run's key map; the run's regressions judged on every step, the
    report made of the steps ``steps`` selects."""

    def __init__(
        self,
        run: _Run,
        read: FoundKeyMap | None,
        reader: RunKeys | None,
        steps: StepSelection | None,
        keys: Sequence[str] | None,
        curves: bool,
    ) -> None:
        self.read, self.reader = read, reader
        self.builder = ReportBuilder()
        self.selected = None if steps is None else steps.steps(run.last_attempt)
        self.all_step_times = None if steps is None else StepTimes()
        self.series = None if keys is None else NumericSeries(keys)
        self.curves = NumericSeries() if curves else None

    def add(self, row: Mapping[str, Any]) -> None:
        metrics = row.get("metrics")
        if (
            self.reader is not None
            and isinstance(metrics, Mapping)
            and row.get("prefix", "") in TRAIN_PREFIXES
        ):
            row = {**row, "metrics": self.reader.read(metrics, row.get("prefix", ""))}
        if self.all_step_times is not None:
            self.all_step_times.add(row)
        if self.selected is not None and is_step_row(row) and row["step"] not in self.selected:
            return
        self.builder.add(row)
        for taken in (self.series, self.curves):
            if taken is not None:
                taken.add(row)


def _second_pass(
    path: Path,
    last_line: int,
    runs: Mapping[str | None, _Run],
    shown: Mapping[str | None, _ShownRows],
) -> None:
    """Read the file again up to ``last_line``, giving each run's report the rows it shows:
    those of the run's last attempt after its last rerun, and at each step, those of the
    attempt that logged it last (the attempts are told again as in the first pass)."""
    again: dict[str | None, _Run] = {}
    line = _LatestLine()
    rows = read_jsonl(path, every_row=True, skipped=SkippedLines(), lines=line)
    with contextlib.closing(cast("Generator[dict[str, Any], None, None]", rows)):
        for row in rows:
            if line.latest is not None and line.latest > last_line:
                break
            if run_row_problem(row) is not None:
                continue
            placed = _place(again, row, keep_rows=False)
            if placed is None:
                continue
            run_id, attempt_of, attempt = placed
            taken = shown.get(run_id)
            if taken is None or attempt_of.reruns != runs[run_id].reruns:
                continue
            if is_step_row(row) and runs[run_id].last_attempt[row["step"]] != attempt:
                continue
            taken.add(row)
