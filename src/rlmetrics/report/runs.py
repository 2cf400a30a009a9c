"""One JSONL file, several runs: the rows split by run id, each run with its configuration,
its latest samples and the steps it logged more than once.

Every row the JSONL backend writes carries ``run_id``; a file appended to by several runs (or by
one run and its resumed continuation, which shares its id) is split here, in the order the runs
first appear. Rows without a run id (files written before rlmetrics 0.3) are one run whose id is
None. Within a run, a trainer step logged twice under the same prefix is a repeat: a resumed
run that went back to its last checkpoint logs the steps after it again. The report keeps the
later values and says which steps repeated.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from .._warn import logger
from ..backends.jsonl import (
    HYPERPARAMS_KIND,
    RESUME_KIND,
    SkippedLines,
    read_jsonl,
    samples_path,
)
from ..events import TRAIN_PREFIXES
from .regressions import find_regressions
from .select import StepSelection, choose, is_step_row, numeric_series
from .summary import RunReport, build_report

__all__ = ["SAMPLES_SHOWN", "RunNotFound", "read_reports", "split_runs"]

#: Sample rows a report keeps (the first rows of the latest table of the run).
SAMPLES_SHOWN = 3


class RunNotFound(LookupError):
    """``--run`` named a run the file does not hold."""


@attrs.define
class _Run:
    rows: list[dict[str, Any]] = attrs.Factory(list)
    hyperparams: dict[str, Any] = attrs.Factory(dict)
    resumed: int = 0
    seen: set[tuple[str, int]] = attrs.Factory(set)
    repeated: set[int] = attrs.Factory(set)


def split_runs(rows: Iterable[Mapping[str, Any]]) -> dict[str | None, _Run]:
    """``{run id: its rows, configuration, resume count and repeated steps}``, in order."""
    runs: dict[str | None, _Run] = {}
    for row in rows:
        run_id = row.get("run_id")
        run = runs.setdefault(run_id if isinstance(run_id, str) else None, _Run())
        kind = row.get("kind")
        if kind == HYPERPARAMS_KIND and isinstance(row.get("hyperparams"), Mapping):
            run.hyperparams.update(row["hyperparams"])
        elif kind == RESUME_KIND:
            run.resumed += 1
        elif kind is None:
            run.rows.append(dict(row))
            step, prefix = row.get("step"), row.get("prefix", "")
            if prefix in TRAIN_PREFIXES and isinstance(step, int):
                if (prefix, step) in run.seen:
                    run.repeated.add(step)
                run.seen.add((prefix, step))
    return runs


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
) -> list[RunReport]:
    """The report of every run in the JSONL at ``path`` (or of the one ``run`` names), each
    with its configuration, its latest samples (from the samples file beside it) and its
    repeated steps. Raises :class:`RunNotFound` for a ``run`` the file does not hold.

    ``steps`` limits each report to those steps (its regressions are still judged on the
    whole run); ``keys`` adds those series (:class:`~.select.UnknownKeys` names any a run did
    not log). Lines that are no row are counted into ``skipped`` (each report's
    ``skipped_lines``); without it, one warning says how many and names the first few."""
    path = Path(path)
    bad = SkippedLines() if skipped is None else skipped
    rows = list(read_jsonl(path, every_row=True, skipped=bad))
    if skipped is None and bad.count:
        logger.warning(bad.summary(path))
    runs = split_runs(rows) or {None: _Run()}
    if run is not None:
        if run not in runs:
            held = ", ".join(str(r) for r in runs) or "none"
            raise RunNotFound(f"{path} holds no run {run!r} (runs: {held})")
        runs = {run: runs[run]}
    samples = _samples(samples_path(path))
    reports = []
    for run_id, found in runs.items():
        shown = found.rows if steps is None else steps.apply(found.rows)
        report = build_report(shown, source=str(path), skipped=bad.count)
        if steps is not None:
            report = attrs.evolve(
                report,
                selection=steps.describe(),
                steps_logged=len({r["step"] for r in found.rows if is_step_row(r)}),
                regressions=find_regressions(found.rows).as_dict(),
            )
        reports.append(
            attrs.evolve(
                report,
                run_id=run_id,
                resumed=found.resumed,
                repeated_steps=tuple(sorted(found.repeated)),
                hyperparams=found.hyperparams or None,
                samples=samples.get(run_id),
                series=None if keys is None else choose(keys, numeric_series(shown)),
            )
        )
    return reports
