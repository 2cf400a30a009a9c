"""The generated alert rules, run by Prometheus' own tools: ``promtool check rules`` accepts the
file, and ``promtool test rules`` runs every rule's examples — each alert firing and staying
quiet — through Prometheus' rule engine. A tuned rule fails the examples written for the
defaults, so the tests can fail."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

import rlmetrics
from rlmetrics._yaml import render_yaml
from rlmetrics.alerts.model import AlertSettings
from rlmetrics.alerts.rules import collect_rules, promtool_tests, rule_groups

#: The console script the installed distribution put beside this interpreter.
RLMETRICS = str(Path(sys.executable).with_name("rlmetrics"))

#: The alerts the issue asks for, by what they watch, and the name each one has.
EXPECTED = {
    "stall": "RLStepStalled",
    "rlmetrics endpoint down": "RLMetricsEndpointDown",
    "exporter failing": "RLMetricsExportFailing",
    "queued backend dropping rows": "RLMetricsBackendDropping",
    "backend failing rows": "RLMetricsBackendFailing",
    "vLLM engine restarts": "VLLMEngineRestarted",
    "host memory above a share of total": "RLHostMemoryHigh",
    "Gym host memory": "GymHostMemoryHigh",
    "Gym health verdicts flagged": "GymRolloutsUnhealthy",
    "event loop lag": "GymEventLoopLagging",
}


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RLMETRICS, *map(str, args)], capture_output=True, text=True, timeout=120)


def _promtool(binary: str, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_every_expected_alert_is_generated() -> None:
    rules, problems, _ = collect_rules()
    assert problems == []
    assert set(EXPECTED.values()) <= {rule.name for rule in rules}


def test_promtool_checks_the_generated_rules_file(promtool: str, tmp_path: Path) -> None:
    done = run_cli("alerts", "--output", tmp_path / "rules.yml")
    assert done.returncode == 0, done.stderr
    checked = _promtool(promtool, "check", "rules", "rules.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    rules, _, _ = collect_rules()
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout


def test_promtool_runs_every_alert_firing_and_quiet(promtool: str, tmp_path: Path) -> None:
    done = run_cli("alerts", "--output", tmp_path / "rules.yml", "--tests", tmp_path / "unit")
    assert done.returncode == 0, done.stderr
    tested = _promtool(promtool, "test", "rules", "tests.yml", cwd=tmp_path / "unit")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout
    text = (tmp_path / "unit" / "tests.yml").read_text()
    rules, _, _ = collect_rules()
    for rule in rules:  # each alert has a test that fires it and one that expects silence
        assert f'alertname: "{rule.name}"' in text
        assert any(e.alerts for e in rule.examples) and any(not e.alerts for e in rule.examples)


@pytest.mark.parametrize(
    ("settings", "failing"),
    [
        (AlertSettings(thresholds={"stall.factor": 20}), "RLStepStalled"),
        (AlertSettings(thresholds={"host_memory.share": 0.5}), "RLHostMemoryHigh"),
        (AlertSettings(for_s=3600), "RLMetricsEndpointDown"),
    ],
)
def test_a_tuned_rule_fails_the_examples_written_for_the_defaults(
    promtool: str, tmp_path: Path, settings: AlertSettings, failing: str
) -> None:
    defaults, _, _ = collect_rules()
    tuned, problems, _ = collect_rules(settings)
    assert problems == []
    (tmp_path / "rules.yml").write_text(render_yaml(rule_groups(tuned, annotations=False)))
    (tmp_path / "tests.yml").write_text(promtool_tests(defaults, "rules.yml"))
    tested = _promtool(promtool, "test", "rules", "tests.yml", cwd=tmp_path)
    assert tested.returncode != 0
    assert f"alertname: {failing}" in tested.stdout + tested.stderr


@pytest.fixture
def gpu_series() -> Iterator[None]:
    """The GPU memory series as OpenTelemetry's hardware conventions name them: rlmetrics-ray
    declares them where it is installed; a stand-in of the same names otherwise."""
    declared = {item.spec.name for item in rlmetrics.default_registry().declared()}
    missing = [n for n in ("hw.gpu.memory.usage", "hw.gpu.memory.limit") if n not in declared]
    if missing:
        rlmetrics.declare(
            "test.hw.gpu",
            [
                rlmetrics.MetricSpec(
                    name,
                    rlmetrics.Kind.GAUGE,
                    unit="By",
                    description=name,
                    attributes={"host.name": rlmetrics.OPEN, "hw.id": rlmetrics.OPEN},
                )
                for name in missing
            ],
        )
    yield


def test_the_gpu_memory_rule_reads_the_hardware_series_where_declared(
    promtool: str, tmp_path: Path, gpu_series: None
) -> None:
    rules, problems, _ = collect_rules()
    assert problems == []
    (gpu,) = [rule for rule in rules if rule.name == "RLGPUMemoryNearLimit"]
    assert gpu.reads == ("hw.gpu.memory.usage", "hw.gpu.memory.limit")
    assert "hw_gpu_memory_usage_bytes" in gpu.expr and "hw_gpu_memory_limit_bytes" in gpu.expr
    (tmp_path / "rules.yml").write_text(render_yaml(rule_groups([gpu], annotations=False)))
    (tmp_path / "tests.yml").write_text(promtool_tests([gpu], "rules.yml"))
    tested = _promtool(promtool, "test", "rules", "tests.yml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


#: Alerts on series no rlmetrics process exports: nothing there carries a run id.
NO_RUN = {"VLLMEngineRestarted": "vLLM's own counters; the engine exports no rlmetrics resource"}


def test_every_alert_names_its_run_in_a_label_and_its_summary(gpu_series: None) -> None:
    """Alertmanager groups a run's alerts by the run-id label, and the person paged reads the
    summary: every built-in alert carries both. Its firing examples (which promtool runs, above)
    expect the label, read from the target's ``target_info``."""
    rules, problems, _ = collect_rules()
    assert problems == []
    for rule in rules:
        if rule.name in NO_RUN:
            continue
        assert "$labels.rlmetrics_run_id" in rule.summary, rule.name
        assert "\n" not in rule.summary, rule.name
        fired = [labels for example in rule.examples for labels in example.alerts]
        assert fired and all(labels.get("rlmetrics_run_id") for labels in fired), rule.name


