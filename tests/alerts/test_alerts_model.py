"""Alert rules as data: names, durations and thresholds checked when built; a builder that
breaks the contract is reported and skipped while the others' rules are written; the YAML the
core writes without a YAML library reads back as what was written."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics._yaml import render_yaml
from rlmetrics.alerts.model import (
    AlertContext,
    AlertExample,
    AlertRule,
    AlertSettings,
    duration,
    parse_seconds,
    with_run_id,
)
from rlmetrics.alerts.rules import collect_rules, rule_groups
from rlmetrics.dashboard.promql import Names
from rlmetrics.plugins import register

FIRES = AlertExample("fires", [("x", "1x5")], at_s=60, alerts=[{"job": "j"}])
QUIET = AlertExample("quiet", [("x", "0x5")], at_s=60)


def _rule(**changes: Any) -> AlertRule:
    fields: dict[str, Any] = {
        "name": "AcmeQueueDeep",
        "expr": "x > 0",
        "summary": "s",
        "runbook": "r",
        "for_s": 60,
        "examples": (FIRES, QUIET),
        "group": "acme",
    }
    return AlertRule(**{**fields, **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "acme_queue"}, "CamelCase"),
        ({"severity": "critical"}, "severity"),
        ({"for_s": -1}, "non-negative"),
    ],
)
def test_a_malformed_rule_fails_when_built(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _rule(**changes)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.5, "500ms"), (45, "45s"), (600, "10m"), (5400, "90m"), (7200, "2h")],
)
def test_durations_are_written_as_prometheus_reads_them(seconds: float, text: str) -> None:
    assert duration(seconds) == text
    assert parse_seconds(text) == seconds


@given(st.integers(0, 10**9))
def test_a_duration_reads_back_as_the_seconds_it_was_written_from(millis: int) -> None:
    assert parse_seconds(duration(millis / 1000)) == pytest.approx(millis / 1000)


@pytest.mark.parametrize("text", ["", "5 m", "-3s", "1y", "fast", "1.5.2s"])
def test_a_malformed_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_seconds(text)


def test_a_rule_names_its_run() -> None:
    bare = "max without (otel_scope_name, otel_scope_version, otel_scope_schema_url) (up == 0)"
    assert with_run_id("up == 0") == (
        f"({bare}) * on(job, instance) group_left(rlmetrics_run_id) "
        f"max by (job, instance, rlmetrics_run_id) (target_info) or on(job, instance) ({bare})"
    )


def test_thresholds_come_from_the_settings_and_are_listed() -> None:
    context = AlertContext(Names([]), AlertSettings(thresholds={"acme.depth": 7}))
    assert context.threshold("acme.depth", 3, "queue depth") == 7
    assert context.threshold("acme.rate", 0.5, "rate") == 0.5
    assert {t.name: (t.default, t.value) for t in context.thresholds.values()} == {
        "acme.depth": (3, 7),
        "acme.rate": (0.5, 0.5),
    }
    with pytest.raises(ValueError, match="dotted"):
        context.threshold("Depth", 1, "d")
    assert AlertContext(Names([]), AlertSettings(for_s=5)).for_(600) == 5


def test_a_broken_builder_is_reported_and_the_others_still_write_their_rules() -> None:
    rlmetrics.declare("acme", [rlmetrics.MetricSpec("acme.queue.depth", rlmetrics.Kind.GAUGE)])

    class Offers:
        @rlmetrics.hookimpl
        def register_alert_rules(self, register: Any) -> None:
            register(lambda context: [_rule(reads=["acme.queue.depth"])])
            register(lambda context: [_rule(name="AcmeUndeclared", reads=["acme.nope"])])
            register(lambda context: [_rule(name="AcmeUntested", examples=[QUIET])])
            register(lambda context: [_rule()])  # the same name again
            register(lambda context: ["not a rule"])

    register(Offers(), "offers-alerts")
    rules, problems, _ = collect_rules()
    assert "AcmeQueueDeep" in {r.name for r in rules}
    reasons = " | ".join(p.reason for p in problems)
    assert "acme.nope" in reasons
    assert "AcmeUntested has no example that fires" in reasons
    assert "already offered" in reasons
    assert "not an AlertRule" in reasons
    assert len(problems) == 4


def test_a_threshold_no_rule_has_is_a_problem_naming_the_known_ones() -> None:
    _, problems, _ = collect_rules(AlertSettings(thresholds={"stall.factr": 5}))
    (problem,) = problems
    assert "stall.factr" in problem.reason and "stall.factor" in problem.reason


def test_the_rules_file_reads_back_as_prometheus_will_read_it() -> None:
    rules, _, _ = collect_rules()
    document = rule_groups(rules)
    assert yaml.safe_load(render_yaml(document)) == document


_SCALARS = st.one_of(
    st.text(max_size=20),
    st.integers(-(2**53), 2**53),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
)
_DOCUMENTS = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=12), _DOCUMENTS, max_size=5))
def test_any_document_reads_back_as_it_was_written(document: dict[str, Any]) -> None:
    assert yaml.safe_load(render_yaml(document)) == (document or {})
