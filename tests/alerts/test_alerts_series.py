"""Every alert rule reads the series it says it reads, and only those: its expression names
each of its ``reads`` (and no other declared series), its examples feed only those, its
section of docs/operations.md names no other; and, run by ``promtool``, every example that
fires stays quiet when the same samples arrive on a sibling series instead (a rule reading
``rlmetrics.backend.failed`` where it says ``dropped`` would fire on them). Examples built from
the same variable as the expression cannot catch a wrong series; these can."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import rlmetrics
from rlmetrics._yaml import render_yaml
from rlmetrics.alerts.model import AlertExample, AlertRule
from rlmetrics.alerts.rules import collect_rules, promtool_tests, rule_groups
from rlmetrics.dashboard.promql import Names

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def _names() -> Names:
    return Names(item.spec for item in rlmetrics.default_registry().declared())


def _forms(names: Names, series: str) -> dict[str, str]:
    """The Prometheus sample names of a declared series, each with its form."""
    forms: dict[str, str] = {}
    for form, name in (
        ("gauge", lambda: names.gauge(series)),
        ("counter", lambda: names.counter(series)),
        *(
            (f"histogram_{s}", lambda s=s: names.histogram(series, s))
            for s in ("bucket", "sum", "count")
        ),
    ):
        try:
            forms[name()] = form
        except ValueError:
            continue
    return forms


def _declared_samples(names: Names) -> dict[str, tuple[str, str]]:
    """Every declared series' sample names: ``{sample name: (series, form)}``."""
    return {
        sample: (item.spec.name, form)
        for item in rlmetrics.default_registry().declared()
        for sample, form in _forms(names, item.spec.name).items()
    }


def _rules() -> list[AlertRule]:
    rules, problems, _ = collect_rules()
    assert problems == []
    return rules


def test_every_expression_names_the_series_it_reads_and_no_other() -> None:
    names = _names()
    declared = _declared_samples(names)
    for rule in _rules():
        named = {declared[t][0] for t in _IDENTIFIER.findall(rule.expr) if t in declared}
        assert named == set(rule.reads), (rule.name, rule.expr)
        for example in rule.examples:
            fed = {
                declared[name][0]
                for name in (s.split("{", 1)[0] for s, _ in example.series)
                if name in declared
            }
            assert fed <= set(rule.reads), (rule.name, example.title, fed)


def test_the_series_each_alert_s_section_names_are_the_ones_it_reads() -> None:
    text = OPERATIONS.read_text()
    # What fires each alert: its section up to its runbook ("What to do" may name other
    # series to look at).
    sections = {
        block.split("\n", 1)[0].strip(): block.split("**What to do:**", 1)[0]
        for block in text.split("\n### ")[1:]
    }
    declared = {item.spec.name for item in rlmetrics.default_registry().declared()}
    for rule in _rules():
        mentioned = {
            name
            for name in declared
            if re.search(rf"(?<![\w.]){re.escape(name)}(?![\w.])", sections[rule.name])
        }
        assert mentioned <= set(rule.reads), (rule.name, mentioned)


def _sibling_examples(rule: AlertRule, names: Names) -> Iterator[AlertExample]:
    """Each firing example of ``rule`` with every sample of a series it reads moved to a
    sibling: a declared series of the same form that the rule does not read, the closest in
    name first (``rlmetrics.backend.failed`` for ``rlmetrics.backend.dropped``)."""
    declared = _declared_samples(names)
    taken: set[str] = set(rule.reads)
    siblings: dict[str, str] = {}
    for read in rule.reads:
        form = next(iter(_forms(names, read).values())).split("_", 1)[0]

        def closeness(other: str, read: str = read) -> tuple[int, str]:
            common = 0
            for a, b in zip(read.split("."), other.split("."), strict=False):
                if a != b:
                    break
                common += 1
            return (-common, other)

        candidates = sorted(
            (
                series
                for series, _form in set(declared.values())
                if series not in taken and _form.split("_", 1)[0] == form
            ),
            key=closeness,
        )
        assert candidates, f"{rule.name}: no sibling of {read}"
        siblings[read] = candidates[0]
        taken.add(candidates[0])
    for example in rule.examples:
        if not example.alerts:
            continue
        moved = []
        for series, values in example.series:
            name, brace, labels = series.partition("{")
            if name in declared and declared[name][0] in siblings:
                read, form = declared[name]
                sibling = {v: k for k, v in _forms(names, siblings[read]).items()}[form]
                series = f"{sibling}{brace}{labels}"
            moved.append((series, values))
        yield AlertExample(
            f"{example.title}, on {sorted(siblings.values())}",
            moved,
            at_s=example.at_s,
            interval_s=example.interval_s,
        )


