"""A tiny causal LM, its tokenizer and toy data, built in the test: nothing is downloaded.

A 2-layer, 32-wide Llama initialised at random from a config, a ``tokenizers`` WordLevel
tokenizer wrapped in ``PreTrainedTokenizerFast``, and plain-string prompts. Also used by
``benchmarks/bench_trl_callback.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: Nothing leaves the machine: set before transformers (and the hub client) is imported.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_MODE": "disabled",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
for _name, _value in OFFLINE_ENV.items():
    os.environ.setdefault(_name, _value)

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

__all__ = [
    "OFFLINE_ENV",
    "WORDS",
    "length_reward",
    "lm_dataset",
    "prompt_dataset",
    "save_tiny_model",
    "tiny_model",
    "tiny_tokenizer",
    "trainer_args",
]

WORDS = [f"w{i}" for i in range(60)]
_SPECIAL = ["<pad>", "<s>", "</s>", "<unk>"]


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {word: i for i, word in enumerate(_SPECIAL + WORDS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
    )


def tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(_SPECIAL) + len(WORDS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return LlamaForCausalLM(config)


def save_tiny_model(folder: Path, seed: int = 0) -> str:
    """The tiny model and its tokenizer saved to ``folder`` (TRL rebuilds a reference model
    from a path when ``beta > 0``); the path to pass as ``model=``."""
    tiny_model(seed).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return str(folder)


def trainer_args(folder: Path, **overrides: Any) -> dict[str, Any]:
    """A few logged steps on CPU, saving and reporting nothing: ``TrainingArguments``' (and
    ``GRPOConfig``'s) keywords, ``overrides`` on top."""
    return {
        "output_dir": str(folder / "out"),
        "per_device_train_batch_size": 2,
        "max_steps": 3,
        "logging_steps": 1,
        "report_to": "none",
        "use_cpu": True,
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": 0,
        **overrides,
    }


def prompt_dataset(count: int = 8) -> Dataset:
    return Dataset.from_dict({"prompt": [f"w{i} w{i + 1} w{i + 2}" for i in range(count)]})


def lm_dataset(count: int = 8, length: int = 8) -> list[dict[str, Any]]:
    """Fixed-length token rows with labels, for a plain causal-LM ``Trainer``."""
    rows = []
    for i in range(count):
        ids = [4 + (i + j) % len(WORDS) for j in range(length)]
        rows.append({"input_ids": ids, "attention_mask": [1] * length, "labels": ids})
    return rows


def length_reward(completions: list[str], **_kwargs: Any) -> list[float]:
    """A toy reward: the number of words in a completion."""
    return [float(len(completion.split())) for completion in completions]
