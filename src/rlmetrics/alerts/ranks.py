"""``RLStragglerRank``: one rank keeps taking much longer than the others in a phase of the
step. Reads the straggler series the rank merger exports (:mod:`rlmetrics.families.ranks`):
the skew (slowest over mean) per phase, and the slowest rank as a value, which the alert's
value is, so it names the rank without a series per rank. An entry point of the
``rlmetrics`` distribution beside the core's other rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .. import hookimpl
from ..dashboard.promql import RUN_ID_LABEL
from ..ranks.reduce import PHASE_ATTR, STRAGGLER_SKEW, STRAGGLER_SLOWEST
from .model import AlertContext, AlertExample, AlertRule, RuleBuilder, with_run_id

__all__ = ["register_alert_rules", "straggler_rules"]

_RUN = 'job="run",instance="a"'
_TARGET_INFO = (f'target_info{{{_RUN},{RUN_ID_LABEL}="r1"}}', "1x40")


def straggler_rules(context: AlertContext) -> Iterator[AlertRule]:
    names = context.names
    if STRAGGLER_SKEW not in names or STRAGGLER_SLOWEST not in names:
        return
    skew_limit = context.threshold(
        "straggler.skew", 1.5, "the slowest rank's seconds over the mean that make a straggler"
    )
    skew, slowest, phase = (
        names.gauge(STRAGGLER_SKEW),
        names.gauge(STRAGGLER_SLOWEST),
        names.label(PHASE_ATTR),
    )
    # The alert's value is the slowest rank, kept while that phase's skew is over the limit.
    expr = f"{slowest} and on(job, instance, {phase}) ({skew} > {skew_limit:g})"
    labels = f'{_RUN},{phase}="policy_time"'
    alert = {"job": "run", "instance": "a", RUN_ID_LABEL: "r1", phase: "policy_time"}
    yield AlertRule(
        "RLStragglerRank",
        with_run_id(expr),
        summary="Rank {{ $value }} of run {{ $labels.rlmetrics_run_id }} is the straggler in "
        "phase {{ $labels." + phase + " }} "
        f"({STRAGGLER_SKEW}: the slowest rank over {skew_limit:g}x the mean)",
        description=f"In one phase of the step, the slowest rank has taken over {skew_limit:g}x "
        "the mean across ranks for ten minutes: every collective waits for it, so the whole "
        "run runs at its pace.",
        runbook="Look at that rank's host (rl.ranks.slowest names it; its raw rows are in its "
        "own JSONL file): a throttled or shared GPU, a slow disk or data shard, a noisy "
        "neighbour. rlmetrics report --perfetto shows its lanes beside the others'.",
        for_s=context.for_(600),
        reads=(STRAGGLER_SKEW, STRAGGLER_SLOWEST),
        examples=(
            AlertExample(
                "rank 2 twice the mean for twenty minutes",
                [(f"{skew}{{{labels}}}", "2x40"), (f"{slowest}{{{labels}}}", "2x40"), _TARGET_INFO],
                at_s=1200,
                alerts=[alert],
            ),
            AlertExample(
                "ranks within the skew",
                [
                    (f"{skew}{{{labels}}}", "1.1x40"),
                    (f"{slowest}{{{labels}}}", "2x40"),
                    _TARGET_INFO,
                ],
                at_s=1200,
            ),
            AlertExample(
                "one slow step, then even",
                [
                    (f"{skew}{{{labels}}}", "1 1 3 1x37"),
                    (f"{slowest}{{{labels}}}", "1 1 2 0x37"),
                    _TARGET_INFO,
                ],
                at_s=1200,
            ),
        ),
    )


@hookimpl
def register_alert_rules(register: Callable[[RuleBuilder], None]) -> None:
    register(straggler_rules)
