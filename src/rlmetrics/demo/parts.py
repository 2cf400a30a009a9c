"""Parts of the demo run that belong to a family, offered through ``register_demo_parts``.

The core simulates what a training loop logs (reward, KL, loss, efficiency, setup timings,
rollout checkpoints); whatever else a family records — vLLM engine deltas, gen_ai token usage,
host memory, Gym rollouts — comes from that family's own part, so the demo grows with the
installed distributions and the core names none of them.

A part is built before telemetry starts (``factory(settings)``), so it can configure its
family first; then ``step(step)`` runs once per simulated step, after the step's rollouts were
generated and before its train dict is logged, and may return keys to merge into that dict;
``close()`` runs at the end. Everything a part needs to stay consistent with the run (the
step's per-request token counts and rewards) is in :class:`DemoStep`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import attrs

__all__ = ["DemoPart", "DemoPartFactory", "DemoSettings", "DemoStep", "seeded"]


def seeded(seed: int, *names: object) -> random.Random:
    """A generator determined by ``seed`` and ``names`` alone (string seeds hash with SHA-512
    in :mod:`random`, so this holds across processes and interpreter runs)."""
    return random.Random(":".join(str(part) for part in (seed, *names)))


@attrs.frozen
class DemoSettings:
    """What a part is built with.

    :param seed: the run's seed; derive every random draw from it (:func:`seeded`).
    :param steps: how many steps the run has.
    :param output: the run's output folder (a part may write files there).
    """

    seed: int
    steps: int
    output: Path


@attrs.frozen
class DemoStep:
    """One simulated step, as the parts see it.

    :param step: the trainer step (1-based).
    :param steps: the run's length.
    :param seed: the run's seed.
    :param prompt_tokens: the prompt length of each request generated in the step.
    :param response_tokens: the response length of each request, in the same order.
    :param max_tokens: the generation limit (a response this long finished by ``length``).
    :param rewards: the reward of each rollout (one per request).
    :param generation_s: simulated wall clock of the step's ``generate()`` batch.
    """

    step: int
    steps: int
    seed: int
    prompt_tokens: tuple[int, ...]
    response_tokens: tuple[int, ...]
    max_tokens: int
    rewards: tuple[float, ...]
    generation_s: float

    def random(self, *names: object) -> random.Random:
        """A generator for this step and ``names`` (a part's name), deterministic for the seed."""
        return seeded(self.seed, "step", self.step, *names)


class DemoPart(Protocol):
    """What a factory returns."""

    def step(self, step: DemoStep) -> Mapping[str, Any] | None:
        """Record the family's view of ``step``; return keys to merge into its train dict."""

    def close(self) -> None:
        """Release what the part holds (servers, threads, configuration)."""


#: ``register("name", factory)``: the demo calls ``factory(settings)`` before telemetry starts.
DemoPartFactory = Callable[[DemoSettings], DemoPart]
