"""The demo's rollouts as multi-turn trajectories with tool calls: what an agentic GRPO
loop hands ``Logger.log_trajectories`` after each step, deterministic for a seed.

Each rollout of the step (8 prompts x 4 generations) becomes one trajectory of its group (the
prompt): one to three turns of a generation and a tool call (``python`` or ``search``; now
and then one times out), then the reward checks ``correct`` and ``format`` (0.5 each, so they
add up to its reward). Its outcome follows its reward — ``success`` at 1, ``failure`` below,
``truncated`` when the response hit the token limit — and one in forty ends in an ``error``
(the sandbox died). The response's tokens are split over its turns, so the trajectories'
tokens are the step's. Rollouts are async: most come from the previous step's weights, some
from one or two versions before, and their logprob mismatch against the trainer and importance
ratio spread with that lag.
"""

from __future__ import annotations

import math
from typing import Any

from .parts import DemoStep
from .simulation import GENERATIONS_PER_PROMPT

__all__ = ["demo_trajectories"]

_TOOLS = ("python", "search")
_ENVS = ("math", "code")


def demo_trajectories(demo: DemoStep) -> list[dict[str, Any]]:
    """The step's rollouts as trajectory records (``Logger.log_trajectories``)."""
    r = demo.random("trajectories")
    records = []
    for index, reward in enumerate(demo.rewards):
        group = index // GENERATIONS_PER_PROMPT
        response = demo.response_tokens[index]
        turns = r.choice((1, 2, 2, 3))
        errored = r.random() < 0.025
        outcome = (
            "error"
            if errored
            else "truncated"
            if response >= demo.max_tokens
            else "success"
            if reward == 1.0
            else "failure"
        )
        per_turn = max(1, response // turns)
        lag = r.choice((0, 0, 0, 1, 1, 2))
        version = max(0, demo.step - 1 - lag)
        turn_records = []
        for turn in range(turns):
            timed_out = r.random() < 0.04
            turn_records.append(
                {
                    "generations": [
                        {
                            "model": "demo/tiny-llama",
                            "input_tokens": demo.prompt_tokens[index] + turn * per_turn,
                            "output_tokens": per_turn,
                            "finish_reason": "tool_calls" if turn < turns - 1 else "stop",
                            "latency_s": round(per_turn / 900.0 + r.uniform(0.05, 0.2), 3),
                            "weight_version": version,
                        }
                    ],
                    "tool_calls": [
                        {
                            "name": _TOOLS[(index + turn) % 2],
                            "outcome": "timeout" if timed_out else "success",
                            "error": "TimeoutError" if timed_out else None,
                            "latency_s": round(r.uniform(0.05, 0.6) + 2.0 * timed_out, 3),
                        }
                    ],
                }
            )
        records.append(
            {
                "sample_id": f"{demo.step}-{index}",
                "group_id": f"{demo.step}-p{group}",
                "env": _ENVS[group % 2],
                "agent": "demo-solver",
                "outcome": outcome,
                "finish_reason": "length" if outcome == "truncated" else "stop",
                "weight_version": version,
                "trainer_weight_version": demo.step - 1,
                "logprob_mismatch": round(0.004 + 0.01 * lag + r.uniform(0.0, 0.004), 5),
                "importance_ratio": round(math.exp(r.gauss(0.0, 0.03 + 0.02 * lag)), 4),
                "error": "SandboxCrashed" if errored else None,
                "turns": turn_records,
                # Half for the right answer, half for its format: a right answer with a format
                # slip is 0.5, a wrong one 0 (as the samples table tells them).
                "rewards": [
                    {
                        "value": 0.5 if reward > 0.0 else 0.0,
                        "component": "correct",
                        "latency_s": 0.05,
                    },
                    {
                        "value": 0.5 if reward == 1.0 else 0.0,
                        "component": "format",
                        "latency_s": 0.01,
                    },
                ],
                "reward": reward,
            }
        )
    return records
