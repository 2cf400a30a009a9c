"""Dashboard rows of the core's own families: training scalars, goodput and idle time, setup
phases and rollout checkpointing. An entry point of the ``rlmetrics`` distribution, loaded like
any plugin's rows.

The goodput row follows the measurement and window rules of ``rl.efficiency.seconds``: only
``wall_clock`` values of the ``step`` window are set against a step's wall time; ``init/total``
is a run constant shown once; the collector's ``run`` values are cumulative and shown as they
are, never summed over steps; ``thread_seconds`` are not durations and are shown as saturation
(thread-seconds per second: how many worker threads were backing off at once).
"""

from __future__ import annotations

from collections.abc import Callable

from .. import hookimpl
from .model import Panel, Query, Row
from .promql import Names, for_run

__all__ = [
    "checkpoint_row",
    "goodput_row",
    "register_dashboard_rows",
    "reward_components_row",
    "setup_row",
    "training_row",
]

_REWARD, _KL, _LOSS = "rl.reward.mean", "rl.kl.divergence", "rl.policy.loss"
_ENTROPY, _GRAD_NORM = "rl.entropy", "rl.grad_norm"
_SECONDS, _PCT = "rl.efficiency.seconds", "rl.efficiency.pct"
_SETUP = "rl.setup.duration"
_ATTEMPTS, _DURATION = "rl.rollout.checkpoint.attempts", "rl.rollout.checkpoint.duration"
_SINCE_SUCCESS = "rl.rollout.checkpoint.since_last_success"


def training_row(names: Names) -> Row:
    def scalar(name: str, title: str, description: str) -> Panel:
        return Panel(
            title,
            [Query(for_run(names.gauge(name)), "{{rlmetrics_run_id}}")],
            reads=[name],
            description=description,
            width=8,
        )

    return Row(
        "Training",
        [
            scalar(_REWARD, "Reward (mean of the step's samples)", "rl.reward.mean"),
            scalar(_KL, "KL divergence to the reference policy", "rl.kl.divergence"),
            scalar(_LOSS, "Policy loss", "rl.policy.loss"),
            scalar(_ENTROPY, "Approximate entropy", "rl.entropy"),
            scalar(_GRAD_NORM, "Gradient norm", "rl.grad_norm"),
        ],
        order=0,
    )


def reward_components_row(names: Names) -> Row:
    component = names.label("rl.reward.component")
    dataset = names.label("rl.dataset")
    components = for_run(names.gauge("rl.reward.component_mean"))
    accuracy = for_run(names.gauge("rl.validation.accuracy"))
    return Row(
        "Reward components and validation datasets",
        [
            Panel(
                "Reward by component",
                [Query(f"max by ({component}) ({components})", f"{{{{{component}}}}}")],
                reads=["rl.reward.component_mean"],
                description="rl.reward.component_mean from reward/<component> keys: one curve "
                "per reward function or verifier; other holds the components past the cap.",
                width=12,
            ),
            Panel(
                "Validation accuracy by dataset",
                [Query(f"max by ({dataset}) ({accuracy})", f"{{{{{dataset}}}}}")],
                reads=["rl.validation.accuracy"],
                description="rl.validation.accuracy from validation/<dataset>/accuracy keys, "
                "one curve per dataset instead of one sample-weighted mean.",
                width=12,
            ),
        ],
        order=5,
    )


def goodput_row(names: Names) -> Row:
    seconds = names.gauge(_SECONDS)
    category, measurement = (
        names.label("rl.efficiency.category"),
        names.label("rl.efficiency.measurement"),
    )
    window, bucket = names.label("rl.efficiency.window"), names.label("rl.bucket")

    def where(**labels: str) -> str:
        return seconds + "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"

    step_idle = where(**{measurement: "wall_clock", window: "step", bucket: "idle"})
    init_total = for_run(where(**{category: "init/total"}))
    collector = for_run(where(**{measurement: "collector_wall_clock"}))
    thread_seconds = where(**{measurement: "thread_seconds"})
    threads = for_run(f"deriv({thread_seconds}[$__rate_interval])")
    return Row(
        "Goodput and idle time",
        [
            Panel(
                "Goodput per step (productive share of the step's wall clock)",
                [
                    Query(
                        for_run(
                            names.gauge(_PCT) + "{" + f'{measurement}="wall_clock", '
                            f'{window}="step"' + "}"
                        ),
                        "goodput",
                    )
                ],
                reads=[_PCT],
                description="rl.efficiency.pct with window=step: the three step-window idle "
                "categories over the step's wall time. A window=run point climbs toward 100% "
                "as the run lengthens and is left out.",
                unit="percent",
            ),
            Panel(
                "Idle per step by category (driver wall clock)",
                [Query(f"sum by ({category}) ({for_run(step_idle)})", f"{{{{{category}}}}}")],
                reads=[_SECONDS],
                description="measurement=wall_clock, window=step: per-step deltas that may be "
                "stacked against the step's wall time (and summed across steps).",
                unit="s",
                stacked=True,
                bars=True,
            ),
            Panel(
                "Startup before the first step (init/total, overhead)",
                [Query(f"max({init_total})", "init/total")],
                reads=[_SECONDS],
                description="A run constant republished every step: read it once, never sum it.",
                type="stat",
                unit="s",
                width=6,
            ),
            Panel(
                "Collector waits (cumulative since start)",
                [Query(f"sum by ({category}) ({collector})", f"{{{{{category}}}}}")],
                reads=[_SECONDS],
                description="measurement=collector_wall_clock, window=run: the collector loop's "
                "own clock, concurrent with the driver's; cumulative, so each point already "
                "contains the previous ones.",
                unit="s",
                width=9,
            ),
            Panel(
                "Worker-thread saturation (threads busy at once)",
                [Query(f"sum by ({category}) ({threads})", f"{{{{{category}}}}}")],
                reads=[_SECONDS],
                description="measurement=thread_seconds summed over concurrent worker threads: "
                "not durations. Their growth per second is how many threads were in the "
                "category at once.",
                unit="short",
                width=9,
            ),
        ],
        order=10,
    )


