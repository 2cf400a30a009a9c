"""The Gym part of ``rlmetrics demo``, the Gym dashboard row and the names the Gym
specification fixes (``rlmetrics check`` exemptions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlmetrics_gym.conventions import exemptions
from rlmetrics_gym.dashboard import rollouts_row
from rlmetrics_gym.demo import DISPATCH_NAME, GymDemoPart
from rlmetrics_gym.rollouts import reward_range

from rlmetrics.check import check_declared
from rlmetrics.dashboard.promql import Names
from rlmetrics.demo.parts import DemoSettings
from rlmetrics.demo.simulation import Simulation
from rlmetrics.registry import default_registry
from rlmetrics.testing import points


def test_every_rollout_is_one_attempt_and_rewards_follow_the_run(
    telemetry: tuple[Any, Any], tmp_path: Path
) -> None:
    _handle, reader = telemetry
    part = GymDemoPart(DemoSettings(seed=2, steps=3, output=tmp_path))
    simulation = Simulation(seed=2, steps=3)
    rewards: list[float] = []
    for number in (1, 2, 3):
        step = simulation.step(number).demo
        part.step(step)
        rewards += step.rewards
    found = points(reader)
    completed = [p for p in found if p.name == "gym.rollout.completed_total"]
    assert sum(p.value or 0 for p in completed) == len(rewards)
    outcomes = {p.attributes["nemo.gym.rollout.outcome"] for p in completed}
    assert "scored" in outcomes and outcomes <= {"scored", "failed", "omitted"}
    rewarded = [p for p in found if p.name == "gym.rollout.rewarded_total"]
    ranges = {p.attributes["nemo.gym.rollout.reward.range"] for p in rewarded}
    assert ranges <= {reward_range(r) for r in rewards}
    durations = [p for p in found if p.name == "gym.rollout.duration_ms"]
    assert durations[0].count == len(rewards)  # failed rollouts' time included


def test_the_exemptions_cover_what_the_specification_fixes_and_nothing_else() -> None:
    gym = [
        item for item in default_registry().declared() if item.owner.startswith("rlmetrics_gym.")
    ]
    result = check_declared(gym, lambda _item: "rlmetrics-gym", exemptions(i.spec for i in gym))
    # What is left is a real defect, not a naming convention (see tests/tools/test_tools_check).
    assert {(f.rule, f.metric) for f in result.findings} <= {
        ("histogram-buckets", "gym.server.startup_stage_duration_ms")
    }
    exempt = {(f.rule, f.metric) for f in result.exempt}
    assert ("unit-in-name", "gym.rollout.duration_ms") in exempt
    assert ("total-suffix", "gym.rollout.completed_total") in exempt
    assert all(
        rule in {"unit-in-name", "total-suffix", "unbounded-attribute"} for rule, _ in exempt
    )


def test_the_dashboard_row_reads_declared_series() -> None:
    names = Names(item.spec for item in default_registry().declared())
    row = rollouts_row(names)
    assert all(read in names for panel in row.panels for read in panel.reads)
    exprs = " ".join(q.expr for panel in row.panels for q in panel.queries)
    assert "gym_rollout_duration_milliseconds_bucket" in exprs
    assert 'gym_rollout_rewarded_total{nemo_gym_rollout_masked="false"}' in exprs


def test_the_demo_failures_carry_a_failure_kind_gym_exports(
    telemetry: tuple[Any, Any], tmp_path: Path
) -> None:
    # A kind neither registered nor namespaced is exported as "unregistered": the demo would
    # show only that fallback where it means to show a failure kind.
    _handle, reader = telemetry
    part = GymDemoPart(DemoSettings(seed=2, steps=10, output=tmp_path))
    simulation = Simulation(seed=2, steps=10)
    for number in range(1, 11):
        part.step(simulation.step(number).demo)
    failed = [
        p
        for p in points(reader)
        if p.name == "gym.rollout.completed_total"
        and p.attributes["nemo.gym.rollout.outcome"] == "failed"
    ]
    assert failed
    assert {p.attributes["nemo.gym.failure_kind"] for p in failed} == {f"{DISPATCH_NAME}:timeout"}
