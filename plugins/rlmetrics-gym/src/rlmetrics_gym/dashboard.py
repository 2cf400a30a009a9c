"""The Gym dashboard row: rollouts by outcome, rewards by range, rollout duration.

The reward-range share is a live view of scored, unmasked rollouts, not the benchmark score
(pass@k and per-task averages are computed at the end by ``/aggregate_metrics``). Durations are
Gym's ``_ms`` histograms, exposed by Prometheus as ``*_milliseconds_bucket``.
"""

from __future__ import annotations

from collections.abc import Callable

import rlmetrics
from rlmetrics.dashboard.model import Panel, Query, Row
from rlmetrics.dashboard.promql import Names, for_run

from .rollouts import COMPLETED, MASKED_ATTR, REWARD_RANGE_ATTR, REWARDED, ROLLOUT_DURATION

__all__ = ["register_dashboard_rows", "rollouts_row"]

_OUTCOME_ATTR = "nemo.gym.rollout.outcome"


def rollouts_row(names: Names) -> Row:
    outcome = names.label(_OUTCOME_ATTR)
    reward_range, masked = names.label(REWARD_RANGE_ATTR), names.label(MASKED_ATTR)
    completed = for_run(f"rate({names.counter(COMPLETED)}[$__rate_interval])")
    unmasked = f'{names.counter(REWARDED)}{{{masked}="false"}}'
    rewarded = for_run(f"increase({unmasked}[$__range])")
    duration = for_run(f"rate({names.histogram(ROLLOUT_DURATION)}[$__rate_interval])")
    return Row(
        "Gym rollouts",
        [
            Panel(
                "Rollout attempts per second by outcome",
                [Query(f"sum by ({outcome}) ({completed})", f"{{{{{outcome}}}}}")],
                reads=[COMPLETED],
                description="scored, failed (failures sidecar) or omitted (kill-shaped, written "
                "nowhere); one per attempt the collection driver finished handling.",
                unit="short",
                stacked=True,
                width=8,
            ),
            Panel(
                "Scored rollouts by reward range (unmasked)",
                [Query(f"sum by ({reward_range}) ({rewarded})", f"{{{{{reward_range}}}}}")],
                reads=[REWARDED],
                description="A live view of the rewards as they arrive, not the benchmark score.",
                type="bargauge",
                unit="short",
                width=8,
            ),
            Panel(
                "Rollout duration (p50, p95)",
                [
                    Query(
                        f"histogram_quantile({q}, sum by (le) ({duration}))", f"p{round(q * 100)}"
                    )
                    for q in (0.5, 0.95)
                ],
                reads=[ROLLOUT_DURATION],
                description="Failed rollouts included: a crashed rollout still cost its time.",
                unit="ms",
                width=8,
            ),
        ],
        order=70,
    )


@rlmetrics.hookimpl
def register_dashboard_rows(register: Callable[[Callable[[Names], Row]], None]) -> None:
    register(rollouts_row)
