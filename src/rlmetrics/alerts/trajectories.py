"""The trajectory family's alert: rollouts too stale. An entry point of the ``rlmetrics``
distribution, loaded like any plugin's rules; left out when ``rl.offpolicy.staleness`` is not
declared (the family disabled).

Async RL trains on rollouts an older policy generated; a few versions of lag are the design,
a growing lag (generation outpacing training, a stuck weight sync) makes the updates
off-policy enough to destabilise them. The rule fires when the 90th percentile of the
staleness of the last 10 minutes' rollouts stays above ``offpolicy.staleness`` versions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .. import hookimpl
from .model import AlertContext, AlertExample, AlertRule, RuleBuilder, with_run_id

__all__ = ["register_alert_rules", "staleness_rules"]

STALENESS = "rl.offpolicy.staleness"
_RUN = 'job="run",instance="a"'
_TARGET_INFO = (f'target_info{{{_RUN},rlmetrics_run_id="r1"}}', "1x40")
_BOUNDS = ("0", "1", "2", "3", "4", "6", "8", "12", "16", "32", "+Inf")


def _buckets(name: str, lag: int, per_minute: int = 60) -> list[tuple[str, str]]:
    """A histogram's bucket series for rollouts that all lag ``lag`` versions, ``per_minute``
    of them a minute."""
    return [
        (
            f'{name}{{{_RUN},le="{le}"}}',
            f"0+{per_minute if le == '+Inf' or float(le) >= lag else 0}x40",
        )
        for le in _BOUNDS
    ]


def staleness_rules(context: AlertContext) -> Iterator[AlertRule]:
    names = context.names
    if STALENESS not in names:
        return
    limit = context.threshold(
        "offpolicy.staleness", 4.0, "the weight-version lag (p90) past which rollouts are stale"
    )
    buckets = names.histogram(STALENESS)
    p90 = f"histogram_quantile(0.9, sum by (job, instance, le) (rate({buckets}[10m])))"
    yield AlertRule(
        "RLRolloutsStale",
        with_run_id(f"{p90} > {limit:g}"),
        summary="Rollouts of run {{ $labels.rlmetrics_run_id }} are "
        '{{ $value | printf "%.1f" }} weight versions behind the trained policy (p90 of '
        f"{STALENESS} over 10 min; limit {limit:g})",
        description=f"The 90th percentile of rl.offpolicy.staleness over 10 minutes is above "
        f"{limit:g} versions: training consumes rollouts of a policy that many updates old.",
        runbook="Check the weight sync to the rollout engines (a stuck refit leaves every "
        "rollout on old weights) and the buffer's depth; lower the max staleness your "
        "trainer allows, or slow generation down.",
        for_s=context.for_(600),
        reads=[STALENESS],
        group="rlmetrics",
        examples=(
            AlertExample(
                "every rollout 8 versions behind",
                [*_buckets(buckets, 8), _TARGET_INFO],
                at_s=1800,
                alerts=[{"job": "run", "instance": "a", "rlmetrics_run_id": "r1"}],
            ),
            AlertExample(
                "one version behind, as async GRPO runs",
                [*_buckets(buckets, 1), _TARGET_INFO],
                at_s=1800,
            ),
        ),
    )


@hookimpl
def register_alert_rules(register: Callable[[RuleBuilder], None]) -> None:
    register(staleness_rules)
