"""The realistic GRPO step dict the benchmarks log: 60 keys, as an async GRPO loop logs them.

Training scalars (7 teed by the training family), ``timing/*``, ``efficiency/*`` with the
step- and run-window categories, the aggregates and ``efficiency_pct_is_per_step`` (9 teed by
the efficiency family), and the other scalars a loop logs that no family tees.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GRPO_STEP", "TEED_SERIES"]

GRPO_STEP: dict[str, Any] = {
    # training scalars: rl.reward.mean, rl.policy.loss, rl.kl.divergence, rl.grad_norm,
    # rl.learning_rate, rl.entropy, rl.value.loss
    "reward": 0.52,
    "loss": 0.081,
    "kl_penalty": 0.0123,
    "grad_norm": 1.37,
    "lr": 1e-6,
    "approx_entropy": 2.31,
    "critic/loss": 0.044,
    # async efficiency: 8 categories (3 step-window), the pct and its window flag, aggregates
    "efficiency/init/total_s": 312.0,
    "efficiency/idle/buffer_starvation_s": 1.2,
    "efficiency/idle/refit_bubble_s": 3.4,
    "efficiency/idle/validation_s": 0.0,
    "efficiency/idle/refit_event_wait_s": 41.0,
    "efficiency/idle/generation_limit_pause_s": 12.5,
    "efficiency/idle/buffer_full_backoff_s": 88.0,
    "efficiency/wasted/failed_trajectory_s": 7.5,
    "efficiency/efficiency_pct": 91.2,
    "efficiency/efficiency_pct_is_per_step": 1.0,
    "efficiency/step_wall_time_s": 52.3,
    "efficiency/total_waste_s": 4.6,
    "efficiency/productive_time_s": 47.7,
    "efficiency/total_wall_time_s": 5123.0,
    # timings
    **{
        f"timing/{phase}": value
        for phase, value in (
            ("generation", 31.2),
            ("policy_training", 14.8),
            ("refit", 3.4),
            ("logprob_inference", 2.9),
            ("data_processing", 0.4),
            ("total_step_time", 52.3),
        )
    },
    # the rest of a GRPO step: advantages, ratios, lengths, counts
    **{f"advantages/{s}": v for s, v in (("mean", 0.0), ("max", 2.1), ("min", -1.9))},
    **{f"probs_ratio{s}": 1.0 for s in ("", "_clamped", "_min", "_max")},
    "mean_prompt_length": 412.0,
    "total_num_tokens": 1_048_576,
    "num_valid_samples": 512,
    "token_mult_prob_error": 0.0021,
    "gen_kl_error": 0.0007,
    "policy_kl_error": 0.0011,
    "baseline_reward/pct_0": 0.12,
    "baseline_reward/pct_100": 0.31,
    "baseline_reward/pct_mixed": 0.57,
    **{f"extra/metric_{i}": float(i) * 0.1 for i in range(17)},
}

#: The keys of GRPO_STEP the training family tees, and the gauge each is exported as: what a
#: baseline writes by hand.
TRAINING_SERIES = {
    "reward": "rl.reward.mean",
    "loss": "rl.policy.loss",
    "kl_penalty": "rl.kl.divergence",
    "grad_norm": "rl.grad_norm",
    "lr": "rl.learning_rate",
    "approx_entropy": "rl.entropy",
    "critic/loss": "rl.value.loss",
}

#: The series the built-in families export from GRPO_STEP: 7 training gauges, 8 efficiency
#: categories, the efficiency pct, and the step number and its time (liveness).
TEED_SERIES = 18

assert len(GRPO_STEP) == 60, len(GRPO_STEP)
