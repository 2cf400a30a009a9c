"""The simulated async GRPO run: what a training loop would log, deterministic for a seed.

Curves follow what a healthy GRPO run looks like: reward climbs and flattens, the KL to the
reference policy grows from zero, the policy loss hovers near zero, entropy falls and responses
lengthen. Time is simulated too: a step takes tens of seconds of *simulated* wall clock
(:meth:`Simulation.clock`, which moves only when the demo :meth:`~Simulation.spend` s it inside
its phases), split into the driver's phases — training (productive), idle waits (the collector
starving the buffer early on, the refit bubble every step, validation every tenth step) and
logging (overhead) — and the collector's own clocks, accounted without spans, so the efficiency
summary carries every measurement kind and window the spec defines:

- ``wall_clock``/``step``: ``idle/buffer_starvation``, ``idle/refit_bubble``, ``idle/validation``
  (absent on steps without validation, which the efficiency family reports as 0);
- ``wall_clock``/``run``: ``init/total``, the wait for the first buffer fill, republished;
- ``collector_wall_clock``/``run``: ``idle/refit_event_wait``, ``idle/generation_limit_pause``,
  cumulative;
- ``thread_seconds``/``run``: ``idle/buffer_full_backoff`` (eight worker threads) and
  ``wasted/failed_trajectory``, cumulative and larger than the time they happened in.

Rollout checkpoints: the run resumes from one (a restore before step 1), saves on a cadence,
and the second scheduled save fails with ``storage_error``. The streams' wall-clock axis is
simulated from a fixed origin, so the whole log is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from ..events import (
    CheckpointOutcome,
    CheckpointRestore,
    CheckpointSave,
    RolloutEvent,
    ThroughputSample,
)
from .parts import DemoStep, seeded

__all__ = [
    "DEMO_EPOCH_S",
    "GENERATIONS_PER_PROMPT",
    "SETUP_PREFIX",
    "Simulation",
    "SimulatedStep",
]

#: 2026-01-01T00:00:00Z: the simulated run's wall-clock origin.
DEMO_EPOCH_S = 1_767_225_600.0
SETUP_PREFIX = "timing/setup"

_PROMPTS_PER_STEP = 8
_GENERATIONS_PER_PROMPT = 4
#: Each prompt's rollouts per step (``rl.num_generations_per_prompt`` on the step's span).
GENERATIONS_PER_PROMPT = _GENERATIONS_PER_PROMPT
_MAX_TOKENS = 1024
_WORKER_THREADS = 8
_INIT_TOTAL_S = 118.4
_LOGGING_S = 0.6
_STORAGE_ERROR_ATTEMPT = 2


@attrs.frozen
class SimulatedStep:
    """One step: the train dict, the rollout-checkpoint events of the step, what the family
    parts see, and its time: the driver's ``phases`` in order (name, simulated seconds,
    bucket or None for the family's own), the collector's and its worker threads' seconds
    ``accounted`` in the step (added to the run's totals), and its goodput."""

    step: int
    train: dict[str, Any]
    events: tuple[RolloutEvent, ...]
    demo: DemoStep
    phases: tuple[tuple[str, float, str | None], ...] = ()
    accounted: dict[str, float] = attrs.field(factory=dict)
    goodput_pct: float = 100.0


def _clip(value: float, low: float, high: float) -> float:
    return min(high, max(low, value))


class Simulation:
    """A GRPO run of ``steps`` steps for ``seed``; ask for the steps in order."""

    def __init__(self, seed: int, steps: int) -> None:
        if steps < 1:
            raise ValueError(f"a run needs at least one step, got {steps}")
        self.seed = seed
        self.steps = steps
        self.checkpoint_every = max(2, steps // 6)
        self.elapsed_s = 0.0  # simulated time since the run started
        self._attempts = 0
        self._last_success_s: float | None = None

    # -- the simulated clock --------------------------------------------------------------

    def clock(self) -> float:
        """Simulated Unix time: the run started at :data:`DEMO_EPOCH_S`."""
        return DEMO_EPOCH_S + self.elapsed_s

    def spend(self, seconds: float) -> None:
        """Let ``seconds`` of simulated time pass (inside a phase, to time it)."""
        self.elapsed_s += seconds

    @property
    def init_total_s(self) -> float:
        """The wait for the first buffer fill, before step 1 (``init/total``)."""
        return _INIT_TOTAL_S

    # -- once per run ---------------------------------------------------------------------

    def setup_timings(self) -> dict[str, Any]:
        """The ``timing/setup`` dict of step 0. Phases overlap, as real ones do:
        ``total_setup`` contains the rest, ``parallel_wall`` the concurrent builds,
        ``generation_init`` its ``_reserve`` and ``_load`` parts."""
        r = seeded(self.seed, "setup")
        reserve, load = 18.0 + r.uniform(0, 4), 64.0 + r.uniform(0, 12)
        generation = reserve + load + r.uniform(2, 5)
        policy = 71.0 + r.uniform(0, 15)
        parallel = max(generation, policy) + r.uniform(0.5, 2)
        collective, weight_sync = 9.0 + r.uniform(0, 4), 4.0 + r.uniform(0, 3)
        workers, other = 11.0 + r.uniform(0, 5), 2.0 + r.uniform(0, 2)
        total = parallel + collective + weight_sync + workers + other
        return {
            "generation_init_time_s": round(generation, 3),
            "generation_init_reserve_time_s": round(reserve, 3),
            "generation_init_load_time_s": round(load, 3),
            "policy_init_time_s": round(policy, 3),
            "parallel_wall_time_s": round(parallel, 3),
            "collective_init_time_s": round(collective, 3),
            "weight_sync_time_s": round(weight_sync, 3),
            "worker_setup_time_s": round(workers, 3),
            "other_setup_time_s": round(other, 3),
            "total_setup_time_s": round(total, 3),
            "parallel_init_enabled": True,
        }

    def resume(self) -> CheckpointRestore:
        """The restore the run resumes from, before step 1 (non-overlapping phases)."""
        r = seeded(self.seed, "restore")
        phases = {
            "snapshot_resolution_seconds": 0.2 + r.uniform(0, 0.3),
            "dataloader_load_seconds": 0.8 + r.uniform(0, 0.8),
            "tq_load_seconds": 5.0 + r.uniform(0, 3),
            "replay_metadata_load_seconds": 0.5 + r.uniform(0, 0.5),
            "recovery_prepare_seconds": 0.3 + r.uniform(0, 0.5),
        }
        phases = {k: round(v, 3) for k, v in phases.items()}
        return CheckpointRestore(
            {
                **phases,
                "total_load_seconds": round(sum(phases.values()), 3),
                "groups_complete_restored": 24,
                "groups_unfinished_found": 6,
                "siblings_reused": 18,
                "siblings_rerun": 6,
                "redispatch_schedule_seconds": round(0.1 + r.uniform(0, 0.3), 3),
            },
            wall_time_s=DEMO_EPOCH_S + _INIT_TOTAL_S * 0.1,
        )

    # -- per step -------------------------------------------------------------------------

    def step(self, step: int) -> SimulatedStep:
        r = seeded(self.seed, "step", step)
        progress = step / self.steps
        demo = self._rollouts(step, progress)
        reward = sum(demo.rewards) / len(demo.rewards)
        train: dict[str, Any] = {
            "reward": round(reward, 4),
            "kl_penalty": round(
                max(0.0, 0.002 + 0.045 * (1 - math.exp(-2.5 * progress)) + r.gauss(0, 0.002)), 5
            ),
            "loss": round(-0.01 + 0.04 * math.exp(-3 * progress) + r.gauss(0, 0.006), 5),
            "approx_entropy": round(1.25 - 0.5 * progress + r.gauss(0, 0.02), 4),
            "grad_norm": round(abs(0.6 + r.gauss(0, 0.08)) + (1.5 if r.random() < 0.05 else 0), 4),
            "lr": 1e-6 * min(1.0, step / max(1, self.steps // 10)),
            "mean_gen_tokens_per_sample": round(
                sum(demo.response_tokens) / len(demo.response_tokens), 2
            ),
        }
        # Reward components (two verifiers: the answer and its format) and, on validation
        # steps, accuracy per validation dataset: each one series with a bounded attribute.
        # (Their noise has a generator of its own, so the other curves stay as they were.)
        solved = sum(1 for reward in demo.rewards if reward == 1.0) / len(demo.rewards)
        graded = sum(1 for reward in demo.rewards if reward > 0.0) / len(demo.rewards)
        train["reward/accuracy"] = round(solved, 4)
        train["reward/format"] = round(min(1.0, graded + 0.15 * (1 - progress)), 4)
        if step % 10 == 0:
            noise = seeded(self.seed, "validation", step)
            for dataset, skill in (("gsm8k", 0.9), ("math500", 0.6)):
                accuracy = skill * (0.2 + 0.7 * (1 - math.exp(-3 * progress)))
                train[f"validation/{dataset}/accuracy"] = round(accuracy + noise.gauss(0, 0.01), 4)
        phases, accounted, goodput = self._timing(step, r, demo)
        step_wall = sum(seconds for _name, seconds, _bucket in phases)
        events = self._checkpoint_events(step, r, demo, DEMO_EPOCH_S + self.elapsed_s + step_wall)
        return SimulatedStep(step, train, events, demo, phases, accounted, goodput)

    def _rollouts(self, step: int, progress: float) -> DemoStep:
        r = seeded(self.seed, "rollouts", step)
        solve = 0.12 + 0.66 * (1 - math.exp(-3 * progress))
        mean_response = 330 + 220 * progress
        prompts: list[int] = []
        responses: list[int] = []
        rewards: list[float] = []
        for _ in range(_PROMPTS_PER_STEP):
            prompt = int(_clip(r.gauss(190, 55), 24, 900))
            for _ in range(_GENERATIONS_PER_PROMPT):
                prompts.append(prompt)
                responses.append(
                    int(_clip(r.lognormvariate(math.log(mean_response), 0.45), 8, _MAX_TOKENS))
                )
                u = r.random()
                rewards.append(1.0 if u < solve else 0.5 if u < solve + 0.08 else 0.0)
        generation_s = sum(responses) / 2400.0 + r.uniform(1.0, 2.0)
        return DemoStep(
            step=step,
            steps=self.steps,
            seed=self.seed,
            prompt_tokens=tuple(prompts),
            response_tokens=tuple(responses),
            max_tokens=_MAX_TOKENS,
            rewards=tuple(rewards),
            generation_s=round(generation_s, 3),
        )

    def _timing(
        self, step: int, r: Any, demo: DemoStep
    ) -> tuple[tuple[tuple[str, float, str | None], ...], dict[str, float], float]:
        """The step's driver phases, the collector's and its threads' seconds, its goodput."""
        starvation = round(14.0 * math.exp(-step / 5) + abs(r.gauss(0, 0.4)), 3)
        bubble = round(2.4 + abs(r.gauss(0, 0.3)), 3)
        validation = round(8.5 + r.uniform(0, 1.5), 3) if step % 10 == 0 else None
        training = round(17.0 + r.uniform(0, 3), 3)
        phases: list[tuple[str, float, str | None]] = [
            ("idle/buffer_starvation", starvation, None),
            ("policy_training", training, "productive"),
            ("idle/refit_bubble", bubble, None),
        ]
        if validation is not None:
            phases.append(("idle/validation", validation, None))
        phases.append(("logging", _LOGGING_S, "overhead"))
        accounted = {"idle/refit_event_wait": round(bubble * 0.8, 3)}
        if r.random() < 0.3:
            accounted["idle/generation_limit_pause"] = round(r.uniform(1, 3), 3)
        backoff = max(0.0, 6.0 - starvation) * 0.5
        accounted["idle/buffer_full_backoff"] = round(_WORKER_THREADS * backoff, 3)
        failed = sum(1 for reward in demo.rewards if reward == 0.0 and r.random() < 0.1)
        accounted["wasted/failed_trajectory"] = round(failed * r.uniform(15, 25), 3)
        step_wall = sum(seconds for _name, seconds, _bucket in phases)
        idle = starvation + bubble + (validation or 0.0)
        return tuple(phases), accounted, 100.0 * (1 - idle / step_wall)

    def _checkpoint_events(
        self, step: int, r: Any, demo: DemoStep, now: float
    ) -> tuple[RolloutEvent, ...]:
        committed = sum(demo.response_tokens) / max(demo.generation_s, 1e-9)
        due = step % self.checkpoint_every == 0
        throughput: dict[str, float] = {
            "generation_output_tokens_per_second": round(committed * 1.04, 2),
            "committed_output_tokens_per_second": round(committed, 2),
            "committed_groups_per_second": round(_PROMPTS_PER_STEP / demo.generation_s, 4),
            "checkpoint_blocked_mutations": r.randint(3, 12) if due else 0,
            "checkpoint_mutation_wait_seconds_p95": round(r.uniform(0.2, 0.6), 3) if due else 0.0,
            "checkpoint_mutation_wait_seconds_max": round(r.uniform(0.6, 1.4), 3) if due else 0.0,
        }
        events: list[RolloutEvent] = [ThroughputSample(throughput, wall_time_s=now - 1.0)]
        if not due:
            return tuple(events)
        self._attempts += 1
        if self._attempts == _STORAGE_ERROR_ATTEMPT:
            events.append(
                CheckpointOutcome(
                    self._cadence(now, completed=False),
                    wall_time_s=now,
                    outcome="failed",
                    reason="storage_error",
                )
            )
            return tuple(events)
        phases = {
            "barrier_wait_seconds": r.uniform(0.1, 0.5),
            "exclusive_hold_seconds": r.uniform(0.3, 0.9),
            "tq_save_seconds": r.uniform(2.5, 5.0) + 0.02 * step,
            "sidecar_save_seconds": r.uniform(0.05, 0.2),
            "snapshot_commit_seconds": r.uniform(0.02, 0.1),
        }
        phases = {k: round(v, 3) for k, v in phases.items()}
        rows = 2000 + 40 * step
        events.append(
            CheckpointSave(
                {
                    **phases,
                    "total_save_seconds": round(sum(phases.values()), 3),
                    "snapshot_rows": rows,
                    "replay_rows": rows // 4,
                    "staging_rows": rows // 10,
                    "replay_groups": rows // 32,
                    "ledger_groups": rows // 16,
                    "controller_sidecar_bytes": 1_048_576 + 4096 * step,
                },
                wall_time_s=now,
            )
        )
        events.append(
            CheckpointOutcome(
                self._cadence(now, completed=True), wall_time_s=now, outcome="completed"
            )
        )
        return tuple(events)

    def _cadence(self, now: float, *, completed: bool) -> Mapping[str, float]:
        previous = self._last_success_s
        since = round(now - (previous if previous is not None else DEMO_EPOCH_S), 3)
        if completed:
            self._last_success_s = now
            return {"seconds_since_previous_success": since} if previous is not None else {}
        return {"seconds_since_last_success": since}
