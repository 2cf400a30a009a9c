"""Alert rules on the core's own series: the run stalled, an rlmetrics endpoint is down, an
exporter keeps failing, a backend is losing rows. An entry point of the ``rlmetrics``
distribution, loaded like any plugin's rules.

The stall rule compares the silence since the newest step with the run's own pace: it fires
after ``stall.factor`` times the median step interval (``rl.step.interval.median``, published
once 20 intervals are known), never sooner than ``stall.min_s`` (a scrape and an evaluation
interval must pass before Prometheus can see a step), and, before the median is known, after
``stall.bound_s``. It is :class:`rlmetrics.liveness.StallRule`, which ``/health`` applies: the
same defaults, and no ``for:`` of its own (the floor already covers the scrape lag), so the
alert fires when ``/health`` turns ``stalled``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .. import hookimpl
from ..dashboard.promql import RUN_ENDED, RUN_ID_LABEL
from ..liveness import StallRule
from .model import (
    ENDED_RUNS,
    AlertContext,
    AlertExample,
    AlertRule,
    RuleBuilder,
    counted,
    while_running,
    with_run_id,
)

__all__ = [
    "backend_rules",
    "exporter_rules",
    "register_alert_rules",
    "stall_rules",
    "value_rules",
    "target_rules",
]

# The series these rules read, by their OpenTelemetry names (the families that declare them
# are not imported here: a disabled family must stay undeclared; a rule whose series is not
# declared is left out).
LAST_TIMESTAMP, INTERVAL_MEDIAN = "rl.step.last_timestamp", "rl.step.interval.median"
EXPORTS, EXPORTER_ATTR, OUTCOME_ATTR = (
    "rlmetrics.exporter.exports",
    "rlmetrics.exporter",
    "rlmetrics.export.outcome",
)
BACKEND_DROPPED, BACKEND_FAILED = "rlmetrics.backend.dropped", "rlmetrics.backend.failed"
BACKEND_ATTR = "rlmetrics.backend"
VALUES_DROPPED, SERIES_ATTR, DROP_REASON_ATTR = (
    "rlmetrics.values.dropped",
    "rlmetrics.series",
    "rlmetrics.drop.reason",
)

#: A count the alert's value holds (an extrapolated increase: 7.3 rows), as a whole number.
_COUNT = '{{ $value | printf "%.0f" }}'

# The examples' run: one target and its target_info.
_RUN = 'job="run",instance="a"'
_TARGET_INFO = (f'target_info{{{_RUN},{RUN_ID_LABEL}="r1"}}', "1x90")
_ALERT = {"job": "run", "instance": "a", RUN_ID_LABEL: "r1"}


def stall_rules(context: AlertContext) -> Iterator[AlertRule]:
    names = context.names
    if LAST_TIMESTAMP not in names or INTERVAL_MEDIAN not in names:
        return
    defaults = StallRule()  # /health's rule and defaults
    factor = context.threshold(
        "stall.factor",
        defaults.factor,
        "silence, in median step intervals, after which a run is stalled",
    )
    floor = context.threshold(
        "stall.min_s", defaults.min_s, "the shortest silence that counts as a stall (scrape lag)"
    )
    bound = context.threshold(
        "stall.bound_s",
        defaults.bound_s,
        "the silence that counts as a stall before 20 steps are known",
    )
    last, median = names.gauge(LAST_TIMESTAMP), names.gauge(INTERVAL_MEDIAN)
    limit = (
        f"clamp_min({factor:g} * {median}, {floor:g}) or on(job, instance) (0 * {last} + {bound:g})"
    )
    silence = f"time() - {last}"
    # Steps every minute until 30 min, then silence; the examples run at default thresholds.
    steps = f"{last}{{{_RUN}}}", "0+60x30 1800x60"
    yield AlertRule(
        "RLStepStalled",
        with_run_id(f"{silence} > on(job, instance) ({limit})"),
        summary="Run {{ $labels.rlmetrics_run_id }} ({{ $labels.instance }}) has logged no "
        "step for {{ $value | humanizeDuration }} (rl.step.last_timestamp; the limit: "
        f"{factor:g}x its median step interval, at least {floor:g}s, or {bound:g}s before 20 "
        "steps)",
        description="No new trainer step for longer than the stall threshold: "
        f"{factor:g}x the median step interval (at least {floor:g} s), or {bound:g} s before "
        "20 steps are known. The process still answers scrapes, so it is alive but stuck.",
        runbook="Check the run's /health and its log for the last phase it entered; look for "
        "a hung collective, a dead rollout or Gym server, or a data loader waiting on storage.",
        for_s=context.for_(0),
        severity="page",
        reads=(LAST_TIMESTAMP, INTERVAL_MEDIAN),
        examples=(
            AlertExample(
                "steps every minute",
                [steps, (f"{median}{{{_RUN}}}", "60x90"), _TARGET_INFO],
                at_s=1800,
            ),
            AlertExample(
                "ten minutes silent at a one-minute pace",
                [steps, (f"{median}{{{_RUN}}}", "60x90"), _TARGET_INFO],
                at_s=2400,
                alerts=[_ALERT],
            ),
            AlertExample(
                "four minutes silent at a ten-minute pace",
                [steps, (f"{median}{{{_RUN}}}", "600x90"), _TARGET_INFO],
                at_s=2040,
            ),
            AlertExample(
                "no median yet: silent past the bound",
                [steps, _TARGET_INFO],
                at_s=2700,
                alerts=[_ALERT],
            ),
            AlertExample("no median yet: silent within the bound", [steps, _TARGET_INFO], 2300),
        ),
    )


def _ended(samples: int) -> list[tuple[str, str]]:
    """A run's endpoint scraped ``samples`` times, a minute apart, whose run ended cleanly
    at the last (``rlmetrics_run_ended`` 1), gone after it."""
    info, _values = _TARGET_INFO
    return [
        (info, f"1x{samples - 1} stale"),
        (f"{RUN_ENDED}{{{_RUN}}}", f"0x{samples - 2} 1 stale"),
    ]


def target_rules(context: AlertContext) -> Iterator[AlertRule]:
    # Only targets that exported an rlmetrics resource in the last hour (the run, Gym
    # servers): a vLLM engine or a raylet has alerts of its own. The run id is the one that
    # resource named (one per target: a process restarted on the same port within the hour
    # gives two, of which topk keeps one rather than failing the rule's one-to-one join).
    seen = (
        f"topk by (job, instance) (1, max by (job, instance, {RUN_ID_LABEL}) "
        f'(max_over_time(target_info{{{RUN_ID_LABEL}!=""}}[1h])))'
    )
    # A run that ended cleanly said so before its endpoint went (ENDED_RUNS); a run
    # restarted on the same port serves 0 again, so its death still pages.
    up = f"up{{{_RUN}}}"
    info = f'target_info{{{_RUN},{RUN_ID_LABEL}="r1"}}'
    ended_series = f"{RUN_ENDED}{{{_RUN}}}"
    yield AlertRule(
        "RLMetricsEndpointDown",
        f"((up == 0) * on(job, instance) group_left({RUN_ID_LABEL}) {seen}) "
        f"unless on(job, instance) ({ENDED_RUNS})",
        summary="rlmetrics endpoint {{ $labels.instance }} ({{ $labels.job }}) of run "
        "{{ $labels.rlmetrics_run_id }} does not answer",
        description="Prometheus cannot scrape an endpoint that was exporting rlmetrics series, "
        "and whose run did not say it ended: the process died, hangs in native code, or its "
        "port changed.",
        runbook="Check whether the process is alive; if it is, its /health and its threads "
        "(py-spy dump); if it restarted on another port, rerun rlmetrics stack.",
        for_s=context.for_(120),
        severity="page",
        examples=(
            AlertExample(
                "down after exporting",
                [(up, "1 1 1 0x10"), (info, "1 1 1")],
                at_s=600,
                alerts=[_ALERT],
            ),
            AlertExample(
                "down after exporting, its run not ended",
                [(up, "1 1 1 0x10"), (info, "1 1 1"), (ended_series, "0 0 0")],
                at_s=600,
                alerts=[_ALERT],
            ),
            AlertExample(
                "gone after its run ended",
                [(up, "1 1 1 0x10"), (info, "1 1 1"), (ended_series, "0 0 1")],
                at_s=600,
            ),
            AlertExample(
                "a run ended, the next on its port died",
                [(up, "1 1 1 0 1 1 0x10"), (info, "1 1 1 _ 1 1"), (ended_series, "0 0 1 _ 0 0")],
                at_s=900,
                alerts=[_ALERT],
            ),
            AlertExample("answering", [(up, "1x12"), (info, "1x12")], at_s=600),
            AlertExample("down, never an rlmetrics endpoint", [(up, "1 1 1 0x10")], at_s=600),
        ),
    )


def exporter_rules(context: AlertContext) -> Iterator[AlertRule]:
    names = context.names
    if EXPORTS not in names:
        return
    exporter, outcome = names.label(EXPORTER_ATTR), names.label(OUTCOME_ATTR)
    failures = f'{names.counter(EXPORTS)}{{{outcome}="failure"}}'
    series = f'{names.counter(EXPORTS)}{{{_RUN},{exporter}="otlp",{outcome}="failure"}}'
    yield AlertRule(
        "RLMetricsExportFailing",
        with_run_id(while_running(counted(failures))),
        summary="Exporter {{ $labels.rlmetrics_exporter }} of run {{ $labels.rlmetrics_run_id }} "
        f"failed {_COUNT} exports in the last 5 min ({EXPORTS}, outcome failure)",
        description="A push exporter (OTLP) has failed exports for ten minutes: the collector "
        "is down, unreachable or refusing the data. Those points are dropped (cumulative "
        "totals come back with the next export that succeeds).",
        runbook="Check the collector's address (OTEL_EXPORTER_OTLP_ENDPOINT) and health, and "
        "the run's log for the 'OTLP export ... failed' line with its gRPC status.",
        for_s=context.for_(600),
        reads=(EXPORTS,),
        examples=(
            AlertExample(
                "failing every minute",
                [(series, "0 0 1+1x30"), _TARGET_INFO],
                at_s=1200,
                alerts=[{**_ALERT, exporter: "otlp", outcome: "failure"}],
            ),
            AlertExample(
                "failing since its first failure",
                [(series, "_ _ 1+1x30"), _TARGET_INFO],
                at_s=1200,
                alerts=[{**_ALERT, exporter: "otlp", outcome: "failure"}],
            ),
            AlertExample("one failure, long ago", [(series, "0 0 1x30"), _TARGET_INFO], 1200),
            AlertExample("its first failure only", [(series, "_ _ 1x30"), _TARGET_INFO], 1200),
            AlertExample(
                "failing until its run ended",
                [(series, "0 0 1+1x20 stale"), *_ended(23)],
                at_s=1500,
            ),
        ),
    )


def backend_rules(context: AlertContext) -> Iterator[AlertRule]:
    names = context.names
    backend = names.label(BACKEND_ATTR)
    # (series, alert, for, what the backend did to N rows, why, runbook)
    for spec, alert, for_s, did, why, runbook in (
        (
            BACKEND_DROPPED,
            "RLMetricsBackendDropping",
            60,
            "dropped",
            ": its queue is full because it does not keep up",
            "The tracker is slow or stalled (network, server): check it; rows it dropped are "
            "in the JSONL file. Raise Logger(queue_size=) only for bursts.",
        ),
        (
            BACKEND_FAILED,
            "RLMetricsBackendFailing",
            300,
            "raised on",
            "",
            "Read the run's log for the backend's first failure (with its traceback); a "
            "full disk, a revoked token or a closed run are the usual causes.",
        ),
    ):
        if spec not in names:
            continue
        counter = names.counter(spec)
        series = f'{counter}{{{_RUN},{backend}="wandb"}}'
        yield AlertRule(
            alert,
            with_run_id(while_running(counted(counter))),
            summary="Backend {{ $labels.rlmetrics_backend }} of run "
            f"{{{{ $labels.rlmetrics_run_id }}}} {did} {_COUNT} rows in the last 5 min "
            f"({spec}){why}",
            description=f"A Logger backend {did} rows{why}; the training loop, the other "
            "backends and telemetry are unaffected, but this tracker is missing rows.",
            runbook=runbook,
            for_s=context.for_(for_s),
            reads=(spec,),
            examples=(
                AlertExample(
                    "losing rows every minute",
                    [(series, "0 0 5+5x30"), _TARGET_INFO],
                    at_s=900,
                    alerts=[{**_ALERT, backend: "wandb"}],
                ),
                AlertExample(  # counted from its first loss on: the series appears
                    "losing rows since its first loss",
                    [(series, "_x6 40+5x20"), _TARGET_INFO],
                    at_s=900,
                    alerts=[{**_ALERT, backend: "wandb"}],
                ),
                AlertExample("no loss", [(series, "0x30"), _TARGET_INFO], at_s=900),
                AlertExample(
                    "losing rows until its run ended",
                    [(series, "0 0 5+5x10 stale"), *_ended(13)],
                    at_s=840,
                ),
                AlertExample("one loss long ago", [(series, "_x6 40x30"), _TARGET_INFO], 1800),
            ),
        )


def value_rules(context: AlertContext) -> Iterator[AlertRule]:
    names = context.names
    if VALUES_DROPPED not in names:
        return
    series, reason = names.label(SERIES_ATTR), names.label(DROP_REASON_ATTR)
    counter = names.counter(VALUES_DROPPED)
    not_finite = f'{counter}{{{reason}=~"nan|infinite"}}'
    loss = f'{counter}{{{_RUN},{series}="rl.policy.loss",{reason}="nan"}}'
    fired = {**_ALERT, series: "rl.policy.loss", reason: "nan"}
    yield AlertRule(
        "RLValuesNotFinite",
        with_run_id(while_running(counted(not_finite))),
        summary="Run {{ $labels.rlmetrics_run_id }} logged "
        f"{_COUNT} {{{{ $labels.{reason} }}}} values of {{{{ $labels.{series} }}}} in the "
        f"last 5 min ({VALUES_DROPPED}): its series shows the last finite value",
        description="The training loop logged NaN or infinite values, which rlmetrics drops "
        "(a series keeps its last finite value, so a dashboard stays flat): a loss or a "
        "gradient norm gone NaN is a run that diverged.",
        runbook="Find the first step with the non-finite value in the run's JSONL (it keeps "
        "what was logged); look for a diverged loss (learning rate, a bad batch, fp16 "
        "overflow) or a mean over an empty batch.",
        for_s=context.for_(0),
        reads=(VALUES_DROPPED,),
        examples=(
            AlertExample(
                "a NaN loss at every step",
                [(loss, "0 0 1+1x30"), _TARGET_INFO],
                at_s=900,
                alerts=[fired],
            ),
            AlertExample(
                "its first NaN",
                [(loss, "_x10 1x20"), _TARGET_INFO],
                at_s=660,
                alerts=[fired],
            ),
            AlertExample("a NaN long ago", [(loss, "_x5 1x30"), _TARGET_INFO], at_s=1800),
            AlertExample(
                "a NaN loss until its run ended",
                [(loss, "0 0 1+1x10 stale"), *_ended(13)],
                at_s=840,
            ),
            AlertExample(
                "negative counts, not NaN",
                [
                    (
                        f'{counter}{{{_RUN},{series}="rl.tokens",{reason}="negative"}}',
                        "0 0 1+1x30",
                    ),
                    _TARGET_INFO,
                ],
                at_s=900,
            ),
        ),
    )


@hookimpl
def register_alert_rules(register: Callable[[RuleBuilder], None]) -> None:
    register(stall_rules)
    register(target_rules)
    register(exporter_rules)
    register(backend_rules)
    register(value_rules)
