"""A trainer's whole configuration logged: every key arrives, and only the real secrets are
"<redacted>" (a hub token), never a tokenizer's special tokens (TRL's SFTConfig ``pad_token``,
``eos_token``) nor a model config's ``*_token_id``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from transformers import TrainingArguments
from transformers_support import tiny_model, tiny_tokenizer

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.redaction import REDACTED

trl = pytest.importorskip("trl")


def _logged(path: Path, config: Any, redact: bool) -> dict[str, Any]:
    logger = rlmetrics.Logger(backends={"jsonl": {"path": path}}, redact=redact)
    logger.log_hyperparams(config)
    logger.finish()
    (row,) = [r for r in read_jsonl(path, every_row=True) if r.get("kind") == "hyperparams"]
    return row["hyperparams"]  # type: ignore[no-any-return]


def _args(tmp_path: Path) -> dict[str, Any]:
    return {
        "output_dir": str(tmp_path / "out"),
        "report_to": "none",
        "use_cpu": True,
        "hub_token": "hf_not_a_real_token",
    }


@pytest.mark.parametrize(
    "make",
    [
        lambda kw: TrainingArguments(**kw),
        lambda kw: trl.GRPOConfig(**kw, num_generations=2),
        lambda kw: trl.SFTConfig(**kw, pad_token="<|pad|>", eos_token="</s>"),
    ],
    ids=["TrainingArguments", "GRPOConfig", "SFTConfig"],
)
def test_a_full_trainer_config_loses_no_key_but_its_secrets(make: Any, tmp_path: Path) -> None:
    args = make(_args(tmp_path))
    redacted = _logged(tmp_path / "on.jsonl", args, redact=True)
    given = _logged(tmp_path / "off.jsonl", args, redact=False)
    assert set(redacted) == {f.name for f in dataclasses.fields(args)} == set(given)
    assert given["hub_token"] == "hf_not_a_real_token"
    assert {k for k in given if redacted[k] != given[k]} == {"hub_token"}
    assert redacted["hub_token"] == REDACTED
    assert redacted.get("pad_token", "<|pad|>") == "<|pad|>"


def test_model_and_tokenizer_configs_have_no_secret_under_the_rule(tmp_path: Path) -> None:
    tokenizer = tiny_tokenizer()
    tokenizer.pad_token = tokenizer.eos_token
    config = {
        "model": tiny_model().config.to_dict(),
        "tokenizer": {**tokenizer.init_kwargs, **tokenizer.special_tokens_map},
    }
    redacted = _logged(tmp_path / "on.jsonl", config, redact=True)
    assert redacted == _logged(tmp_path / "off.jsonl", config, redact=False)
    assert "pad_token" in redacted["tokenizer"] and "pad_token_id" in redacted["model"]
