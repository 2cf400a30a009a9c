"""Test support for rlmetrics-vllm: readings derived from vLLM 0.32.0's real exposition, a real
prometheus_client registry holding vLLM's families, and an HTTP server on 127.0.0.1.

A module of its own (not conftest.py) so test modules can import it by a name no other test
folder uses; the fixtures built on it are in conftest.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from rlmetrics_vllm.engine import (
    ENGINE_FAMILIES,
    GENERATION_LENGTH_FAMILY,
    GENERATION_LENGTH_MEAN_KEY,
    GENERATION_TOKENS_FAMILY,
    GENERATION_TOKENS_KEY,
    GENERATIONS_FAILED_KEY,
    GENERATIONS_OK_KEY,
    PROMPT_LENGTH_FAMILY,
    PROMPT_LENGTH_MEAN_KEY,
    PROMPT_TOKENS_FAMILY,
    PROMPT_TOKENS_KEY,
    REQUEST_SUCCESS_FAMILY,
    SIGNAL_FAMILIES,
)

from rlmetrics.testing import ExpositionServer

__all__ = [
    "AFTER",
    "BEFORE",
    "EXPECTED",
    "FINISH_REASONS",
    "FIXTURE",
    "MODEL",
    "EngineValues",
    "TextServer",
    "VllmRegistry",
    "render_exposition",
]

FIXTURE = Path(__file__).parent / "fixtures" / "vllm-0.32.0-metrics.txt"
MODEL = "tiny-model"
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


# -- readings derived from the fixture -----------------------------------------------------------


@dataclass
class EngineValues:
    """One engine's cumulative totals, written into the fixture's sample lines."""

    prompt_tokens: float = 0
    generation_tokens: float = 0
    prompt_sum: float = 0
    prompt_count: float = 0
    generation_sum: float = 0
    generation_count: float = 0
    finished: dict[str, float] = field(default_factory=dict)
    #: The series' creation time (``_created``); None keeps the fixture's. A new one is what an
    #: engine restart looks like even when the new totals have passed the old ones.
    created: float | None = None
    # The engine's state and cache (vLLM 0.32.0's own families).
    prefix_queries: float = 0
    prefix_hits: float = 0
    preemptions: float = 0
    cached_prompt_tokens: float = 0
    flops: float = 0
    kv_usage: float = 0.0
    waiting: dict[str, float] = field(default_factory=dict)
    awake: float = 1.0


_SAMPLE = re.compile(r"^(?P<name>[^{\s#]+)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)$")
_COMMENT = re.compile(r"^# (?:HELP|TYPE) (?P<name>\S+)")
_FIXTURE_LINES = tuple(FIXTURE.read_text().splitlines())
_SUFFIXES = ("", "_total", "_created", "_sum", "_count", "_bucket")
_CREATED = frozenset(
    f"{family}_created"
    for family, kind in {**ENGINE_FAMILIES, **SIGNAL_FAMILIES}.items()
    if kind != "gauge"
)


def _value(name: str, labels: str, values: EngineValues) -> float | None:
    """The value ``values`` gives a sample of one of the families read, else None."""
    table = {
        f"{PROMPT_TOKENS_FAMILY}_total": values.prompt_tokens,
        f"{GENERATION_TOKENS_FAMILY}_total": values.generation_tokens,
        f"{PROMPT_LENGTH_FAMILY}_sum": values.prompt_sum,
        f"{PROMPT_LENGTH_FAMILY}_count": values.prompt_count,
        f"{GENERATION_LENGTH_FAMILY}_sum": values.generation_sum,
        f"{GENERATION_LENGTH_FAMILY}_count": values.generation_count,
        "vllm:prefix_cache_queries_total": values.prefix_queries,
        "vllm:prefix_cache_hits_total": values.prefix_hits,
        "vllm:num_preemptions_total": values.preemptions,
        "vllm:prompt_tokens_cached_total": values.cached_prompt_tokens,
        "vllm:estimated_flops_per_gpu_total": values.flops,
        "vllm:kv_cache_usage_perc": values.kv_usage,
    }
    if name in table:
        return table[name]
    if name == "vllm:num_requests_waiting_by_reason":
        reason = re.search(r'reason="([^"]*)"', labels)
        return values.waiting.get(reason.group(1) if reason else "", 0)
    if name == "vllm:engine_sleep_state":
        state = re.search(r'sleep_state="([^"]*)"', labels)
        return {"awake": values.awake, "weights_offloaded": 1.0 - values.awake}.get(
            state.group(1) if state else "", 0.0
        )
    if name == f"{REQUEST_SUCCESS_FAMILY}_total":
        reason = re.search(r'finished_reason="([^"]*)"', labels)
        return values.finished.get(reason.group(1) if reason else "", 0)
    for family, count in (
        (PROMPT_LENGTH_FAMILY, values.prompt_count),
        (GENERATION_LENGTH_FAMILY, values.generation_count),
    ):
        if name == f"{family}_bucket":
            # Cumulative buckets: every request above the last finite bound keeps them valid.
            return count if 'le="+Inf"' in labels else 0
    return None


def render_exposition(
    engines: Mapping[str, EngineValues],
    drop: frozenset[str] = frozenset(),
    *,
    only_read: bool = False,
) -> str:
    """The fixture with its engine-"0" samples rewritten once per engine in ``engines``, and
    the families in ``drop`` removed entirely (with ``only_read``, every family the engine
    reader does not read too: parsing is then ~10x faster). Reasons a fixture engine does not
    list (a future finish reason) are added after its ``stop`` sample."""
    dropped = {f"{family}{suffix}" for family in drop for suffix in _SUFFIXES}
    read = {**ENGINE_FAMILIES, **SIGNAL_FAMILIES}
    kept = {f"{family}{suffix}" for family in read for suffix in _SUFFIXES} - dropped

    def keep(name: str) -> bool:
        return name in kept if only_read else name not in dropped

    out: list[str] = []
    for line in _FIXTURE_LINES:
        comment = _COMMENT.match(line)
        if comment:
            if keep(comment.group("name")):
                out.append(line)
            continue
        sample = _SAMPLE.match(line)
        if sample is None or not keep(sample.group("name")):
            continue
        name, labels = sample.group("name"), sample.group("labels") or ""
        if 'engine="0"' in labels and name in _CREATED:
            for engine, values in engines.items():
                stamp = sample.group("value") if values.created is None else repr(values.created)
                engine_labels = labels.replace('engine="0"', f'engine="{engine}"')
                out.append(f"{name}{{{engine_labels}}} {stamp}")
            continue
        if 'engine="0"' not in labels or _value(name, labels, EngineValues()) is None:
            out.append(line)
            continue
        for engine, values in engines.items():
            engine_labels = labels.replace('engine="0"', f'engine="{engine}"')
            out.append(f"{name}{{{engine_labels}}} {float(_value(name, labels, values) or 0)}")
            if 'finished_reason="stop"' in labels:
                for reason in sorted(set(values.finished) - set(FINISH_REASONS)):
                    extra = engine_labels.replace('"stop"', f'"{reason}"')
                    out.append(f"{name}{{{extra}}} {float(values.finished[reason])}")
    return "\n".join(out) + "\n"


# Two engines' totals before a step, and after it: engine 0 served 3 requests (2 stop,
# 1 length), engine 1 served 2 (1 stop, 1 abort).
BEFORE = {
    "0": EngineValues(100, 400, 100, 4, 400, 4, {"stop": 3, "length": 1}),
    "1": EngineValues(50, 90, 50, 2, 90, 2, {"stop": 1, "abort": 1}),
}
AFTER = {
    "0": EngineValues(160, 700, 160, 7, 700, 7, {"stop": 5, "length": 2}),
    "1": EngineValues(90, 150, 90, 4, 150, 4, {"stop": 2, "abort": 2}),
}
EXPECTED = {
    PROMPT_TOKENS_KEY: 100,  # (160-100) + (90-50)
    GENERATION_TOKENS_KEY: 360,  # (700-400) + (150-90)
    PROMPT_LENGTH_MEAN_KEY: 100 / 5,  # sum delta 100 over count delta 3 + 2
    GENERATION_LENGTH_MEAN_KEY: 360 / 5,
    GENERATIONS_OK_KEY: 4,  # stop 2 + length 1 + stop 1
    GENERATIONS_FAILED_KEY: 1,  # abort 1
}


# -- a real prometheus_client registry with vLLM's families ---------------------------------------


class VllmRegistry:
    """A ``CollectorRegistry`` holding vLLM's families, labelled and pre-created the way
    vLLM's ``PrometheusStatLogger`` does, driven by :meth:`finish` as requests complete."""

    def __init__(self, engines: tuple[str, ...] = ("0",), model: str = MODEL) -> None:
        self.registry = CollectorRegistry()
        self.engines = engines
        self.model = model
        self._collectors: list[Any] = []
        self._build()

    def _build(self) -> None:
        labels = ["model_name", "engine"]
        self.prompt_tokens = Counter(
            PROMPT_TOKENS_FAMILY,
            "Number of prefill tokens processed.",
            labels,
            registry=self.registry,
        )
        self.generation_tokens = Counter(
            GENERATION_TOKENS_FAMILY,
            "Number of generation tokens processed.",
            labels,
            registry=self.registry,
        )
        self.request_success = Counter(
            REQUEST_SUCCESS_FAMILY,
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=self.registry,
        )
        buckets = [1, 2, 5, 10, 20, 50, 100]
        self.prompt_length = Histogram(
            PROMPT_LENGTH_FAMILY,
            "Number of prefill tokens processed.",
            labels,
            buckets=buckets,
            registry=self.registry,
        )
        self.generation_length = Histogram(
            GENERATION_LENGTH_FAMILY,
            "Number of generation tokens processed.",
            labels,
            buckets=buckets,
            registry=self.registry,
        )
        self._collectors = [
            self.prompt_tokens,
            self.generation_tokens,
            self.request_success,
            self.prompt_length,
            self.generation_length,
        ]
        for engine in self.engines:  # vLLM binds every child up front
            for metric in self._collectors:
                if metric is self.request_success:
                    for reason in FINISH_REASONS:
                        metric.labels(self.model, engine, reason)
                else:
                    metric.labels(self.model, engine)

    def finish(self, engine: str, prompt: int, generated: int, reason: str = "stop") -> None:
        """One request completed on ``engine``."""
        self.prompt_tokens.labels(self.model, engine).inc(prompt)
        self.generation_tokens.labels(self.model, engine).inc(generated)
        self.prompt_length.labels(self.model, engine).observe(prompt)
        self.generation_length.labels(self.model, engine).observe(generated)
        self.request_success.labels(self.model, engine, reason).inc()

    def restart(self) -> None:
        """The engine process restarted: every total starts again from zero."""
        for metric in self._collectors:
            self.registry.unregister(metric)
        self._build()


# -- a real HTTP server on 127.0.0.1 ------------------------------------------------------------


class TextServer(ExpositionServer):
    """A metrics endpoint on 127.0.0.1 answering with whatever ``text`` holds."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__(lambda: self.text)
