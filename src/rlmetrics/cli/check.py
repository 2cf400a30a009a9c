"""Lint every declared series the way a reviewer of an OpenTelemetry schema would: name syntax
and namespace, UCUM units, the unit not repeated in the name, no _total on OpenTelemetry
names (Prometheus adds it to counters), histogram buckets present and strictly increasing,
open attributes that look unbounded (ids, steps, paths, free text) or belong on the resource,
one name declared twice (also once translated to Prometheus), plugins that failed to load,
and every key map offered (its series declared and recordable, its categories known, no two
keys on one series).

One line per finding, naming the plugin and the series; exit status 1 when any is an error.
Departures a family's specification fixes (Gym's _ms and _total names) are declared by that
family (the register_check_exemptions hook) and listed as exempt with --json.

--run RUN.jsonl also tries every key the run logged at a trainer step through the installed
plugins and lists those no declared series reads (they reach the trackers, never
OpenTelemetry), each with the line that would declare a series for it (it runs as printed);
--key-map NAME applies the key map the run's Logger used (a transformers/TRL run's is found
from its hyperparameters), and the keys the map keeps to the backends on purpose are not
listed. It also lists the keys nothing knows — no declared series, key-map rule or
documented list (rlmetrics.known_keys: typos such as kl_penalti, a prefix such as trian) —
with the nearest known key, by the same decision Logger(unknown_keys="warn") makes while a
run logs. Exit status 1 when --run finds any."""

from __future__ import annotations

import argparse
import sys
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from ..check import ERROR, check_plugins
from ..plugins import load_plugins, normalize
from ..registry import default_registry
from ._output import add_format_options, input_problem, print_json
from .plugins import print_failures

if TYPE_CHECKING:
    from ..known_keys import Unknown
    from ..report.keymap import FoundKeyMap
    from ..report.unexported import Unexported

__all__ = ["HELP", "NAME", "add_arguments", "run"]

NAME = "check"
HELP = "lint every declared series (names, units, buckets, attributes); non-zero on errors"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--plugin",
        metavar="NAME",
        help="check only this plugin (its entry-point or distribution name)",
    )
    parser.add_argument(
        "--run",
        dest="run_jsonl",
        type=Path,
        metavar="RUN.jsonl",
        help="also list the keys this run logged that no declared series reads",
    )
    parser.add_argument(
        "--key-map",
        metavar="NAME",
        help="with --run: the key map the run's Logger used (Logger(key_map=NAME))",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="after the findings, each failed plugin's whole reason and its traceback",
    )
    add_format_options(parser)


def run(args: argparse.Namespace) -> int:
    plugins = load_plugins(quiet=True)  # a failed plugin is a finding; --verbose says why
    if args.plugin is not None:
        wanted = normalize(args.plugin)
        if not any(
            wanted in (normalize(info.name), normalize(info.distribution or ""))
            for info in plugins.infos
        ):
            sys.stderr.write(
                f"rlmetrics check: no plugin named {args.plugin!r} (see rlmetrics plugins)\n"
            )
            return 2
    result = check_plugins(plugins, default_registry().declared(), only=args.plugin)
    run_found: _RunFindings | None = None
    if args.run_jsonl is not None:
        found = _unexported(args.run_jsonl, args.key_map)
        if isinstance(found, str):
            sys.stderr.write(f"rlmetrics check: {found}\n")
            return 2
        run_found = found
    if args.json:
        document = result.as_dict()
        if run_found is not None:
            document["run"] = run_found.as_dict(args.run_jsonl)
        print_json(document, "rlmetrics check")
    else:
        for finding in result.findings:
            sys.stdout.write(finding.line() + "\n")
        sys.stdout.write(
            f"{len(result.checked)} series checked: {result.errors} errors, "
            f"{result.warnings} warnings, {len(result.exempt)} exempt; "
            f"{len(result.key_maps)} key maps checked\n"
        )
        if run_found is not None:
            _print_unexported(args.run_jsonl, run_found)
        only = None if args.plugin is None else normalize(args.plugin)
        print_failures(
            [
                info
                for info in plugins.infos
                if only is None
                or only in (normalize(info.name), normalize(info.distribution or ""))
            ],
            args.verbose,
        )
    failed = any(f.severity == ERROR for f in result.findings) or bool(
        run_found is not None and (run_found.unexported or run_found.unknown)
    )
    return 1 if failed else 0