#: Each alert's thresholds set to values no default has, and the words its summary must then
#: say: the limit it was held to (or the window of a counted loss), beside the series it reads.
TUNED = {
    "stall.factor": 7,
    "stall.min_s": 45,
    "straggler.skew": 1.7,
    "offpolicy.staleness": 6,
    "host_memory.share": 0.87,
    "gpu_memory.share": 0.93,
    "gym.host_memory.share": 0.86,
    "gym.unhealthy_share": 0.07,
    "gym.loop_lag_s": 0.3,
}
SAYS = {
    "RLStepStalled": ["7x", "45s"],
    "RLStragglerRank": ["1.7"],
    "RLRolloutsStale": ["limit 6"],
    "RLHostMemoryHigh": ["limit 87%"],
    "RLGPUMemoryNearLimit": ["limit 93%"],
    "GymHostMemoryHigh": ["limit 86%"],
    "GymRolloutsUnhealthy": ["limit 7%"],
    "GymEventLoopLagging": ["limit 300 ms"],
    "RLMetricsExportFailing": ["in the last 5 min"],
    "RLMetricsBackendDropping": ["in the last 5 min"],
    "RLMetricsBackendFailing": ["in the last 5 min"],
}


def test_every_summary_names_the_series_it_reads_and_its_threshold(gpu_series: None) -> None:
    """The person paged reads the summary alone (a phone's notification, a Slack line): it
    names the series the alert read and the limit it was held to, as tuned."""
    rules, problems, _ = collect_rules(AlertSettings({**TUNED}))
    assert problems == []
    for rule in rules:
        if rule.reads:
            assert any(read in rule.summary for read in rule.reads), (rule.name, rule.summary)
        for words in SAYS.get(rule.name, ()):
            assert words in rule.summary, (rule.name, words, rule.summary)
        # A number Prometheus renders in full (7.335125e+00 rows) is formatted.
        assert "{{ $value }}" not in rule.summary or rule.name == "RLStragglerRank", rule.summary


def test_an_alert_on_a_target_without_target_info_still_fires(
    promtool: str, tmp_path: Path
) -> None:
    """A target that publishes no ``target_info`` (its exporter told not to) loses the run
    id, never the alert."""
    rules, _, _ = collect_rules()
    (stall,) = [rule for rule in rules if rule.name == "RLStepStalled"]
    (example,) = [e for e in stall.examples if e.title == "no median yet: silent past the bound"]
    bare = attrs.evolve(
        example,
        series=[s for s in example.series if not s[0].startswith("target_info")],
        alerts=[{"job": "run", "instance": "a"}],
    )
    rule = attrs.evolve(stall, examples=[bare, *stall.examples])
    (tmp_path / "rules.yml").write_text(render_yaml(rule_groups([rule], annotations=False)))
    (tmp_path / "tests.yml").write_text(promtool_tests([rule], "rules.yml"))
    tested = _promtool(promtool, "test", "rules", "tests.yml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
