"""``RLStragglerRank`` through Prometheus' own rule engine: ``promtool test rules`` fires it on
a rank twice the mean, with the slowest rank as its value, and keeps it quiet otherwise; a
tuned skew fails the examples written for the default."""

from __future__ import annotations

import subprocess
from pathlib import Path

from rlmetrics._yaml import render_yaml
from rlmetrics.alerts.model import AlertSettings
from rlmetrics.alerts.rules import collect_rules, promtool_tests, rule_groups


def _straggler(settings: AlertSettings | None = None):  # type: ignore[no-untyped-def]
    rules, problems, _ = collect_rules(settings) if settings else collect_rules()
    assert problems == []
    (rule,) = [rule for rule in rules if rule.name == "RLStragglerRank"]
    return rule


def _promtool(promtool: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, "test", "rules", "tests.yml"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_straggler_alert_fires_on_the_slow_rank_and_stays_quiet_otherwise(
    promtool: str, tmp_path: Path
) -> None:
    rule = _straggler()
    assert rule.reads == ("rl.ranks.skew", "rl.ranks.slowest")
    assert "rl_ranks_slowest" in rule.expr
    (tmp_path / "rules.yml").write_text(render_yaml(rule_groups([rule], annotations=False)))
    (tmp_path / "tests.yml").write_text(promtool_tests([rule], "rules.yml"))
    tested = _promtool(promtool, tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # The value the alert carries is the rank (its summary says "Rank {{ $value }}").
    assert any(example.alerts for example in rule.examples)


def test_a_tuned_skew_fails_the_examples_written_for_the_default(
    promtool: str, tmp_path: Path
) -> None:
    default = _straggler()
    tuned = _straggler(AlertSettings(thresholds={"straggler.skew": 3.0}))
    (tmp_path / "rules.yml").write_text(render_yaml(rule_groups([tuned], annotations=False)))
    (tmp_path / "tests.yml").write_text(promtool_tests([default], "rules.yml"))
    tested = _promtool(promtool, tmp_path)
    assert tested.returncode != 0
    assert "alertname: RLStragglerRank" in tested.stdout + tested.stderr
