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
        self._prompt_tokens = Counter(PROMPT_TOKENS_FAMILY, "Number of prefill tokens processed.",
                                      labels, registry=self.registry)
        self._generation_tokens = Counter(GENERATION_TOKENS_FAMILY,
                                          "Number of generation tokens processed.", labels,
                                          registry=self.registry)
        self._success = Counter(REQUEST_SUCCESS_FAMILY, "Count of successfully processed requests.",
                                [*labels, FINISHED_REASON_LABEL], registry=self.registry)
        self._prompt_length = Histogram(PROMPT_LENGTH_FAMILY, "Number of prefill tokens processed.",
                                        labels, buckets=_LENGTH_BUCKETS, registry=self.registry)
        self._generation_length = Histogram(GENERATION_LENGTH_FAMILY,
                                            "Number of generation tokens processed.", labels,
                                            buckets=_LENGTH_BUCKETS, registry=self.registry)
        for engine in self.engines:  # vLLM binds every child up front, so zeros are exposed
            for metric in (self._prompt_tokens, self._generation_tokens, self._prompt_length,
                           self._generation_length):
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
        before = self.engine.reading()
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
            self.engine.finish(_ENGINES[index % len(_ENGINES)], prompt, generated, reason)
            if reason != "abort":  # an aborted request never reaches the driver
                received_in.append(prompt)
                received_out.append(generated)
        after = self.engine.reading()
        record_generation(received_in, received_out, step.generation_s, model=DEMO_MODEL)
        return step_metrics(before, after)

    def close(self) -> None:
        pass


@rlmetrics.hookimpl
def register_demo_parts(register: Callable[[str, Callable[[DemoSettings], VllmDemoPart]], None]) -> None:
    register("vllm", VllmDemoPart)
