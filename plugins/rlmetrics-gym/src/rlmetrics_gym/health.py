"""Rollout health as each rollout finishes: a verdict per rollout and the checks that flagged it.

- ``gym.rollout.health_verdict_total``: each evaluated rollout once, by verdict (``healthy``,
  ``unhealthy``, ``unobserved``) and outcome (``scored``, ``failed``).
- ``gym.rollout.health_flagged_total``: once per check that produced at least one finding
  for a rollout (however many findings), by check id and outcome. One rollout can be flagged
  by several checks, so the sum over checks can exceed the unhealthy count.

The checks are pluggable: a distribution offers trajectory checks through this distribution's
own hook, ``gym_health_checks()``, found through entry points in the ``rlmetrics_gym`` group
(this distribution's built-in checks load the same way). A check is a pure function of one
rollout record: it returns its findings (an empty list when it ran and found nothing) or None
when it could not run (the evidence it reads is missing). A check that raises yields a
``check_execution_error`` finding and counts as not run.

Verdict: ``unhealthy`` if any check found something, else ``unobserved`` if at least one check
could not run, else ``healthy``. The same :class:`HealthSuite` — and so the same ignore list —
serves the live counters (:func:`observe_rollout`) and the post-run report
(:func:`health_report`), so the two always agree on what counts.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import importlib.metadata
import io
import json
import lzma
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, cast

import attrs
import pluggy

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec, is_exporting, record, resets_process_state, warn_once
from rlmetrics.spec import SUM

from ._attribute_values import IDENTIFIER, OUTCOME_ATTR, member

__all__ = [
    "CHECK_ATTR",
    "CHECK_EXECUTION_ERROR",
    "ENTRY_POINT_GROUP",
    "FLAGGED",
    "GROUP",
    "HEALTH_OUTCOMES",
    "HealthHookSpecs",
    "HealthReport",
    "HealthResult",
    "HealthSuite",
    "SPECS",
    "TrajectoryCheck",
    "VERDICTS",
    "VERDICT_ATTR",
    "VERDICT_TOTAL",
    "configure_health",
    "configured_health",
    "default_suite",
    "health_hookimpl",
    "health_hookspec",
    "health_report",
    "health_report_from_jsonl",
    "load_checks",
    "normalize_ignored_checks",
    "observe_rollout",
    "record_health",
]

GROUP = "gym.health"
VERDICT_TOTAL: Final = "gym.rollout.health_verdict_total"
FLAGGED: Final = "gym.rollout.health_flagged_total"
VERDICT_ATTR: Final = "nemo.gym.health.verdict"
CHECK_ATTR: Final = "nemo.gym.health.check"

VERDICTS: Final = frozenset({"healthy", "unhealthy", "unobserved"})
#: Omitted attempts wrote nothing to evaluate; only these two outcomes carry health.
HEALTH_OUTCOMES: Final = frozenset({"scored", "failed"})
#: The finding a check that raised leaves behind (it can be ignored like any check).
CHECK_EXECUTION_ERROR: Final = "check_execution_error"
_MAX_CHECKS = 128

SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        VERDICT_TOTAL,
        Kind.COUNTER,
        unit="{rollout}",
        description="Evaluated rollouts by health verdict and outcome.",
        attributes={VERDICT_ATTR: VERDICTS, OUTCOME_ATTR: HEALTH_OUTCOMES},
        reduce=SUM,
    ),
    MetricSpec(
        FLAGGED,
        Kind.COUNTER,
        unit="{rollout}",
        description="Rollouts a health check flagged (once per check with at least one "
        "finding), by check id and outcome.",
        # Ids come only from loaded checks (at most _MAX_CHECKS) plus check_execution_error,
        # each matching the identifier template, so the open key stays bounded.
        attributes={CHECK_ATTR: OPEN, OUTCOME_ATTR: HEALTH_OUTCOMES},
        max_series=2 * (_MAX_CHECKS + 1),
        reduce=SUM,
    ),
)

rlmetrics.declare(GROUP, SPECS)

# -- the checks and their hook ----------------------------------------------------------------

#: Entry-point group (and pluggy project name) of this distribution's own hooks.
ENTRY_POINT_GROUP: Final = "rlmetrics_gym"
health_hookspec = pluggy.HookspecMarker(ENTRY_POINT_GROUP)
health_hookimpl = pluggy.HookimplMarker(ENTRY_POINT_GROUP)

CheckFunction = Callable[[Mapping[str, Any]], "Iterable[Any] | None"]


def _check_id(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
        raise ValueError(
            f"a trajectory check id must be a snake_case identifier of at most 64 characters "
            f"([a-z][a-z0-9_]*), got {value!r}"
        )
    if value == CHECK_EXECUTION_ERROR:
        raise ValueError(f"{CHECK_EXECUTION_ERROR!r} is reserved for checks that raise")


@attrs.frozen
class TrajectoryCheck:
    """One rollout-level check: ``run(rollout)`` returns its findings (any objects; an empty
    sequence when it ran and found nothing) or None when it could not run."""

    id: str = attrs.field(validator=_check_id)
    run: CheckFunction = attrs.field(validator=attrs.validators.is_callable())
    description: str = ""


class HealthHookSpecs:
    """The hooks of the ``rlmetrics_gym`` project."""

    @health_hookspec
    def gym_health_checks(self) -> Iterable[TrajectoryCheck]:  # type: ignore[empty-body]
        """Offer trajectory checks: return an iterable of :class:`TrajectoryCheck`.

        Implement it in a module listed as an entry point in the ``rlmetrics_gym`` group::

            [project.entry-points.rlmetrics_gym]
            my_checks = "my_package.health_checks"
        """


def load_checks() -> tuple[TrajectoryCheck, ...]:
    """Every check offered through the ``rlmetrics_gym`` entry points, in entry-point name
    order. A plugin that fails to import, raises in its hook or offers something that is not a
    :class:`TrajectoryCheck` is skipped with a warning; a second check with an id already
    taken is skipped, naming both plugins. Never raises."""
    manager = pluggy.PluginManager(ENTRY_POINT_GROUP)
    manager.add_hookspecs(HealthHookSpecs)
    entry_points = sorted(
        importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name
    )
    for ep in entry_points:
        if manager.has_plugin(ep.name):
            continue
        try:
            manager.register(ep.load(), name=ep.name)
        except (Exception, SystemExit) as exc:  # a plugin's import may call sys.exit
            warn_once(
                f"gym:health:load:{ep.name}",
                f"rlmetrics-gym: health-check plugin {ep.name!r} ({ep.value}) could not be "
                f"loaded and is skipped; the other checks load: {type(exc).__name__}",
            )
    checks: dict[str, tuple[TrajectoryCheck, str]] = {}
    for impl in manager.hook.gym_health_checks.get_hookimpls():
        try:
            offered = list(cast("Iterable[Any]", impl.function()))
        except Exception:
            warn_once(
                f"gym:health:hook:{impl.plugin_name}",
                f"rlmetrics-gym: health-check plugin {impl.plugin_name!r} raised in "
                "gym_health_checks; its checks are skipped",
            )
            continue
        for check in offered:
            if not isinstance(check, TrajectoryCheck):
                warn_once(
                    f"gym:health:type:{impl.plugin_name}",
                    f"rlmetrics-gym: health-check plugin {impl.plugin_name!r} offered a "
                    f"{type(check).__name__}, not a TrajectoryCheck; skipped",
                )
            elif check.id in checks:
                warn_once(
                    f"gym:health:clash:{check.id}",
                    f"rlmetrics-gym: check id {check.id!r} is offered by both "
                    f"{checks[check.id][1]!r} and {impl.plugin_name!r}; the first is kept",
                )
            elif len(checks) >= _MAX_CHECKS:
                warn_once(
                    "gym:health:cap",
                    f"rlmetrics-gym: more than {_MAX_CHECKS} health checks; the rest are skipped",
                )
            else:
                checks[check.id] = (check, impl.plugin_name)
    return tuple(check for check, _ in checks.values())


def normalize_ignored_checks(
    value: str | Iterable[str] | None, known: Iterable[str]
) -> tuple[str, ...]:
    """The ids to ignore, from a comma-separated string or a sequence of ids.

    Blanks are stripped, empties and repeats dropped, order kept. An id that is not a known
    check is a configuration mistake and raises ValueError naming it and the known ids.
    """
    if value is None:
        return ()
    raw = value.split(",") if isinstance(value, str) else list(value)
    not_text = [item for item in raw if not isinstance(item, str)]
    if not_text:
        raise ValueError(f"ignored check ids must be strings, got {not_text!r}")
    ids = tuple(dict.fromkeys(item.strip() for item in raw if item.strip()))
    known_ids = set(known)
    unknown = sorted(set(ids) - known_ids)
    if unknown:
        raise ValueError(
            f"unknown rollout health check(s) to ignore: {', '.join(unknown)}; "
            f"known: {', '.join(sorted(known_ids))}"
        )
    return ids


@attrs.frozen
class HealthResult:
    """One rollout's evaluation: its verdict, the findings of each check that flagged it (in
    suite order) and the checks that could not run."""

    verdict: str
    findings: Mapping[str, tuple[Any, ...]] = attrs.field(factory=dict)
    unobserved: tuple[str, ...] = ()

    @property
    def flagged(self) -> tuple[str, ...]:
        """The ids of the checks that found something."""
        return tuple(self.findings)


class HealthSuite:
    """A fixed set of checks and the ids to ignore: what both the live counters and the
    post-run report evaluate."""

    def __init__(
        self,
        checks: Iterable[TrajectoryCheck],
        ignored: str | Iterable[str] | None = None,
    ) -> None:
        self.checks: tuple[TrajectoryCheck, ...] = tuple(checks)
        ids = [check.id for check in self.checks]
        duplicated = sorted({i for i in ids if ids.count(i) > 1})
        if duplicated:
            raise ValueError(f"duplicate trajectory check ids: {', '.join(duplicated)}")
        if len(ids) > _MAX_CHECKS:
            raise ValueError(f"at most {_MAX_CHECKS} trajectory checks, got {len(ids)}")
        self.ignored: tuple[str, ...] = normalize_ignored_checks(ignored, self.ids)
        self._active = tuple(check for check in self.checks if check.id not in self.ignored)
        self._report_errors = CHECK_EXECUTION_ERROR not in self.ignored

    @property
    def ids(self) -> tuple[str, ...]:
        """Every id a finding can carry: the checks' and ``check_execution_error``."""
        return (*(check.id for check in self.checks), CHECK_EXECUTION_ERROR)

    def with_ignored(self, ignored: str | Iterable[str] | None) -> HealthSuite:
        """The same checks with another ignore list."""
        return HealthSuite(self.checks, ignored)

    def evaluate(self, rollout: Mapping[str, Any]) -> HealthResult:
        """Run every check that is not ignored on one rollout record. Never raises."""
        findings: dict[str, tuple[Any, ...]] = {}
        errors: list[dict[str, str]] = []
        unobserved: list[str] = []
        for check in self._active:
            try:
                found = check.run(rollout)
                found = None if found is None else tuple(found)
            except Exception as exc:
                warn_once(
                    f"gym:health:raised:{check.id}",
                    f"rlmetrics-gym: health check {check.id!r} raised; recorded as "
                    f"{CHECK_EXECUTION_ERROR}",
                )
                unobserved.append(check.id)
                errors.append({"failed_check": check.id, "error": type(exc).__name__})
                continue
            if found is None:
                unobserved.append(check.id)
            elif found:
                findings[check.id] = found
        if errors and self._report_errors:
            findings[CHECK_EXECUTION_ERROR] = tuple(errors)
        verdict = "unhealthy" if findings else "unobserved" if unobserved else "healthy"
        return HealthResult(verdict, findings, tuple(unobserved))


