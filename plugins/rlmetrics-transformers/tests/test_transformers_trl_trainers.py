"""TRL's other trainers a user runs with the callback (SFT, DPO) and ``Trainer``'s own optional
keys, on CPU with the tiny model: every key they log is one the ``trl`` map knows, so a run with
``unknown_keys="error"`` in strict mode (as docs/concepts.md offers, "``Logger(key_map="trl")``
knows all of TRL's keys") goes through and its rows hold every key."""

from __future__ import annotations

from pathlib import Path

import pytest
from datasets import Dataset
from rlmetrics_transformers import RLMetricsCallback
from transformers import Trainer, TrainingArguments
from transformers_support import (
    lm_dataset,
    save_tiny_model,
    tiny_model,
    tiny_tokenizer,
    trainer_args,
)
from trl import DPOConfig, DPOTrainer, RewardConfig, RewardTrainer, SFTConfig, SFTTrainer

from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.keymaps import resolve_key_map
from rlmetrics.known_keys import Vocabulary
from rlmetrics.testing import in_memory_telemetry, points


@pytest.fixture
def typos_stop_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMETRICS_STRICT", "1")
    monkeypatch.setenv("RLMETRICS_UNKNOWN_KEYS", "error")


def _logged_keys(path: Path) -> set[str]:
    return {key for row in read_jsonl(path) if row["prefix"] == "train" for key in row["metrics"]}


def _unknown(keys: set[str]) -> list[str]:
    vocabulary = Vocabulary(resolve_key_map("trl"))
    return sorted(key for key in keys if not vocabulary.known("train", key))


def test_an_sft_run_logs_only_keys_the_trl_map_knows(
    tmp_path: Path, typos_stop_the_run: None
) -> None:
    """Before: ``mean_token_accuracy`` was unknown, so the first logged step raised
    StrictModeError out of ``train()``."""
    path = tmp_path / "metrics.jsonl"
    texts = Dataset.from_dict({"text": [f"w{i} w{i + 1} w{i + 2} w{i + 3}" for i in range(8)]})
    trainer = SFTTrainer(
        model=save_tiny_model(tmp_path / "model"),
        args=SFTConfig(**trainer_args(tmp_path, max_steps=2, max_length=16)),
        train_dataset=texts,
        processing_class=tiny_tokenizer(),
        callbacks=[RLMetricsCallback(backends={"jsonl": {"path": path}})],
    )
    trainer.train()
    assert trainer.state.global_step == 2
    logged = _logged_keys(path)
    assert {"loss", "mean_token_accuracy", "num_tokens", "entropy"} <= logged
    assert _unknown(logged) == []


def test_a_dpo_run_logs_only_keys_the_trl_map_knows(
    tmp_path: Path, typos_stop_the_run: None
) -> None:
    """Before: DPO's ``rewards/chosen``, ``rewards/margins``, ``logps/*``, ``logits/*`` and
    ``mean_token_accuracy`` were unknown (said as typos of ``reward/...``), so the first
    logged step raised StrictModeError out of ``train()``."""
    path = tmp_path / "metrics.jsonl"
    pairs = Dataset.from_dict(
        {
            "prompt": [f"w{i} w{i + 1}" for i in range(8)],
            "chosen": [f" w{i + 2}" for i in range(8)],
            "rejected": [f" w{i + 5}" for i in range(8)],
        }
    )
    trainer = DPOTrainer(
        model=save_tiny_model(tmp_path / "model"),
        args=DPOConfig(**trainer_args(tmp_path, max_steps=2, max_length=16)),
        train_dataset=pairs,
        processing_class=tiny_tokenizer(),
        callbacks=[RLMetricsCallback(backends={"jsonl": {"path": path}})],
    )
    trainer.train()
    assert trainer.state.global_step == 2
    logged = _logged_keys(path)
    assert {"rewards/chosen", "rewards/margins", "logps/chosen", "logits/rejected"} <= logged
    assert _unknown(logged) == []


def test_a_trainer_counting_input_tokens_logs_only_keys_the_trl_map_knows(
    tmp_path: Path, typos_stop_the_run: None
) -> None:
    """``include_num_input_tokens_seen`` adds ``num_input_tokens_seen`` and
    ``train_tokens_per_second`` to each dict ``Trainer`` logs: before, unknown."""
    path = tmp_path / "metrics.jsonl"
    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(
            **trainer_args(tmp_path, max_steps=2, include_num_input_tokens_seen=True)
        ),
        train_dataset=lm_dataset(),
        callbacks=[RLMetricsCallback(backends={"jsonl": {"path": path}})],
    )
    trainer.train()
    assert trainer.state.global_step == 2
    logged = _logged_keys(path)
    assert {"num_input_tokens_seen", "train_tokens_per_second"} <= logged
    assert _unknown(logged) == []


#: What TRL 1.16's KTOTrainer and RewardTrainer log beyond the keys above (their _metrics).
_KTO_AND_REWARD_KEYS = ["accuracy", "margin", "max_reward", "mean_reward", "min_reward"]


def test_the_kto_and_reward_trainers_keys_are_known_too() -> None:
    assert _unknown(set(_KTO_AND_REWARD_KEYS)) == []


def test_a_reward_trainers_loss_is_kept_from_the_policy_loss(
    tmp_path: Path, typos_stop_the_run: None
) -> None:
    """A real RewardTrainer run: before, its ``loss`` (the reward model's pairwise loss) was
    exported as ``rl.policy.loss``; it reaches the backends only, its grad norm and learning
    rate are still their series, and every key it logs is known."""
    path = tmp_path / "metrics.jsonl"
    pairs = Dataset.from_dict(
        {
            "chosen": [f"w{i} w{i + 1} w{i + 2}" for i in range(8)],
            "rejected": [f"w{i} w{i + 5} w{i + 3}" for i in range(8)],
        }
    )
    with in_memory_telemetry() as (_handle, reader):
        trainer = RewardTrainer(
            model=save_tiny_model(tmp_path / "model"),
            args=RewardConfig(**trainer_args(tmp_path, max_steps=2, max_length=16)),
            train_dataset=pairs,
            processing_class=tiny_tokenizer(),
            callbacks=[RLMetricsCallback(backends={"jsonl": {"path": path}})],
        )
        trainer.train()
        exported = {p.name for p in points(reader)}
    assert trainer.state.global_step == 2
    logged = _logged_keys(path)
    assert {"loss", "margin", "accuracy", "mean_reward"} <= logged
    assert _unknown(logged) == []
    assert "rl.policy.loss" not in exported
    assert {"rl.grad_norm", "rl.learning_rate"} <= exported