def _unexported(path: Path, key_map: str | None) -> _RunFindings | str:
    """The run's keys no series reads, or what is wrong with the arguments."""
    from ..backends.jsonl import HYPERPARAMS_KIND, SkippedLines, read_jsonl
    from ..keymaps import resolve_key_map
    from ..known_keys import unknown_in_rows
    from ..report.keymap import found_key_map
    from ..report.runs import DamagedRows, RowCensus, run_row_problem
    from ..report.unexported import declared_backend_only, kept_to_backends, unexported_keys

    problem = input_problem(path)
    if problem is not None:
        return problem
    try:
        skipped, damaged, census = SkippedLines(), DamagedRows(), RowCensus()
        hyperparams: dict[str, Any] = {}
        keys = _KeysLogged()
        line: deque[int] = deque(maxlen=1)  # the row's line, for a damaged one's name
        # Rows are taken as they are read (a run of 10^5 steps held 460 MB as a list): what
        # the findings read of them is each key's first logging.
        for row in read_jsonl(path, every_row=True, skipped=skipped, lines=line):
            census.add(row)
            why = run_row_problem(row)  # report's and query's rule: a row no run holds
            if why is not None:
                damaged.add(why, line[-1])
                continue
            if row.get("kind") == HYPERPARAMS_KIND and isinstance(row.get("hyperparams"), dict):
                hyperparams.update(row["hyperparams"])
            keys.add(row)
        problem = census.problem(path, skipped)
        if problem is not None:
            return problem
        for counted in (skipped, damaged):  # each cost only itself, and is said
            if counted.count:
                sys.stderr.write(counted.summary(path) + "\n")
        rows = keys.rows
        found = found_key_map(hyperparams, key_map)
        missing, tried = unexported_keys(rows, None if found is None else found.name)
        kept = [] if found is None else kept_to_backends(rows, found.name)
        # Declared as reaching the trackers only (a key map's rule counts first): not tried.
        backend_only = [name for name in declared_backend_only(rows) if name not in kept]
        mapped = None if found is None else resolve_key_map(found.name)
        unknown = unknown_in_rows(rows, mapped)
        return _RunFindings(
            missing, tried, found, kept, unknown, skipped.count + damaged.count, backend_only
        )
    except (KeyError, ValueError) as exc:  # an unknown key map
        return str(exc.args[0] if exc.args else exc)


class _KeysLogged:
    """What ``check --run`` reads of a run's rows, taken one row at a time: each (prefix, key)
    the first time it is logged, and the first number logged under it at a trainer step, as
    rows of one key each, in the order first logged (what the findings of every row are
    found from)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._seen: set[tuple[Any, Any]] = set()
        self._numbers: set[tuple[Any, Any]] = set()

    def add(self, row: Mapping[str, Any]) -> None:
        from ..report.select import is_step_row
        from ..values import as_number

        metrics, prefix = row.get("metrics"), row.get("prefix", "")
        if not isinstance(metrics, Mapping):
            return
        fresh = [key for key in metrics if (prefix, key) not in self._seen]
        if fresh:  # the known-keys check reads each key's first logging, under any prefix
            self._seen.update((prefix, key) for key in fresh)
            self.rows.append({"prefix": prefix, "metrics": dict.fromkeys(fresh)})
        if not is_step_row(row):
            return
        for key, value in metrics.items():
            if (prefix, key) not in self._numbers and as_number(value) is not None:
                self._numbers.add((prefix, key))
                self.rows.append({"step": row["step"], "prefix": prefix, "metrics": {key: value}})


@attrs.frozen
class _RunFindings:
    unexported: list[Unexported]
    tried: int
    key_map: FoundKeyMap | None
    kept: list[str]
    #: The keys nothing knows, as Logger(unknown_keys="warn") says them (the same decision).
    unknown: list[Unknown]
    #: Lines of the file that were no row (torn, not JSON): said, and in --json.
    skipped_lines: int = 0
    #: The keys declared as reaching the trackers only (declare_keys(..., backend_only=True)):
    #: counted, not listed.
    backend_only: list[str] = attrs.Factory(list)

    def as_dict(self, path: Path) -> dict[str, Any]:
        return {
            "path": str(path),
            "keys_tried": self.tried,
            "key_map": None if self.key_map is None else self.key_map.as_dict(),
            "kept_to_backends": self.kept,
            "declared_backend_only": self.backend_only,
            "unexported": [u.as_dict() for u in self.unexported],
            "unknown_keys": [u.as_dict() for u in self.unknown],
            "skipped_lines": self.skipped_lines,
        }


def _print_unexported(path: Path, found: _RunFindings) -> None:
    if found.key_map is not None:
        sys.stdout.write(
            f"{path}: read through key map {found.key_map.name!r} ({found.key_map.how}); "
            f"{len(found.kept)} keys it keeps to the backends on purpose are not listed\n"
        )
    if found.unknown:
        sys.stdout.write(
            f"{path}: {len(found.unknown)} keys logged are known to no declared series, key-map "
            'rule or documented list (typos?), as Logger(unknown_keys="warn") says them:\n'
        )
        width = max(len(unknown.name) for unknown in found.unknown)
        for unknown in found.unknown:
            hint = unknown.hint() or "no known key is close"
            sys.stdout.write(f"  {unknown.name:<{width}}  {hint}\n")
    unexported, tried = found.unexported, found.tried
    if found.backend_only:
        sys.stdout.write(
            f"{path}: {len(found.backend_only)} keys declared as reaching the trackers only "
            "are not listed (declare_keys(..., backend_only=True): the counters every trainer "
            "logs, eval and test dicts, ...)\n"
        )
    if not tried:  # a run that has logged only its configuration, or nothing numeric, so far
        if found.backend_only or found.kept:
            return  # every key it logged is one said above
        sys.stdout.write(f"{path}: no metric key logged yet: nothing to check\n")
        return
    if not unexported:
        sys.stdout.write(f"{path}: every one of the {tried} keys logged reaches a series\n")
        return
    sys.stdout.write(
        f"{path}: {len(unexported)} of the {tried} keys logged reach the trackers only (no "
        "declared series reads them); the line that would declare each:\n"
    )
    width = max(len(u.name) for u in unexported)
    for u in unexported:
        sys.stdout.write(f"  {u.name:<{width}}  {u.remedy}\n")