_default: HealthSuite | None = None
_default_lock = threading.Lock()


@resets_process_state
def _forget_default_suite() -> None:
    global _default
    with _default_lock:
        _default = None  # configure_health's choice; the next use loads the entry points'


def default_suite() -> HealthSuite:
    """The suite :func:`observe_rollout` and :func:`health_report` use unless given one: every
    check from the entry points (loaded on first use), with the ignore list set by
    :func:`configure_health`."""
    global _default
    with _default_lock:
        if _default is None:
            _default = HealthSuite(load_checks())
        return _default


def configure_health(
    *,
    ignored_checks: str | Iterable[str] | None = None,
    checks: Iterable[TrajectoryCheck] | None = None,
) -> HealthSuite:
    """Set the default suite's ignore list (Gym's ``health_check_ignored_checks``) and,
    optionally, its checks (default: the entry points'). Raises ValueError for an unknown id,
    before anything changes. Returns the new default suite."""
    global _default
    suite = HealthSuite(load_checks() if checks is None else checks, ignored_checks)
    with _default_lock:
        _default = suite
    return suite


@contextlib.contextmanager
def configured_health(
    *,
    ignored_checks: str | Iterable[str] | None = None,
    checks: Iterable[TrajectoryCheck] | None = None,
) -> Iterator[HealthSuite]:
    """:func:`configure_health` for a ``with`` block only (tests): the block's default suite is
    yielded, and the one before comes back after the block, even when it raises. An unknown
    id raises before the block."""
    global _default
    with _default_lock:
        before = _default
    suite = configure_health(ignored_checks=ignored_checks, checks=checks)
    try:
        yield suite
    finally:
        with _default_lock:
            _default = before


