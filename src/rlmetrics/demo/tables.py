"""The demo run's configuration and sample rows: what ``Logger.log_hyperparams`` and
``Logger.log_samples`` get in a GRPO loop, deterministic for a seed.

The prompts are arithmetic questions; a completion is right when its rollout's reward is 1, off
by a little when 0.5 (a format slip), wrong when 0, so a reader can check a table against the
rewards curve.
"""

from __future__ import annotations

from typing import Any

from .parts import DemoStep

__all__ = ["SAMPLES_EVERY", "SAMPLE_ROWS", "demo_hyperparams", "demo_samples"]

#: The demo logs a table every this many steps, of this many rows.
SAMPLES_EVERY = 5
SAMPLE_ROWS = 4


def demo_hyperparams(seed: int, steps: int, max_tokens: int) -> dict[str, Any]:
    """The simulated run's configuration, nested the way a Hydra config is."""
    return {
        "seed": seed,
        "algorithm": {"name": "grpo", "num_generations": 4, "kl_beta": 0.04},
        "policy": {"model": "demo/tiny-llama", "precision": "bf16", "max_new_tokens": max_tokens},
        "optimizer": {"name": "adamw", "lr": 1e-6, "warmup_steps": max(1, steps // 10)},
        "trainer": {"steps": steps, "prompts_per_step": 8, "async": True},
    }


def demo_samples(demo: DemoStep) -> list[dict[str, Any]]:
    """The first :data:`SAMPLE_ROWS` rollouts of the step as sample rows."""
    r = demo.random("samples")
    rows = []
    for index in range(min(SAMPLE_ROWS, len(demo.rewards))):
        a, b = r.randint(10, 99), r.randint(10, 99)
        reward = demo.rewards[index]
        answer = a + b if reward == 1.0 else a + b + r.choice((-10, -1, 1, 10))
        shown = f"The answer is {answer}." if reward != 0.5 else f"{answer}"
        rows.append(
            {
                "prompt": f"What is {a} + {b}?",
                "completion": f"{a} + {b}: {shown}" if reward != 0.5 else shown,
                "reward": reward,
                "response_tokens": demo.response_tokens[index],
            }
        )
    return rows
