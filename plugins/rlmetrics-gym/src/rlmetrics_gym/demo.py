"""The Gym part of ``rlmetrics demo``: every rollout of a simulated step counted as NeMo Gym's
collection driver counts it.

Each of the step's rollouts is one attempt: most are scored (with the run's own reward, so the
reward-range counts follow the reward curve), a few fail in the agent (counted ``failed`` with
a failure class, kind and exception type) and a very few are omitted; a few scored results are
masked. Every attempt's duration goes to ``gym.rollout.duration_ms`` and every verification to
``gym.verify.*``, through this distribution's own recording functions.
"""

from __future__ import annotations

from collections.abc import Callable

import rlmetrics
from rlmetrics.demo.parts import DemoSettings, DemoStep

from .rollouts import record_rollout_completed, record_rollout_duration, record_verify

__all__ = ["DISPATCH_NAME", "GymDemoPart", "register_demo_parts"]

DISPATCH_NAME = "math_with_judge"
_FAILED_P, _OMITTED_P, _MASKED_P = 0.03, 0.01, 0.05


class GymDemoPart:
    """Counts each simulated rollout as a Gym collection attempt."""

    def __init__(self, settings: DemoSettings) -> None:
        self.steps = settings.steps

    def step(self, step: DemoStep) -> None:
        rng = step.random("gym")
        for reward, tokens in zip(step.rewards, step.response_tokens, strict=True):
            duration_ms = 400.0 + tokens * rng.uniform(6.0, 12.0)
            record_rollout_duration(duration_ms)
            u = rng.random()
            if u < _FAILED_P:
                record_rollout_completed(
                    "failed",
                    dispatch_name=DISPATCH_NAME,
                    failure_class="agent_request_failed",
                    failure_kind=f"{DISPATCH_NAME}:timeout",  # namespaced: exported as is
                    failure_type="TimeoutError",
                )
            elif u < _FAILED_P + _OMITTED_P:
                record_rollout_completed("omitted", dispatch_name=DISPATCH_NAME)
            else:
                record_verify(rng.uniform(2.0, 40.0), succeeded=True)
                record_rollout_completed(
                    "scored",
                    dispatch_name=DISPATCH_NAME,
                    reward=reward,
                    masked=rng.random() < _MASKED_P,
                )

    def close(self) -> None:
        pass


@rlmetrics.hookimpl
def register_demo_parts(
    register: Callable[[str, Callable[[DemoSettings], GymDemoPart]], None],
) -> None:
    register("gym", GymDemoPart)
