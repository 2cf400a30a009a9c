"""The core's key maps: TRL, verl and OpenRLHF, each as the trainer logs its keys.

An entry point of the ``rlmetrics`` distribution (``builtin_key_maps``), offered through
``register_key_maps`` like any plugin's map. Each map lists the keys its trainer logs every
step: those that are a declared series or an efficiency category, and, as "backends only",
those that are not (so a key the trainer shares with NeMo-RL, such as OpenRLHF's ``reward``,
never reaches the tee under NeMo-RL's meaning). Keys a map does not list reach the tee as
they are.

Timing keys become efficiency categories only where the category means the same thing: the
weight sync after training is the refit bubble (the generation fleet idles through it), and a
trainer's whole-step timer is the step's wall time. A trainer that times no idle category
(TRL) gets no efficiency summary: its ``rl.efficiency.pct`` would claim a step without idle
time that nobody measured.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import hookimpl
from . import STEP_WALL_TIME, KeyMap, KeyRule

__all__ = ["OPENRLHF", "TRL", "VERL", "register_key_maps"]

_REWARD, _KL, _LOSS = "rl.reward.mean", "rl.kl.divergence", "rl.policy.loss"
_VALUE_LOSS, _ENTROPY = "rl.value.loss", "rl.entropy"
_LENGTH, _GRAD_NORM, _LR = "rl.response.length.mean", "rl.grad_norm", "rl.learning_rate"
_REFIT = "idle/refit_bubble"


def _backends(*keys: str, note: str = "") -> list[KeyRule]:
    return [KeyRule(key, note=note) for key in keys]


TRL = KeyMap(
    "trl",
    [
        KeyRule(
            "loss",
            series=_LOSS,
            note="RewardTrainer's (beside its margin) is a reward model's: the backends only",
            backends_beside=("margin", "mean_reward"),
        ),
        KeyRule("reward", series=_REWARD, note="mean over the reward functions' weighted sum"),
        KeyRule("kl", series=_KL, note="logged only when beta > 0"),
        KeyRule("entropy", series=_ENTROPY),
        KeyRule("completions/mean_length", series=_LENGTH),
        KeyRule("grad_norm", series=_GRAD_NORM),
        KeyRule("learning_rate", series=_LR),
        KeyRule(
            "rewards/*/mean",
            series="rl.reward.component_mean",
            attribute="rl.reward.component",
            note="one reward function's mean; the function's name is the component",
        ),
        KeyRule("rewards/*/std", note="one reward function's spread"),
        *_backends("reward_std", "frac_reward_zero_std", "num_tokens"),
        *_backends(
            "completions/min_length",
            "completions/max_length",
            "completions/clipped_ratio",
            "completions/mean_terminated_length",
            "completions/min_terminated_length",
            "completions/max_terminated_length",
        ),
        KeyRule("clip_ratio/*", note="importance-ratio clipping (low, high, region)"),
        KeyRule("clip_ratio", note="use_liger_kernel: the Liger loss's one clipping ratio"),
        KeyRule("cispo_clip_ratio", note="loss_type='cispo': its clipping instead"),
        KeyRule("vespo/phi_seq_mean", note="loss_type='vespo'"),
        KeyRule(
            "policy_loss",
            note="with an entropy bonus: the loss before it (loss, which includes it, is mapped)",
        ),
        KeyRule("entropy_coef", note="with an entropy bonus"),
        KeyRule("aux_loss", note="a mixture-of-experts router's loss"),
        KeyRule(
            "sampling/sampling_logp_difference/*",
            note="with vLLM's importance-sampling correction: trainer vs vLLM log-probs",
        ),
        KeyRule(
            "sampling/importance_sampling_ratio/*",
            note="with vLLM's importance-sampling correction (min, mean, max)",
        ),
        *_backends("tools/call_frequency", "tools/failure_frequency", note="with tools"),
        KeyRule(
            "step_time",
            note="TRL times no idle category, so no efficiency summary is derived from it",
        ),
        KeyRule("rewards/*", note="DPO, KTO: implicit rewards (chosen, rejected, margins...)"),
        *_backends("logps/*", "logits/*", note="DPO, KTO: of the chosen and rejected completions"),
        KeyRule("mean_token_accuracy", note="SFT, DPO"),
        *_backends(
            "accuracy",
            "margin",
            "mean_reward",
            "min_reward",
            "max_reward",
            note="RewardTrainer: the reward model's scores, no policy's reward",
        ),
        *_backends("epoch"),
        *_backends(
            "num_input_tokens_seen",
            "train_tokens_per_second",
            note="with include_num_input_tokens_seen",
        ),
        *_backends(
            "train_runtime",
            "train_samples_per_second",
            "train_steps_per_second",
            "total_flos",
            "train_loss",
            note="the run's summary, logged once at the end",
        ),
    ],
    title="TRL (GRPO, RLOO, SFT, DPO, KTO, reward trainers; transformers.Trainer's own keys)",
)

VERL = KeyMap(
    "verl",
    [
        KeyRule("critic/rewards/mean", series=_REWARD, note="sequence reward, KL penalty included"),
        KeyRule("actor/kl_loss", series=_KL, note="with use_kl_loss: KL to the reference policy"),
        KeyRule("actor/pg_loss", series=_LOSS),
        KeyRule("critic/vf_loss", series=_VALUE_LOSS, note="PPO with a critic"),
        KeyRule("actor/entropy", series=_ENTROPY),
        KeyRule("response_length/mean", series=_LENGTH),
        KeyRule("actor/grad_norm", series=_GRAD_NORM),
        KeyRule("actor/lr", series=_LR),
        KeyRule("timing_s/step", category=STEP_WALL_TIME),
        KeyRule(
            "timing_s/update_weights",
            category=_REFIT,
            note="the weight sync to the rollout engines, inside the step",
        ),
        KeyRule(
            "timing_s/testing", note="validation runs after the step's timer, so not a category"
        ),
        KeyRule("timing_s/*", note="the other phases of the step"),
        KeyRule("timing_per_token_ms/*", note="a phase's time per token"),
        KeyRule("critic/score/mean", note="score before the KL penalty"),
        KeyRule("critic/score/*", note="its max and min"),
        KeyRule("critic/rewards/*", note="the sequence reward's max and min"),
        *(
            KeyRule(f"critic/{stat}/*", note="mean, max and min")
            for stat in ("advantages", "returns", "values")
        ),
        *_backends("critic/vf_explained_var", "critic/vf_clipfrac", "critic/vpred_mean"),
        *_backends("critic/grad_norm", "critic/lr", note="the critic's own optimizer"),
        KeyRule("actor/reward_kl_penalty", note="with use_kl_in_reward; actor/kl_loss is mapped"),
        KeyRule("actor/kl_coef", note="the coefficient of actor/kl_loss"),
        KeyRule("actor/ppo_kl", note="KL to the rollout policy, not the reference"),
        *_backends("actor/pg_clipfrac", "actor/pg_clipfrac_lower"),
        KeyRule("response_length/*", note="max, min and clip_ratio (the mean is mapped)"),
        KeyRule("response_length_non_aborted/*", note="the same without the aborted samples"),
        *_backends("response/aborted_ratio"),
        KeyRule("prompt_length/*", note="mean, max, min and clip_ratio"),
        KeyRule("num_turns/*", note="multi-turn rollouts: turns per sample, mean, max and min"),
        KeyRule("tool_call_counts/*", note="tool calls per sample, mean, max and min"),
        KeyRule("variance_proxy/*", note="the gradient-variance proxies"),
        KeyRule(
            "training/rollout_probs_diff_*",
            note="calculate_log_probs: rollout vs actor token probabilities",
        ),
        *_backends("training/rollout_actor_probs_pearson_corr"),
        KeyRule("rollout_corr/*", note="rollout correction: importance weights, KL, PPL"),
        KeyRule("global_seqlen/*", note="the sequence-length balance across data-parallel ranks"),
        *_backends("training/global_step", "training/epoch"),
        KeyRule(
            "val-core/**",
            note="validation: data source, variable, metric@n (a data source may hold a /)",
        ),
        KeyRule("val-aux/**", note="validation's other statistics"),
        KeyRule("perf/mfu/*", note="model FLOPs utilisation per role"),
        *_backends("perf/throughput", "perf/time_per_step", "perf/total_num_tokens"),
        *_backends(
            "perf/max_memory_allocated_gb",
            "perf/max_memory_reserved_gb",
            "perf/cpu_memory_used_gb",
            note="a worker's device and host memory",
        ),
    ],
    title="verl (ray_trainer.RayPPOTrainer)",
)

OPENRLHF = KeyMap(
    "openrlhf",
    [
        KeyRule("rollout/reward_mean", series=_REWARD, note="over the whole rollout batch"),
        KeyRule("kl", series=_KL, note="with init_kl_coef > 0"),
        KeyRule("policy_loss", series=_LOSS),
        KeyRule("critic_loss", series=_VALUE_LOSS, note="PPO with a critic"),
        KeyRule("entropy_loss", series=_ENTROPY, note="the mean token entropy (entropy_coef set)"),
        KeyRule("rollout/response_length_mean", series=_LENGTH),
        KeyRule("actor_grad_norm", series=_GRAD_NORM),
        KeyRule("actor_lr", series=_LR),
        KeyRule("timing/step_total", category=STEP_WALL_TIME),
        KeyRule(
            "timing/broadcast", category=_REFIT, note="the weight broadcast to the vLLM engines"
        ),
        KeyRule("timing/*", note="the other phases of the step"),
        KeyRule("reward", note="the training micro-batches' mean; rollout/reward_mean is mapped"),
        KeyRule("response_length", note="the training micro-batches' mean"),
        *_backends("return", "rollout/reward_std", "rollout/truncated_rate", "rollout/num_samples"),
        KeyRule("total_length", note="prompt and response tokens, micro-batches' mean"),
        KeyRule("ppo_clip_ratio", note="the share of tokens the PPO ratio was clipped on"),
        KeyRule("ppo_kl", note="KL to the rollout policy, not the reference"),
        KeyRule("vllm_kl", note="with vLLM's importance-sampling correction"),
        KeyRule("values", note="PPO with a critic: the critic's mean value"),
        *_backends("critic_lr", "critic_grad_norm", note="the critic's own optimizer"),
        KeyRule("score", note="the reward function's score (before any penalty)"),
        KeyRule("logprobs_diff", note="policy vs reference log-probs, the KL estimate's input"),
        KeyRule("group_reward_std", note="the reward's spread within a prompt's group"),
        KeyRule("dynamic_filtering_pass_rate", note="with dynamic filtering"),
        KeyRule("truncated", note="the share of samples cut at the generation limit"),
    ],
    title="OpenRLHF (PPOTrainer status)",
)


@hookimpl
def register_key_maps(register: Callable[[KeyMap], None]) -> None:
    for key_map in (TRL, VERL, OPENRLHF):
        register(key_map)
