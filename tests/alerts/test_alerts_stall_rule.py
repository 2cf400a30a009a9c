"""One stall rule drives both ``/health`` and ``RLStepStalled``: the same simulated step times
are fed to a real run (its endpoint's ``/health`` and ``/metrics`` read over HTTP on a clock
the test moves) and, as the series that endpoint exposed, to the generated alert through
``promtool test rules``; both must say "stalled" at exactly the times the rule documented in
docs/operations.md (its numbers read from the page, never from the code's constants) says."""

from __future__ import annotations

import itertools
import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import rlmetrics
from rlmetrics._yaml import render_yaml
from rlmetrics.alerts.rules import collect_rules, rule_groups

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
LAST, MEDIAN = "rl_step_last_timestamp_seconds", "rl_step_interval_median_seconds"
SAMPLE_S = 10  # Prometheus' scrape and evaluation interval in the simulation
JOB = {"job": "run", "instance": "a"}


def documented_rule() -> dict[str, float]:
    """The stall rule's numbers as docs/operations.md states them, for /health and for the
    alert alike (the two statements must agree)."""
    text = OPERATIONS.read_text()
    health = text.split("## Is the run alive?", 1)[1].split("\n## ", 1)[0]
    alert = text.split("### RLStepStalled", 1)[1].split("\n### ", 1)[0]
    numbers = {}
    for key, health_name, alert_name, unit in (
        ("factor", "stall_factor", "stall.factor", ""),
        ("min_s", "stall_min_s", "stall.min_s", " s"),
        ("bound_s", "stall_after_s", "stall.bound_s", " s"),
    ):
        stated = [
            re.search(rf"`{re.escape(name)}`\s+\((\d+(?:\.\d+)?){unit}[,)]", section)
            for section, name in ((health, health_name), (alert, alert_name))
        ]
        found = {float(m[1]) for m in stated if m is not None}
        assert None not in stated and len(found) == 1, (
            f"docs/operations.md must state {health_name} (health) and {alert_name} (alert) "
            f"alike; found {found or 'nothing'}"
        )
        numbers[key] = found.pop()
    return numbers


def expected_stalled(steps: list[float], now: float, rule: dict[str, float]) -> bool:
    """The documented rule, written out here: silent longer than factor x the median of the
    last 20 intervals (at least min_s), or than bound_s before 20 intervals are known."""
    seen = [t for t in steps if t <= now]
    intervals = [b - a for a, b in itertools.pairwise(seen)][-20:]
    if len(intervals) < 20:
        limit = rule["bound_s"]
    else:
        ordered = sorted(intervals)
        median = (ordered[9] + ordered[10]) / 2
        limit = max(rule["factor"] * median, rule["min_s"])
    return now - seen[-1] > limit


def _get(address: tuple[str, int], path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{address[0]}:{address[1]}{path}", timeout=5) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def _exposed(body: str) -> dict[str, float]:
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name in (LAST, MEDIAN)
    }


#: Step times (seconds since time 0) and how long the simulation runs past the last step.
SCENARIOS = {
    # 25 steps 30 s apart: the median (30 s) is known, 3x it (90 s) beats the floor.
    "paced slower than the floor": ([30.0 * i for i in range(25)], 200),
    # 25 steps 4-6 s apart: 3x the median is under the floor of 60 s.
    "paced faster than the floor": ([sum(4 + i % 3 for i in range(k)) for k in range(25)], 120),
    # 6 steps: no median yet, the bound of 600 s holds.
    "before the median is known": ([30.0 * i for i in range(6)], 660),
}


def _simulate(
    clock: Any, steps: list[float], tail_s: int
) -> list[tuple[int, bool, dict[str, float]]]:
    """``(time, /health says stalled, the series /metrics exposed)`` every SAMPLE_S."""
    clock.now = 0.0
    samples = []
    with rlmetrics.start(run_id="r1", exporters=["prometheus"], prometheus_port=0) as handle:
        address = handle.prometheus_address
        assert address is not None
        logger = rlmetrics.Logger(backends={})
        pending = list(enumerate(steps, start=1))
        end = int(steps[-1]) + tail_s
        for now in range(0, end + 1, SAMPLE_S):
            while pending and pending[0][1] <= now:
                number, at = pending.pop(0)
                clock.now = at
                logger.log_metrics({"reward": 0.5}, step=number, prefix="train")
            clock.now = float(now)
            code, body = _get(address, "/health")
            status = json.loads(body)["status"]
            assert (code == 503) is (status == "stalled"), (now, code, status)
            samples.append((now, status == "stalled", _exposed(_get(address, "/metrics")[1])))
    return samples


def _series(samples: list[tuple[int, bool, dict[str, float]]], name: str) -> str:
    return " ".join(f"{s[2][name]:.17g}" if name in s[2] else "_" for s in samples)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_health_and_the_stall_alert_say_stalled_at_the_same_times(
    scenario: str, clock: Any, promtool_test_rules: Callable[..., Any]
) -> None:
    steps, tail_s = SCENARIOS[scenario]
    rule = documented_rule()
    samples = _simulate(clock, steps, tail_s)
    expected = [(now, expected_stalled(steps, now, rule)) for now, _, _ in samples]
    assert [(now, stalled) for now, stalled, _ in samples] == expected  # /health
    assert any(stalled for _, stalled in expected) and not expected[0][1]

    [stall] = [r for r in collect_rules()[0] if r.name == "RLStepStalled"]
    labels = ",".join(f'{k}="{v}"' for k, v in JOB.items())
    count = len(samples)
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": f"{SAMPLE_S}s",
        "tests": [
            {
                "interval": f"{SAMPLE_S}s",
                "input_series": [
                    {"series": f"{LAST}{{{labels}}}", "values": _series(samples, LAST)},
                    {"series": f"{MEDIAN}{{{labels}}}", "values": _series(samples, MEDIAN)},
                    {
                        "series": f'target_info{{{labels},rlmetrics_run_id="r1"}}',
                        "values": f"1x{count}",
                    },
                ],
                "alert_rule_test": [
                    {
                        "eval_time": f"{now}s",
                        "alertname": "RLStepStalled",
                        "exp_alerts": (
                            [{"exp_labels": {**JOB, "rlmetrics_run_id": "r1", "severity": "page"}}]
                            if stalled
                            else []
                        ),
                    }
                    for now, stalled in expected
                ],
            }
        ],
    }
    tested = promtool_test_rules(
        render_yaml(rule_groups([stall], annotations=False)), render_yaml(test)
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
