"""Recording rules that merge ranks at query time, run by ``promtool test rules``: two ranks of
one run export their own series, and each declared kind's rule gives the run-level value
computed by hand (sum of rates, weighted mean, straggler max/min/avg, max)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rlmetrics._yaml import render_yaml
from rlmetrics.alerts.recording import recording_rules
from rlmetrics.plugins import hooks
from rlmetrics.registry import default_registry

RLMETRICS = str(Path(sys.executable).with_name("rlmetrics"))
_INFO = 'target_info{{job="run",instance="{i}",rlmetrics_run_id="r1"}}'


def _specs() -> list:  # type: ignore[type-arg]
    hooks()
    return [item.spec for item in default_registry().declared()]


def test_promtool_accepts_every_rule_and_each_kind_is_its_hand_computed_value(
    promtool: str, tmp_path: Path
) -> None:
    rules = recording_rules(_specs())
    (tmp_path / "rules.yml").write_text(
        render_yaml({"groups": [{"name": "ranks", "rules": rules}]})
    )
    checked = subprocess.run(
        [promtool, "check", "rules", "rules.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    by_record = {rule["record"] for rule in rules}
    assert "rlmetrics_run:rl_reward_mean:weighted_mean" in by_record
    series = []
    for i, (reward, samples, seconds, tokens, grad) in enumerate(
        [(0.5, 10, 2.0, 60, 3.0), (1.0, 30, 6.0, 120, 4.0)]
    ):
        labels = f'job="run",instance="{i}"'
        series += [
            {"series": _INFO.format(i=i), "values": "1x10"},
            {"series": f"rl_reward_mean{{{labels}}}", "values": f"{reward}x10"},
            {"series": f"rl_train_samples{{{labels}}}", "values": f"{samples}x10"},
            {"series": f"rl_sft_v2_policy_duration_seconds{{{labels}}}", "values": f"{seconds}x10"},
            {"series": f"rl_grad_norm{{{labels}}}", "values": f"{grad}x10"},
            # a counter of the core's (the suite also runs where no other family is installed):
            # `tokens` per minute on this rank
            {
                "series": f"rl_trajectory_spans_dropped_total{{{labels}}}",
                "values": f"0+{tokens}x10",
            },
        ]
    expected = {
        "rlmetrics_run:rl_reward_mean:weighted_mean": (0.5 * 10 + 1.0 * 30) / 40,
        "rlmetrics_run:rl_sft_v2_policy_duration_seconds:max": 6.0,
        "rlmetrics_run:rl_sft_v2_policy_duration_seconds:min": 2.0,
        "rlmetrics_run:rl_sft_v2_policy_duration_seconds:avg": 4.0,
        "rlmetrics_run:rl_grad_norm:max": 4.0,
        "rlmetrics_run:rl_trajectory_spans_dropped:rate5m": (60 + 120) / 60,
    }
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": record,
                        "eval_time": "8m",
                        "exp_samples": [
                            {"labels": f'{record}{{rlmetrics_run_id="r1"}}', "value": value}
                        ],
                    }
                    for record, value in expected.items()
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(render_yaml(tests))
    tested = subprocess.run(
        [promtool, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_rlmetrics_alerts_writes_the_recording_rules(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            RLMETRICS,
            "alerts",
            "-o",
            str(tmp_path / "a.yml"),
            "--recording-rules",
            str(tmp_path / "r.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "rlmetrics_run:rl_reward_mean:weighted_mean" in (tmp_path / "r.yml").read_text()


def test_a_weighted_mean_without_its_weight_is_the_plain_mean_as_the_merger_takes_it(
    promtool: str, tmp_path: Path
) -> None:
    """A trainer that logs no num_samples (``rlmetrics demo`` does not): before, the run's
    rl.reward.mean rule matched nothing against a real Prometheus scraping it, unsaid,
    where the in-process merger takes a plain mean (docs/ranks.md). Now the plain mean of
    the ranks, and the weighted one where the weight is exported."""
    rules = [r for r in recording_rules(_specs()) if r["record"].endswith("weighted_mean")]
    (tmp_path / "rules.yml").write_text(
        render_yaml({"groups": [{"name": "ranks", "rules": rules}]})
    )
    series = []
    for run, ranks in (("r1", [(0.5, 10), (1.0, 30)]), ("r2", [(0.5, None), (1.0, None)])):
        for i, (reward, samples) in enumerate(ranks):
            labels = f'job="{run}",instance="{i}"'
            series += [
                {
                    "series": f"target_info{{{labels},rlmetrics_run_id={run!r}}}".replace("'", '"'),
                    "values": "1x10",
                },
                {"series": f"rl_reward_mean{{{labels}}}", "values": f"{reward}x10"},
            ]
            if samples is not None:
                series.append(
                    {"series": f"rl_train_samples{{{labels}}}", "values": f"{samples}x10"}
                )
    record = "rlmetrics_run:rl_reward_mean:weighted_mean"
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": record,
                        "eval_time": "8m",
                        "exp_samples": [
                            {"labels": f'{record}{{rlmetrics_run_id="r1"}}', "value": 35 / 40},
                            {"labels": f'{record}{{rlmetrics_run_id="r2"}}', "value": 0.75},
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(render_yaml(tests))
    tested = subprocess.run(
        [promtool, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_weighted_mean_weighs_only_the_ranks_that_export_the_value(
    promtool: str, tmp_path: Path
) -> None:
    """A reward component one rank logs and another does not: the merger weighs it over the
    ranks that logged it (docs/ranks.md), so the rule does too. Before, every rank's samples
    were in the denominator: rank 0's code reward 0.2 over its 10 samples came out 0.05 (its
    10 over both ranks' 40), and each component's denominator ignored its own label."""
    rules = [r for r in recording_rules(_specs()) if r["record"].endswith("weighted_mean")]
    (tmp_path / "rules.yml").write_text(
        render_yaml({"groups": [{"name": "ranks", "rules": rules}]})
    )
    series = []
    for i, (samples, components) in enumerate(
        [(10, {"math": 1.0, "code": 0.2}), (30, {"math": 0.0})]
    ):
        labels = f'job="run",instance="{i}"'
        series += [
            {"series": _INFO.format(i=i), "values": "1x10"},
            {"series": f"rl_train_samples{{{labels}}}", "values": f"{samples}x10"},
        ]
        series += [
            {
                "series": f'rl_reward_component_mean{{{labels},rl_reward_component="{name}"}}',
                "values": f"{value}x10",
            }
            for name, value in components.items()
        ]
    record = "rlmetrics_run:rl_reward_component_mean:weighted_mean"
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": record,
                        "eval_time": "8m",
                        "exp_samples": [
                            {
                                "labels": f'{record}{{rl_reward_component="code",'
                                'rlmetrics_run_id="r1"}',
                                "value": 0.2,
                            },
                            {
                                "labels": f'{record}{{rl_reward_component="math",'
                                'rlmetrics_run_id="r1"}',
                                "value": (1.0 * 10 + 0.0 * 30) / 40,
                            },
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "tests.yml").write_text(render_yaml(tests))
    tested = subprocess.run(
        [promtool, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
