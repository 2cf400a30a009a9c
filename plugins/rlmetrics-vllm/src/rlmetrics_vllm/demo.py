"""The vLLM part of ``rlmetrics demo``: a simulated engine whose Prometheus registry is shaped
like vLLM's, read and delta'd by this distribution's real reader.

Each step the part serves the step's requests on two engines of one ``CollectorRegistry``
holding vLLM's families (``vllm:prompt_tokens``, ``vllm:generation_tokens``,
``vllm:request_success{finished_reason}``, the prompt and generation length histograms, labelled
``model_name`` and ``engine`` as vLLM labels them), reads the text exposition before and after
(:func:`rlmetrics_vllm.engine.read_text`) and returns :func:`~rlmetrics_vllm.engine.step_metrics`
for the step's train dict, which the ``vllm`` family tees into ``rl.vllm.*``. Halfway through the
run the engine restarts mid-step (a fresh registry: totals from zero, new ``_created``), so that
step has no ``vllm/*`` keys at all — the gap the family and the report show.

The engines also keep vLLM's state and cache families: prefix-cache queries and hits (a step's
prompts share a system prompt, so most of each prompt hits after the first request), cached
prompt tokens, preemptions, KV-cache usage, requests waiting by reason and the sleep state. The
engines sleep while the policy trains and wake for generation: the part reads them at the
step's start (asleep), at the wake-up and after generation, so
:func:`~rlmetrics_vllm.engine.engine_signals` gives the awake share of the step.

Finish reasons: a response at the generation limit ends with ``length``, a few requests are
aborted (the driver never receives them) or end in ``error``, the rest ``stop``. The requests
the driver received go to ``gen_ai.client.token.usage`` and the batch's wall clock to
``rl.vllm.batch.duration`` (:func:`rlmetrics_vllm.gen_ai.record_generation`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import rlmetrics
from rlmetrics.demo.parts import DemoSettings, DemoStep

from .engine import (
    FINISHED_REASON_LABEL,
    GENERATION_LENGTH_FAMILY,
    GENERATION_TOKENS_FAMILY,
    PROMPT_LENGTH_FAMILY,
    PROMPT_TOKENS_FAMILY,
    REQUEST_SUCCESS_FAMILY,
    Snapshot,
    engine_signals,
    read_text,
    step_metrics,
)
from .gen_ai import record_generation

__all__ = ["DEMO_MODEL", "EngineSimulator", "VllmDemoPart", "register_demo_parts"]

DEMO_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
_ENGINES = ("0", "1")
_REASONS = ("stop", "length", "abort", "error", "repetition")
# vLLM's 1-2-5 length buckets up to the model length.
_LENGTH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
_ABORT_P, _ERROR_P = 0.03, 0.01


class EngineSimulator:
    """vLLM's engine families in a registry of their own, served by :meth:`exposition`."""

    def __init__(self, model: str = DEMO_MODEL, engines: Sequence[str] = _ENGINES) -> None:
        self.model = model
        self.engines = tuple(engines)
        self.restart()

    def restart(self) -> None:
        """A new engine process: every total from zero, every series created anew."""
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        self._prompt_tokens = Counter(
            PROMPT_TOKENS_FAMILY,
            "Number of prefill tokens processed.",
            labels,
            registry=self.registry,
        )
        self._generation_tokens = Counter(
            GENERATION_TOKENS_FAMILY,
            "Number of generation tokens processed.",
            labels,
            registry=self.registry,
        )
        self._success = Counter(
            REQUEST_SUCCESS_FAMILY,
            "Count of successfully processed requests.",
            [*labels, FINISHED_REASON_LABEL],
            registry=self.registry,
        )
        self._prompt_length = Histogram(
            PROMPT_LENGTH_FAMILY,
            "Number of prefill tokens processed.",
            labels,
            buckets=_LENGTH_BUCKETS,
            registry=self.registry,
        )
        self._generation_length = Histogram(
            GENERATION_LENGTH_FAMILY,
            "Number of generation tokens processed.",
            labels,
            buckets=_LENGTH_BUCKETS,
            registry=self.registry,
        )
        from prometheus_client import Gauge

        self._queries = Counter(
            "vllm:prefix_cache_queries", "Prefix cache queries.", labels, registry=self.registry
        )
        self._hits = Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits.", labels, registry=self.registry
        )
        self._cached = Counter(
            "vllm:prompt_tokens_cached", "Cached prompt tokens.", labels, registry=self.registry
        )
        self._preemptions = Counter(
            "vllm:num_preemptions", "Preemptions.", labels, registry=self.registry
        )
        # Counted only with vLLM's --enable-mfu-metrics: here never, so no MFU is derived.
        self._flops = Counter(
            "vllm:estimated_flops_per_gpu",
            "Estimated FLOPs per GPU.",
            labels,
            registry=self.registry,
        )
        self._kv_usage = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage.", labels, registry=self.registry
        )
        self._waiting = Gauge(
            "vllm:num_requests_waiting_by_reason",
            "Waiting requests by reason.",
            [*labels, "reason"],
            registry=self.registry,
        )
        self._sleep = Gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state.",
            [*labels, "sleep_state"],
            registry=self.registry,
        )
        for engine in self.engines:
            for counter in (
                self._queries,
                self._hits,
                self._cached,
                self._preemptions,
                self._flops,
            ):
                counter.labels(self.model, engine)
            self._kv_usage.labels(self.model, engine)
            for reason in ("capacity", "deferred"):
                self._waiting.labels(self.model, engine, reason)
        self.set_awake(True)
        for engine in self.engines:  # vLLM binds every child up front, so zeros are exposed
            for metric in (
                self._prompt_tokens,
                self._generation_tokens,
                self._prompt_length,
                self._generation_length,
            ):
                metric.labels(self.model, engine)
            for reason in _REASONS:
                self._success.labels(self.model, engine, reason)

    def finish(self, engine: str, prompt: int, generated: int, reason: str) -> None:
        """One request finished on ``engine``."""
        self._prompt_tokens.labels(self.model, engine).inc(prompt)
        self._generation_tokens.labels(self.model, engine).inc(generated)
        self._success.labels(self.model, engine, reason).inc()
        self._prompt_length.labels(self.model, engine).observe(prompt)
        self._generation_length.labels(self.model, engine).observe(generated)

    def cache(self, engine: str, queried: int, hit: int) -> None:
        """A request's prompt looked up in the prefix cache: ``hit`` of ``queried`` tokens."""
        self._queries.labels(self.model, engine).inc(queried)
        self._hits.labels(self.model, engine).inc(hit)
        self._cached.labels(self.model, engine).inc(hit)

    def state(self, kv_usage: float, waiting: int, preempted: int) -> None:
        """What the engines hold when generation ends."""
        for index, engine in enumerate(self.engines):
            self._kv_usage.labels(self.model, engine).set(kv_usage)
            self._waiting.labels(self.model, engine, "capacity").set(waiting if index == 0 else 0)
            self._preemptions.labels(self.model, engine).inc(preempted if index == 0 else 0)

    def set_awake(self, awake: bool) -> None:
        """``sleep()`` (the policy trains on the same GPUs) or ``wake_up()``."""
        for engine in self.engines:
            self._sleep.labels(self.model, engine, "awake").set(1.0 if awake else 0.0)
            self._sleep.labels(self.model, engine, "weights_offloaded").set(0.0 if awake else 1.0)

    def exposition(self) -> str:
        """The registry as a ``/metrics`` endpoint would serve it."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()

    def reading(self) -> Snapshot:
        return read_text(self.exposition())


class VllmDemoPart:
    """Serves each step's requests, returns the step's ``vllm/*`` keys, records ``gen_ai``."""

    def __init__(self, settings: DemoSettings) -> None:
        self.engine = EngineSimulator()
        #: The step in which the engine restarts (none in runs too short to show it).
        self.restart_step = settings.steps // 2 + 1 if settings.steps >= 4 else None

    def step(self, step: DemoStep) -> Mapping[str, Any]:
        rng = step.random("vllm")
        # The engines slept while the policy trained; generation wakes them a share of the
        # step in (the rest of the step is the training that follows).
        self.engine.set_awake(False)
        before = _at(self.engine.reading(), 0.0)
        self.engine.set_awake(True)
        awake_at = rng.uniform(0.25, 0.45) * step.generation_s
        woken = _at(self.engine.reading(), awake_at)
        received_in: list[int] = []
        received_out: list[int] = []
        requests = list(zip(step.prompt_tokens, step.response_tokens, strict=True))
        for index, (prompt, response) in enumerate(requests):
            if step.step == self.restart_step and index == len(requests) // 2:
                self.engine.restart()
            u = rng.random()
            if u < _ABORT_P:
                reason, generated = "abort", rng.randint(1, max(1, response))
            elif u < _ABORT_P + _ERROR_P:
                reason, generated = "error", rng.randint(0, max(1, response // 4))
            else:
                reason = "length" if response >= step.max_tokens else "stop"
                generated = response
            engine = _ENGINES[index % len(_ENGINES)]
            shared = int(prompt * rng.uniform(0.55, 0.8)) if index >= len(_ENGINES) else 0
            self.engine.cache(engine, prompt, shared)  # the first request per engine misses
            self.engine.finish(engine, prompt, generated, reason)
            if reason != "abort":  # an aborted request never reaches the driver
                received_in.append(prompt)
                received_out.append(generated)
        self.engine.state(
            kv_usage=rng.uniform(0.55, 0.9), waiting=rng.randint(0, 3), preempted=rng.randint(0, 1)
        )
        after = _at(self.engine.reading(), awake_at + step.generation_s)
        record_generation(received_in, received_out, step.generation_s, model=DEMO_MODEL)
        return {**step_metrics(before, after), **engine_signals(before, after, during=[woken])}

    def close(self) -> None:
        pass


def _at(reading: Snapshot, seconds: float) -> Snapshot:
    """The reading as taken ``seconds`` into the simulated step (the demo's clock, not the
    wall clock: the run is paced faster than a real step)."""
    return Snapshot(reading.parts, seconds)


@rlmetrics.hookimpl
def register_demo_parts(
    register: Callable[[str, Callable[[DemoSettings], VllmDemoPart]], None],
) -> None:
    register("vllm", VllmDemoPart)