def setup_row(names: Names) -> Row:
    setup = names.gauge(_SETUP)
    phase = names.label("rl.setup.phase")
    total = for_run(setup + "{" + phase + '="total_setup"}')
    phases = for_run(setup + "{" + phase + '!="total_setup"}')
    return Row(
        "Setup",
        [
            Panel(
                "Total setup",
                [Query(f"max({total})", "total_setup")],
                reads=[_SETUP],
                description="phase=total_setup, the one value that cannot double-count.",
                type="stat",
                unit="s",
                width=6,
            ),
            Panel(
                "Setup phases (they overlap: read one at a time)",
                [Query(f"max by ({phase}) ({phases})", f"{{{{{phase}}}}}")],
                reads=[_SETUP],
                description="Phases contain each other (parallel_wall covers the concurrent "
                "builds, generation_init its reserve and load parts): never sum them.",
                type="bargauge",
                unit="s",
                width=18,
            ),
        ],
        order=20,
    )


def checkpoint_row(names: Names) -> Row:
    attempts = names.counter(_ATTEMPTS)
    outcome, reason = (
        names.label("rl.rollout.checkpoint.outcome"),
        names.label("rl.rollout.checkpoint.reason"),
    )
    operation, phase = (
        names.label("rl.rollout.checkpoint.operation"),
        names.label("rl.rollout.checkpoint.phase"),
    )
    totals = names.histogram(_DURATION) + "{" + phase + '=~"total_save|total_load"}'
    by_outcome = for_run(f"increase({attempts}[$__range])")
    latency = for_run(f"rate({totals}[$__rate_interval])")
    phase_sum = for_run(f"increase({names.histogram(_DURATION, 'sum')}[$__range])")
    phase_count = for_run(f"increase({names.histogram(_DURATION, 'count')}[$__range])")
    return Row(
        "Rollout checkpointing",
        [
            Panel(
                "Checkpoint attempts by outcome and reason",
                [
                    Query(
                        f"sum by ({outcome}, {reason}) ({by_outcome})",
                        f"{{{{{outcome}}}}} ({{{{{reason}}}}})",
                    )
                ],
                reads=[_ATTEMPTS],
                type="bargauge",
                unit="short",
                width=8,
            ),
            Panel(
                "Save and restore latency (p50, p95)",
                [
                    Query(
                        f"histogram_quantile({q}, sum by (le, {operation}) ({latency}))",
                        f"{{{{{operation}}}}} p{int(q * 100)}",
                    )
                    for q in (0.5, 0.95)
                ],
                reads=[_DURATION],
                description="End-to-end total_save / total_load phases of "
                "rl.rollout.checkpoint.duration.",
                unit="s",
                width=8,
            ),
            Panel(
                "Mean latency by phase",
                [
                    Query(
                        f"sum by ({operation}, {phase}) ({phase_sum})"
                        f" / sum by ({operation}, {phase}) ({phase_count})",
                        f"{{{{{operation}}}}} {{{{{phase}}}}}",
                    )
                ],
                reads=[_DURATION],
                description="Exact means from the histogram's sum and count, per save or "
                "restore phase.",
                type="bargauge",
                unit="s",
                width=8,
            ),
            Panel(
                "Time since the last completed checkpoint",
                [Query(for_run(names.gauge(_SINCE_SUCCESS)), "since last success")],
                reads=[_SINCE_SUCCESS],
                unit="s",
                width=24,
                height=6,
            ),
        ],
        order=30,
    )


_ROWS: tuple[Callable[[Names], Row], ...] = (
    training_row,
    reward_components_row,
    goodput_row,
    setup_row,
    checkpoint_row,
)


@hookimpl
def register_dashboard_rows(register: Callable[[Callable[[Names], Row]], None]) -> None:
    for build in _ROWS:
        register(build)
