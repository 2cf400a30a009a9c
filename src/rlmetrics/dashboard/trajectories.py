"""Dashboard rows of the trajectory family: rollouts by outcome, their duration and tool
calls, and the off-policy signals (staleness, logprob mismatch by lag, importance ratio). An
entry point of the ``rlmetrics`` distribution, loaded like any plugin's rows; a row whose
series are not declared (the family disabled) is left out."""

from __future__ import annotations

from collections.abc import Callable

from .. import hookimpl
from .model import Panel, Query, Row
from .promql import Names, for_run

__all__ = ["off_policy_row", "register_dashboard_rows", "trajectories_row"]

_COMPLETED, _DURATION, _TOOLS = "rl.trajectory.completed", "rl.trajectory.duration", "rl.tool.calls"
_STALENESS, _MISMATCH, _RATIO = (
    "rl.offpolicy.staleness",
    "rl.offpolicy.logprob_mismatch",
    "rl.offpolicy.importance_ratio",
)


def _rate(vector: str) -> str:
    return for_run(f"rate({vector}[$__rate_interval])")


def _quantile(q: float, buckets: str, by: str = "") -> str:
    group = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({group}) ({_rate(buckets)}))"


def trajectories_row(names: Names) -> Row | None:
    if _COMPLETED not in names or _DURATION not in names or _TOOLS not in names:
        return None
    outcome = names.label("rl.trajectory.outcome")
    tool, tool_outcome = names.label("gen_ai.tool.name"), names.label("rl.tool.outcome")
    duration = names.histogram(_DURATION)
    return Row(
        "Trajectories",
        [
            Panel(
                "Trajectories by outcome (per second)",
                [
                    Query(
                        f"sum by ({outcome}) ({_rate(names.counter(_COMPLETED))})",
                        f"{{{{{outcome}}}}}",
                    )
                ],
                reads=[_COMPLETED],
                description="rl.trajectory.completed: every rollout logged as a trajectory "
                "(success, failure, error, truncated).",
                width=8,
            ),
            Panel(
                "Rollout duration (p50, p90)",
                [Query(_quantile(q, duration), f"p{int(q * 100)}") for q in (0.5, 0.9)],
                reads=[_DURATION],
                description="rl.trajectory.duration; its exemplars point at trajectory spans.",
                unit="s",
                width=8,
            ),
            Panel(
                "Tool calls by tool and outcome (per second)",
                [
                    Query(
                        f"sum by ({tool}, {tool_outcome}) ({_rate(names.counter(_TOOLS))})",
                        f"{{{{{tool}}}}} {{{{{tool_outcome}}}}}",
                    )
                ],
                reads=[_TOOLS],
                description="rl.tool.calls; other holds the tools past the cap.",
                width=8,
            ),
        ],
        order=40,
    )


def off_policy_row(names: Names) -> Row | None:
    if _STALENESS not in names or _MISMATCH not in names or _RATIO not in names:
        return None
    lag = names.label("rl.offpolicy.lag")
    return Row(
        "Off-policy rollouts",
        [
            Panel(
                "Staleness in weight versions (p50, p90)",
                [
                    Query(_quantile(q, names.histogram(_STALENESS)), f"p{int(q * 100)}")
                    for q in (0.5, 0.9)
                ],
                reads=[_STALENESS],
                description="rl.offpolicy.staleness: how many weight versions behind the "
                "trained policy the rollouts' policy was.",
                width=8,
            ),
            Panel(
                "Logprob mismatch by lag (p90)",
                [
                    Query(
                        _quantile(0.9, names.histogram(_MISMATCH), lag),
                        f"lag {{{{{lag}}}}}",
                    )
                ],
                reads=[_MISMATCH],
                description="rl.offpolicy.logprob_mismatch: rollout engine against trainer; "
                "a mismatch that grows with the lag is staleness, one at lag 0 a numerics "
                "difference.",
                width=8,
            ),
            Panel(
                "Importance ratio (p5, p50, p95)",
                [
                    Query(_quantile(q, names.histogram(_RATIO)), f"p{round(q * 100)}")
                    for q in (0.05, 0.5, 0.95)
                ],
                reads=[_RATIO],
                description="rl.offpolicy.importance_ratio: trainer over engine probability; "
                "far from 1 means the batch is far off-policy.",
                width=8,
            ),
        ],
        order=41,
    )


@hookimpl
def register_dashboard_rows(register: Callable[[Callable[[Names], Row | None]], None]) -> None:
    register(trajectories_row)
    register(off_policy_row)
