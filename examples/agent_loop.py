"""A small async agent loop whose rollouts are trajectories: spans, table rows and metrics.

    python examples/agent_loop.py     # then look at agent-loop-run/

Each step runs a group of rollouts concurrently. A rollout asks a (simulated) policy for a
tool call, runs the tool, feeds the result back, and is scored when the policy answers. Every
rollout is ``async with rlmetrics.trajectory(...)``: its turns, generations, tool calls and
rewards become spans (written to agent-loop-run/traces.otlp.jsonl), one row of the
``trajectories`` table (agent-loop-run/metrics.samples.jsonl) and the ``rl.trajectory.*``
metrics. Prompts and completions stay in the process (the text policy is ``off``).
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import rlmetrics

OUT = Path("agent-loop-run")
STEPS = 3
GROUP = 4
MAX_TURNS = 4


async def policy(prompt: str, rng: random.Random) -> tuple[str, int, int, float]:
    """The policy's reply: a tool call or an answer, its tokens and how long it took."""
    started = time.perf_counter()
    await asyncio.sleep(rng.uniform(0.001, 0.005))  # the inference server
    reply = "call:calculator" if rng.random() < 0.6 else "answer:42"
    return reply, len(prompt.split()) * 3, rng.randint(8, 64), time.perf_counter() - started


async def calculator(rng: random.Random) -> str:
    await asyncio.sleep(rng.uniform(0.001, 0.003))
    if rng.random() < 0.1:
        raise TimeoutError("the sandbox did not answer")
    return "42"


async def rollout(step: int, index: int, logger: rlmetrics.Logger) -> float:
    rng = random.Random(step * 100 + index)
    async with rlmetrics.trajectory(
        f"{step}-{index}",
        group=f"{step}-q0",
        env="arithmetic",
        agent="calc-agent",
        step=step,
        weight_version=step - 1,
        logger=logger,
    ) as t:
        prompt = "What is six times seven?"
        for _ in range(MAX_TURNS):
            async with t.turn():
                reply, given, taken, seconds = await policy(prompt, rng)
                t.generation(
                    "calc-policy",
                    input_tokens=given,
                    output_tokens=taken,
                    latency_s=seconds,
                    finish_reason="tool_calls" if reply.startswith("call:") else "stop",
                    weight_version=step - 1,
                    prompt=prompt,
                    completion=reply,
                )
                if not reply.startswith("call:"):
                    break
                started = time.perf_counter()
                try:
                    result = await calculator(rng)
                except TimeoutError as error:
                    t.tool_call(
                        "calculator",
                        outcome="timeout",
                        error=type(error).__name__,
                        latency_s=time.perf_counter() - started,
                    )
                    result = "no answer"
                else:
                    t.tool_call("calculator", latency_s=time.perf_counter() - started)
                prompt += f" [calculator: {result}]"
        else:
            t.finish("truncated", finish_reason="max_turns")
        reward = 1.0 if reply == "answer:42" else 0.0
        t.reward(reward, component="correct")
        if t.outcome is None:
            t.finish("success" if reward else "failure", finish_reason="stop")
    return reward


async def main() -> None:
    telemetry = rlmetrics.start(
        service_name="agent-loop",
        exporters={"otlp_file": {"path": str(OUT / "traces.otlp.jsonl")}},
    )
    logger = rlmetrics.Logger(backends={"jsonl": {"path": str(OUT / "metrics.jsonl")}})
    with telemetry, logger, rlmetrics.run():
        for step in range(1, STEPS + 1):
            with rlmetrics.step(step, logger=logger):
                rewards = await asyncio.gather(*(rollout(step, i, logger) for i in range(GROUP)))
                logger.log_metrics(
                    {"reward": sum(rewards) / len(rewards)}, step=step, prefix="train"
                )
    print(
        f"{STEPS * GROUP} trajectories: spans in {OUT / 'traces.otlp.jsonl'}, rows in "
        f"{OUT / 'metrics.samples.jsonl'}"
    )


if __name__ == "__main__":
    asyncio.run(main())
