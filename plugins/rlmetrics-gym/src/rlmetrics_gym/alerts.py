"""The Gym alerts: rollouts flagged unhealthy, an event loop held up, a host running out of
memory. Each reads this distribution's own series through their declared names.

The lag rule reads a percentile only where the sample can resolve it: p90 from at least 40
samples in its window (the efficiency family's rule), so a quiet server's handful of samples
never pages anyone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import rlmetrics
from rlmetrics.alerts.model import (
    AlertContext,
    AlertExample,
    AlertRule,
    RuleBuilder,
    with_run_id,
)
from rlmetrics.dashboard.promql import RUN_ID_LABEL

from ._attribute_values import OUTCOME_ATTR
from .health import VERDICT_ATTR, VERDICT_TOTAL
from .memory import HOST_TOTAL, HOST_USAGE
from .runtime import EVENT_LOOP_ATTR, LAG_MS

__all__ = ["health_rules", "host_memory_rules", "loop_lag_rules", "register_alert_rules"]

_GROUP = "rlmetrics-gym"
_SERVER = 'job="gym",instance="g"'
_LABELS = {"job": "gym", "instance": "g", RUN_ID_LABEL: "r1"}
#: The server's resource (every process rlmetrics.start()s exports one), naming its run.
_TARGET_INFO = (f'target_info{{{_SERVER},{RUN_ID_LABEL}="r1"}}', "1x40")
_GIB = 2**30
#: Samples a window needs before its p90 is read.
_P90_SAMPLES = 40


def health_rules(context: AlertContext) -> Iterator[AlertRule]:
    names = context.names
    share = context.threshold(
        "gym.unhealthy_share", 0.05, "the share of evaluated rollouts flagged unhealthy that alerts"
    )
    least = context.threshold(
        "gym.unhealthy_min_rollouts", 20, "rollouts evaluated in 15 min before the share counts"
    )
    verdict, outcome = names.label(VERDICT_ATTR), names.label(OUTCOME_ATTR)
    counter = names.counter(VERDICT_TOTAL)
    evaluated = f"sum by (job, instance) (increase({counter}[15m]))"
    unhealthy = f'sum by (job, instance) (increase({counter}{{{verdict}="unhealthy"}}[15m]))'

    def series(kind: str, per_minute: int) -> tuple[str, str]:
        return f'{counter}{{{_SERVER},{verdict}="{kind}",{outcome}="scored"}}', f"0+{per_minute}x30"

    yield AlertRule(
        "GymRolloutsUnhealthy",
        with_run_id(f"{unhealthy} / {evaluated} > {share:g} and {evaluated} >= {least:g}"),
        summary="{{ $value | humanizePercentage }} of the rollouts of run "
        "{{ $labels.rlmetrics_run_id }} on {{ $labels.instance }} were flagged unhealthy "
        f"(gym.rollout.health_verdict_total over 15 min; limit {share:.0%})",
        description=f"Over 15 minutes more than {share:.0%} of the evaluated rollouts got an "
        "unhealthy verdict from a trajectory check: the agent or the environment misbehaves.",
        runbook="See which checks flag them (gym.rollout.health_flagged_total by "
        "nemo_gym_health_check) and read a few flagged rollouts in the output sidecar.",
        for_s=context.for_(300),
        reads=(VERDICT_TOTAL,),
        group=_GROUP,
        examples=(
            AlertExample(
                "one in five unhealthy",
                [series("healthy", 8), series("unhealthy", 2), _TARGET_INFO],
                at_s=1500,
                alerts=[_LABELS],
            ),
            AlertExample(
                "one in a hundred unhealthy",
                [series("healthy", 99), series("unhealthy", 1)],
                at_s=1500,
            ),
            AlertExample(
                "too few rollouts to tell",
                [(series("unhealthy", 1)[0], "0 0x30")],
                at_s=1500,
            ),
        ),
    )


def loop_lag_rules(context: AlertContext) -> Iterator[AlertRule]:
    names = context.names
    lag_s = context.threshold(
        "gym.loop_lag_s", 0.25, "the p90 event-loop lag, in seconds, that alerts"
    )
    limit = lag_s * 1000 if names.spec(LAG_MS).unit == "ms" else lag_s
    loop = names.label(EVENT_LOOP_ATTR)
    by = f"sum by (job, instance, {loop}"
    bucket, count = names.histogram(LAG_MS), names.histogram(LAG_MS, "count")
    p90 = f"histogram_quantile(0.9, {by}, le) (rate({bucket}[5m])))"
    samples = f"{by}) (increase({count}[5m]))"
    where = f'{_SERVER},{loop}="server"'
    buckets = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)

    def histogram(lag_ms: float, per_minute: int) -> list[tuple[str, str]]:
        rows = [
            (f'{bucket}{{{where},le="{b:g}"}}', f"0+{per_minute if lag_ms <= b else 0}x30")
            for b in buckets
        ]
        rows.append((f'{bucket}{{{where},le="+Inf"}}', f"0+{per_minute}x30"))
        rows.append((f"{count}{{{where}}}", f"0+{per_minute}x30"))
        rows.append(_TARGET_INFO)
        return rows

    yield AlertRule(
        "GymEventLoopLagging",
        with_run_id(f"{p90} > {limit:g} and on(job, instance, {loop}) {samples} >= {_P90_SAMPLES}"),
        summary="The {{ $labels.nemo_gym_event_loop }} event loop on {{ $labels.instance }} "
        '(run {{ $labels.rlmetrics_run_id }}) wakes up {{ $value | printf "%.0f" }} ms late '
        f"(p90 of gym.event_loop.lag_ms over 5 min; limit {lag_s * 1000:g} ms)",
        description=f"For five minutes the p90 event-loop lag has been above {lag_s:g} s: "
        "synchronous work holds the loop, and every request on it waits behind that work.",
        runbook="Find the blocking call (py-spy dump of the server; a verifier or a judge call "
        "run inline): move it to a thread or a process (resources_operation), or add workers.",
        for_s=context.for_(300),
        reads=(LAG_MS,),
        group=_GROUP,
        examples=(
            AlertExample(
                "every sample 400 ms late",
                histogram(400, 12),
                at_s=1200,
                alerts=[{**_LABELS, loop: "server"}],
            ),
            AlertExample("every sample 3 ms late", histogram(3, 12), at_s=1200),
            AlertExample("too few samples to read a p90", histogram(400, 2), at_s=1200),
        ),
    )


def host_memory_rules(context: AlertContext) -> Iterator[AlertRule]:
    names = context.names
    share = context.threshold(
        "gym.host_memory.share", 0.9, "the share of a Gym host's memory in use that alerts"
    )
    usage, total = names.gauge(HOST_USAGE), names.gauge(HOST_TOTAL)
    yield AlertRule(
        "GymHostMemoryHigh",
        with_run_id(f"{usage} / on(job, instance) {total} > {share:g}"),
        summary="The Gym host of {{ $labels.instance }} (run {{ $labels.rlmetrics_run_id }}) "
        "has {{ $value | humanizePercentage }} of its memory in use "
        f"(gym.host.memory.usage / gym.host.memory.total; limit {share:.0%})",
        description=f"More than {share:.0%} of the memory of a host running Gym servers has "
        "been in use for five minutes.",
        runbook="See which server grows (gym.server.memory.usage by server): a leaking "
        "environment, too many sandboxes, or too many workers for the host.",
        for_s=context.for_(300),
        reads=(HOST_USAGE, HOST_TOTAL),
        group=_GROUP,
        examples=(
            AlertExample(
                "29 of 30 GiB",
                [
                    (f"{usage}{{{_SERVER}}}", f"{29 * _GIB}x20"),
                    (f"{total}{{{_SERVER}}}", f"{30 * _GIB}x20"),
                    _TARGET_INFO,
                ],
                at_s=900,
                alerts=[_LABELS],
            ),
            AlertExample(
                "10 of 30 GiB",
                [
                    (f"{usage}{{{_SERVER}}}", f"{10 * _GIB}x20"),
                    (f"{total}{{{_SERVER}}}", f"{30 * _GIB}x20"),
                ],
                at_s=900,
            ),
        ),
    )


@rlmetrics.hookimpl
def register_alert_rules(register: Callable[[RuleBuilder], None]) -> None:
    register(health_rules)
    register(loop_lag_rules)
    register(host_memory_rules)