# -- the live counters ------------------------------------------------------------------------


def record_health(result: HealthResult, outcome: str) -> None:
    """Count one evaluated rollout: its verdict once, and each check that flagged it once.
    Never raises."""
    if not is_exporting():
        return
    try:
        if not member(outcome, HEALTH_OUTCOMES) or not member(result.verdict, VERDICTS):
            warn_once(
                "gym:health:outcome",
                f"rlmetrics-gym: health is counted for outcomes {sorted(HEALTH_OUTCOMES)} "
                "with verdicts from HealthSuite.evaluate; this rollout is not counted",
            )
            return
        record(GROUP, {VERDICT_TOTAL: 1}, {VERDICT_ATTR: result.verdict, OUTCOME_ATTR: outcome})
        for check_id in result.flagged:
            if isinstance(check_id, str) and IDENTIFIER.fullmatch(check_id):
                record(GROUP, {FLAGGED: 1}, {CHECK_ATTR: check_id, OUTCOME_ATTR: outcome})
    except Exception:
        warn_once("gym:health:record", "rlmetrics-gym: recording rollout health failed")


def observe_rollout(
    rollout: Mapping[str, Any], outcome: str, suite: HealthSuite | None = None
) -> HealthResult | None:
    """Evaluate a finished rollout and count it: the live path, called as each rollout that
    ran finishes (``scored``, or ``failed`` with agent evidence). Returns the result, or None
    when telemetry is not exporting (nothing is evaluated then). Never raises."""
    if not is_exporting():
        return None
    if not member(outcome, HEALTH_OUTCOMES):  # omitted attempts wrote nothing to evaluate
        warn_once(
            "gym:health:outcome",
            f"rlmetrics-gym: health is evaluated for outcomes {sorted(HEALTH_OUTCOMES)} only; "
            "this rollout is not evaluated",
        )
        return None
    if not isinstance(rollout, Mapping):  # the checks read a record; this is no rollout
        _said_not_a_mapping(rollout)
        return None
    try:
        result = (suite or default_suite()).evaluate(rollout)
    except Exception:
        warn_once("gym:health:evaluate", "rlmetrics-gym: evaluating rollout health failed")
        return None
    record_health(result, outcome)
    return result


