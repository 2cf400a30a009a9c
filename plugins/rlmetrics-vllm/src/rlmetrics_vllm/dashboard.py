"""Dashboard rows of this distribution: the vLLM engine's per-step deltas (``rl.vllm.*``) and
the driver's ``gen_ai.*``.

The engine's token and request counters are read through ``rate()``/``increase()`` (they carry
per-step deltas, so Prometheus sees ordinary counters); the means are per-step gauges with gaps
where a step had no reading. Token usage per request comes from the ``gen_ai`` histogram
through ``histogram_quantile``.
"""

from __future__ import annotations

from collections.abc import Callable

import rlmetrics
from rlmetrics.dashboard.model import Panel, Query, Row
from rlmetrics.dashboard.promql import Names, for_run

__all__ = ["engine_row", "engine_state_row", "gen_ai_row", "register_dashboard_rows"]

_PROMPT, _GENERATION = "rl.vllm.prompt_tokens", "rl.vllm.generation_tokens"
_OK, _FAILED = "rl.vllm.generations.ok", "rl.vllm.generations.failed"
_PROMPT_MEAN, _GENERATION_MEAN = "rl.vllm.prompt_length.mean", "rl.vllm.generation_length.mean"
_USAGE, _BATCH = "gen_ai.client.token.usage", "rl.vllm.batch.duration"
_HIT_RATE, _KV, _AWAKE = (
    "rl.vllm.prefix_cache.hit_rate",
    "rl.vllm.kv_cache.usage",
    "rl.vllm.engine.awake",
)
_WAITING, _PREEMPTIONS = "rl.vllm.requests.waiting", "rl.vllm.preemptions"


def engine_row(names: Names) -> Row:
    def rate(name: str) -> str:
        return f"sum({for_run(f'rate({names.counter(name)}[$__rate_interval])')})"

    def increase(name: str) -> str:
        return f"sum({for_run(f'increase({names.counter(name)}[$__range])')})"

    return Row(
        "vLLM engine",
        [
            Panel(
                "Engine token throughput",
                [Query(rate(_PROMPT), "prompt"), Query(rate(_GENERATION), "generation")],
                reads=[_PROMPT, _GENERATION],
                description="rate() of the per-step engine deltas (vllm:prompt_tokens, "
                "vllm:generation_tokens), summed over engines and data-parallel leaders.",
                unit="short",
                width=9,
            ),
            Panel(
                "Finished generations per second by result",
                [Query(rate(_OK), "ok (stop, length)"), Query(rate(_FAILED), "failed")],
                reads=[_OK, _FAILED],
                description="failed is every finish reason but stop and length (abort, error, "
                "repetition, and any added later), so ok + failed is the engine's own total.",
                unit="short",
                stacked=True,
                width=9,
            ),
            Panel(
                "Failed share",
                [Query(f"{increase(_FAILED)} / ({increase(_OK)} + {increase(_FAILED)})", "failed")],
                reads=[_OK, _FAILED],
                type="stat",
                unit="percentunit",
                thresholds=[(0.02, "orange"), (0.1, "red")],
                width=6,
            ),
            Panel(
                "Mean request lengths per step",
                [
                    Query(for_run(names.gauge(_PROMPT_MEAN)), "prompt"),
                    Query(for_run(names.gauge(_GENERATION_MEAN)), "generation"),
                ],
                reads=[_PROMPT_MEAN, _GENERATION_MEAN],
                description="Exact sum/count deltas of vLLM's length histograms; a gap is a step "
                "without a reading (an engine restarted mid-step, or no request finished).",
                unit="short",
                width=24,
                height=7,
            ),
        ],
        order=50,
    )


def engine_state_row(names: Names) -> Row:
    reason = names.label("rl.vllm.waiting.reason")
    preempted = f"sum({for_run(f'increase({names.counter(_PREEMPTIONS)}[$__rate_interval])')})"
    return Row(
        "vLLM engine state and cache",
        [
            Panel(
                "Prefix-cache hit rate and KV-cache usage per step",
                [
                    Query(for_run(names.gauge(_HIT_RATE)), "prefix-cache hit rate"),
                    Query(for_run(names.gauge(_KV)), "KV-cache usage"),
                ],
                reads=[_HIT_RATE, _KV],
                description="Hits over queries of the step's prefix-cache lookups (tokens), and "
                "the engines' mean KV-cache usage at the step's end. A gap is a step with no "
                "reading or an engine restart.",
                unit="percentunit",
                width=9,
            ),
            Panel(
                "Share of the step the engines were awake",
                [Query(for_run(names.gauge(_AWAKE)), "awake")],
                reads=[_AWAKE],
                description="vllm:engine_sleep_state over the step. In a colocated run the "
                "rest is the generation fleet asleep while the policy trains: 1 - this is its "
                "idle share.",
                unit="percentunit",
                width=8,
            ),
            Panel(
                "Requests waiting by reason, preemptions",
                [
                    Query(
                        f"sum by ({reason}) ({for_run(names.gauge(_WAITING))})",
                        f"waiting: {{{{{reason}}}}}",
                    ),
                    Query(preempted, "preempted"),
                ],
                reads=[_WAITING, _PREEMPTIONS],
                unit="short",
                width=7,
            ),
        ],
        order=51,
    )


def gen_ai_row(names: Names) -> Row:
    usage = names.histogram(_USAGE)
    batch = names.histogram(_BATCH)
    token_type = names.label("gen_ai.token.type")
    usage_rate = for_run(f"rate({usage}[$__rate_interval])")
    batch_rate = for_run(f"rate({batch}[$__rate_interval])")
    return Row(
        "GenAI client (what the driver received)",
        [
            Panel(
                "Tokens per request (p50, p90, p99)",
                [
                    Query(
                        f"histogram_quantile({q}, sum by (le, {token_type}) ({usage_rate}))",
                        f"{{{{{token_type}}}}} p{round(q * 100)}",
                    )
                    for q in (0.5, 0.9, 0.99)
                ],
                reads=[_USAGE],
                description="gen_ai.client.token.usage by gen_ai.token.type. Requests the engine "
                "aborted never reach the driver, which is where this and rl.vllm.* part ways.",
                unit="short",
            ),
            Panel(
                "generate() batch duration (p50, p95)",
                [
                    Query(
                        f"histogram_quantile({q}, sum by (le) ({batch_rate}))", f"p{round(q * 100)}"
                    )
                    for q in (0.5, 0.95)
                ],
                reads=[_BATCH],
                unit="s",
            ),
        ],
        order=55,
    )


@rlmetrics.hookimpl
def register_dashboard_rows(register: Callable[[Callable[[Names], Row]], None]) -> None:
    register(engine_row)
    register(engine_state_row)
    register(gen_ai_row)