def test_a_rule_stays_quiet_when_only_a_sibling_series_grows(
    promtool_test_rules: Callable[..., Any],
) -> None:
    names = _names()
    rules = [rule for rule in _rules() if rule.reads]
    assert {"RLMetricsBackendDropping", "RLMetricsBackendFailing", "RLStepStalled"} <= {
        rule.name for rule in rules
    }
    moved = [
        AlertRule(
            rule.name,
            rule.expr,
            rule.summary,
            rule.runbook,
            rule.for_s,
            severity=rule.severity,
            reads=rule.reads,
            examples=[*_sibling_examples(rule, names)],
            group=rule.group,
        )
        for rule in rules
    ]
    assert all(rule.examples for rule in moved)
    tested = promtool_test_rules(
        render_yaml(rule_groups(rules, annotations=False)), promtool_tests(moved, "rules.yml")
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.parametrize("reads", [("rlmetrics.backend.dropped",), ("rlmetrics.backend.failed",)])
def test_the_sibling_of_a_backend_counter_is_the_other_one(reads: tuple[str, ...]) -> None:
    names = _names()
    [rule] = [r for r in _rules() if r.reads == reads]
    [other] = {"rlmetrics.backend.dropped", "rlmetrics.backend.failed"} - set(reads)
    for example in _sibling_examples(rule, names):
        assert any(s.startswith(names.counter(other)) for s, _ in example.series)


#: The labels the exporter puts on every series of a meter's scope: the version changes with
#: every rlmetrics release, and an alert carrying it would resolve and fire anew across an
#: upgrade (and say nothing to the person paged).
_SCOPE = {"otel_scope_name": "rlmetrics", "otel_scope_version": "0.2.0"}


def _with_scope(series: str) -> str:
    """A promtool series selector with the exporter's scope labels, unless it is Prometheus'
    own (``up``) or the resource (``target_info``), which carry none."""
    name, _, labels = series.partition("{")
    if name in ("up", "target_info"):
        return series
    scope = ",".join(f'{key}="{value}"' for key, value in _SCOPE.items())
    return f"{name}{{{scope},{labels}" if labels else f"{name}{{{scope}}}"


def test_no_alert_carries_the_exporter_s_scope_labels(
    promtool_test_rules: Callable[..., Any],
) -> None:
    """Every example, its series as the endpoint serves them (with ``otel_scope_name`` and
    ``otel_scope_version``), raises the alerts it names and no label more."""
    rules = [rule for rule in _rules() if rule.name != "VLLMEngineRestarted"]  # vLLM's series
    scoped = [
        AlertRule(
            rule.name,
            rule.expr,
            rule.summary,
            rule.runbook,
            rule.for_s,
            severity=rule.severity,
            reads=rule.reads,
            examples=[
                AlertExample(
                    example.title,
                    [(_with_scope(series), values) for series, values in example.series],
                    at_s=example.at_s,
                    alerts=example.alerts,
                    interval_s=example.interval_s,
                )
                for example in rule.examples
            ],
            group=rule.group,
        )
        for rule in rules
    ]
    tested = promtool_test_rules(
        render_yaml(rule_groups(rules, annotations=False)), promtool_tests(scoped, "rules.yml")
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