# -- the post-run report ------------------------------------------------------------------------


@attrs.frozen
class HealthReport:
    """The post-run summary over a set of rollouts, from the same suite as the counters.

    ``flagged`` counts rollouts per check (what ``health_flagged_total`` counts); ``findings``
    counts findings per check (a rollout can have several); ``unreadable`` counts JSONL lines
    that were not a JSON object (and given records that were not mappings).
    """

    rollouts: int
    verdicts: Mapping[str, int]
    flagged: Mapping[str, int]
    findings: Mapping[str, int]
    ignored: tuple[str, ...]
    unreadable: int = 0


def health_report(
    rollouts: Iterable[Mapping[str, Any]], suite: HealthSuite | None = None
) -> HealthReport:
    """Evaluate every rollout record (the scored output, as Gym's report reads it); an item
    that is not a mapping counts as unreadable, as in :func:`health_report_from_jsonl`."""

    def rows() -> Iterable[tuple[Mapping[str, Any], bool]]:
        for rollout in rollouts:
            if isinstance(rollout, Mapping):
                yield rollout, True
            else:
                _said_not_a_mapping(rollout)
                yield {}, False

    return _report(rows(), suite or default_suite())


def _said_not_a_mapping(rollout: Any) -> None:
    warn_once(
        "gym:health:not-a-mapping",
        f"rlmetrics-gym: a rollout to evaluate is a {type(rollout).__name__}, not a mapping "
        "(the result row as written); it is not evaluated",
    )


