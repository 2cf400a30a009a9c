"""rlmetrics.Logger as a drop-in for NeMo-RL's Logger: the calls NeMo-RL's GRPO makes, in its
order, with its keys and arguments, read back from the JSONL file and the in-memory reader."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.testing import in_memory_telemetry, points, single

#: NeMo-RL's LoggerInterface calls an algorithm makes, as it makes them.
NEMO_CALLS = {
    "log_metrics": {
        "args": ({"reward": 1.0}, 3),
        "kwargs": {"prefix": "train", "step_metric": None, "step_finished": False},
    },
    "log_hyperparams": {"args": ({"grpo": {"num_steps": 2}},), "kwargs": {}},
    "finish": {"args": (), "kwargs": {}},
}


def test_the_logger_takes_every_argument_nemo_rl_passes() -> None:
    for name, call in NEMO_CALLS.items():
        method = getattr(rlmetrics.Logger, name)
        inspect.signature(method).bind(None, *call["args"], **call["kwargs"])


def test_a_nemo_rl_grpo_run_logs_through_the_logger_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    config = {"grpo": {"num_prompts_per_step": 4, "max_num_steps": 2}, "policy": {"lr": 1e-6}}
    with in_memory_telemetry() as (_handle, reader):
        logger: Any = rlmetrics.Logger(backends={"jsonl": {"path": path}})
        logger.log_hyperparams(config)
        logger.log_metrics(
            {"policy_init_time_s": 12.5, "total_setup_time_s": 44.0}, step=0, prefix="timing/setup"
        )
        for step in (1, 2):
            logger.log_metrics(
                {
                    "reward": 0.5 * step,
                    "kl_penalty": 0.01 * step,
                    "loss": 1.0 / step,
                    "mean_gen_tokens_per_sample": 100.0 + step,
                },
                step,
                prefix="train",
            )
            logger.log_metrics(
                {"efficiency/idle/refit_bubble_s": 1.0, "efficiency/step_wall_time_s": 10.0},
                step,
                prefix="",
                step_finished=False,
            )
            logger.log_metrics(
                {"total_step_time": 10.0, "generation": 6.0}, step, prefix="timing/train"
            )
            # The GPU monitor: its own axis, named by step_metric.
            logger.log_metrics(
                {"ray/ray_step": 30 * step, "node.0.gpu.0.util": 0.5},
                step,
                prefix="ray",
                step_metric="ray/ray_step",
                step_finished=True,
            )
        found = points(reader)
        logger.finish()
    values = {p.name: p.value for p in found if not p.attributes}
    assert values["rl.reward.mean"] == 1.0 and values["rl.kl.divergence"] == 0.02
    assert values["rl.policy.loss"] == 0.5 and values["rl.response.length.mean"] == 102.0
    assert single(found, "rl.setup.duration", **{"rl.setup.phase": "policy_init"}).value == 12.5
    refit = {"rl.efficiency.category": "idle/refit_bubble"}
    assert single(found, "rl.efficiency.seconds", **refit).value == 1.0
    assert single(found, "rl.efficiency.pct", **{"rl.efficiency.window": "step"}).value == 90.0
    rows = list(read_jsonl(path))
    assert [(r["prefix"], r["step"]) for r in rows] == [
        ("timing/setup", 0),
        *[(p, s) for s in (1, 2) for p in ("train", "", "timing/train", "ray")],
    ]
    assert rows[-1]["metrics"] == {"ray/ray_step": 60, "node.0.gpu.0.util": 0.5}
    (header,) = [row for row in read_jsonl(path, every_row=True) if "hyperparams" in row]
    assert header["hyperparams"]["grpo"]["max_num_steps"] == 2


#: What NeMo-RL's GRPO logs besides its teed scalars, by prefix (nemo_rl/algorithms/grpo.py,
#: loss_functions.py, utils.py's print_performance_metrics): its own keys, not typos.
NEMO_GRPO_KEYS = {
    "train": [
        "filtered_reward",
        "mean_prompt_length",
        "total_num_tokens",
        "advantages/mean",
        "advantages/max",
        "advantages/min",
        "probs_ratio",
        "probs_ratio_clamped",
        "probs_ratio_min",
        "probs_ratio_clamped_max",
        "token_mult_prob_error",
        "gen_kl_error",
        "policy_kl_error",
        "js_divergence_error",
        "sampling_importance_ratio",
        "num_valid_samples",
        "positive_nll_loss",
        "wd",
        "global_valid_seqs",
        "global_valid_toks",
        "mean_total_tokens_per_sample",
        "max_gen_tokens_per_sample",
        "mean_env_tokens_per_sample",
        "total_turns",
        "avg_turns_per_sample",
        "natural_termination_rate",
        "truncation_rate",
        "max_turns_reached_rate",
        "critic/grad_norm",
        "critic/explained_var",
    ],
    "timing/train": [
        "total_step_time",
        "generation",
        "exposed_generation",
        "policy_and_reference_logprobs",
        "policy_training",
        "weight_sync",
        "prepare_for_generation/total",
        "valid_tokens_per_sec_per_gpu",
    ],
    "timing/validation": ["total_validation_time"],
    "performance": ["samples_per_sec", "tokens_per_sec", "tokens_per_sec_per_gpu"],
}


def test_no_key_nemo_rl_s_grpo_logs_is_said_to_be_a_typo(tmp_path: Path) -> None:
    from rlmetrics.known_keys import Vocabulary

    vocabulary = Vocabulary()
    unknown = [
        (prefix, key)
        for prefix, keys in NEMO_GRPO_KEYS.items()
        for key in keys
        if not vocabulary.known(prefix, key)
    ]
    assert unknown == []
    logger: Any = rlmetrics.Logger(
        backends={"jsonl": {"path": tmp_path / "m.jsonl"}}, unknown_keys="error", strict=True
    )
    with logger:
        for prefix, keys in NEMO_GRPO_KEYS.items():
            logger.log_metrics(dict.fromkeys(keys, 1.0), 1, prefix=prefix)