def health_report_from_jsonl(
    path: str | Path | Sequence[str | Path], suite: HealthSuite | None = None
) -> HealthReport:
    """The report over one or more JSONL files of rollout records, plain or compressed (gzip,
    bz2, xz, as :func:`~rlmetrics_gym.driver.write_output_row` writes them); blank lines are
    skipped, and a line that is not a JSON object, or not UTF-8, counts as unreadable."""
    paths = [path] if isinstance(path, (str, Path)) else list(path)

    def rows() -> Iterable[tuple[Mapping[str, Any], bool]]:
        for one in paths:
            # Bytes, decoded line by line: a run killed mid-write leaves its last line cut
            # inside a UTF-8 character, which costs that line only, not the report.
            with _open_output(one) as handle:
                for line in _lines(handle):
                    if line is None:  # the compressed stream was cut: the rest is lost
                        yield {}, False
                        break
                    if not line.strip():
                        continue
                    try:
                        parsed = json.loads(line.decode("utf-8"))
                    except ValueError:  # UnicodeDecodeError and JSONDecodeError both
                        parsed = None
                    yield (parsed, True) if isinstance(parsed, dict) else ({}, False)

    return _report(rows(), suite or default_suite())


def _lines(handle: io.BufferedIOBase) -> Iterator[bytes | None]:
    """The lines of ``handle``, then None if a compressed stream ended before its end marker
    (a run killed mid-write), where iterating it raises ``EOFError``."""
    lines = iter(handle)
    while True:
        try:
            yield next(lines)
        except StopIteration:
            return
        except EOFError:
            yield None
            return


def _open_output(path: str | Path) -> io.BufferedIOBase:
    """``path`` opened for reading bytes, decompressed when its first bytes say it is one of
    the compressed files write_output_row writes (gzip, bz2, xz)."""
    with open(path, "rb") as probe:
        magic = probe.read(6)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(path, "rb")
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(path, "rb")
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(path, "rb")
    return open(path, "rb")


def _report(rows: Iterable[tuple[Mapping[str, Any], bool]], suite: HealthSuite) -> HealthReport:
    verdicts: Counter[str] = Counter()
    flagged: Counter[str] = Counter()
    findings: Counter[str] = Counter()
    total = unreadable = 0
    for row, readable in rows:
        if not readable:
            unreadable += 1
            continue
        total += 1
        result = suite.evaluate(row)
        verdicts[result.verdict] += 1
        for check_id, found in result.findings.items():
            flagged[check_id] += 1
            findings[check_id] += len(found)
    return HealthReport(
        rollouts=total,
        verdicts={verdict: verdicts[verdict] for verdict in sorted(VERDICTS)},
        flagged=dict(flagged),
        findings=dict(findings),
        ignored=suite.ignored,
        unreadable=unreadable,
    )
