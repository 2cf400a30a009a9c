"""The RL naming profile: the proposed OpenTelemetry RL conventions (semantic-conventions-genai
issue #88), opt-in with ``rlmetrics.start(naming="rl_proposal")`` (``RLMETRICS_NAMING``,
``[telemetry] naming``), never on by default.

With it, the phase timer also speaks the proposal's names:

- each step (``rlmetrics.step``) is the span ``rl.loop`` (with ``rl.loop.iteration`` beside
  ``rl.iteration``) and its wall time a point of ``rl.loop.duration``;
- a phase of one of the proposal's stages (:data:`STAGES`: ``generation`` is ``sample``,
  ``policy_training`` is ``train``, ``idle/refit_bubble`` is ``sync``...) is the span
  ``rl.sample`` / ``rl.reward`` / ``rl.train`` / ``rl.sync`` (its own name stays on
  ``rl.phase``) and its seconds a point of ``rl.<stage>.duration``, from the same two clock
  readings as its span and its efficiency accounting;
- the resource carries ``rl.run.id`` (the run id) and ``rl.algorithm`` / ``rl.system`` (from
  ``start(resource=...)`` or ``OTEL_RESOURCE_ATTRIBUTES``; said once when missing).

No rlmetrics series has the meaning of one of these histograms, so every series of the default
names stays as it is: the profile adds series, and renames only the spans it names.

The histograms are declared whatever the profile (so ``rlmetrics check`` holds every plugin
against them, and a dashboard can be generated); without the profile nothing records into
them, and the SDK exports a series only once it has a point. :data:`PROPOSAL_NAMES` lists every
other metric name the proposal defines, which ``rlmetrics check`` reserves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .._warn import warn_once
from ..check import RL_PROPOSAL_NAMES
from ..identity import RUN_ID_ATTR as RUN_ID
from ..registry import declare, record
from ..spec import SUM, Kind, MetricSpec
from ..tracing import naming as _naming

__all__ = [
    "DEFAULT",
    "DURATIONS",
    "GROUP",
    "LOOP",
    "NAMINGS",
    "PROPOSAL_NAMES",
    "RESOURCE_ATTRIBUTES",
    "RL_PROPOSAL",
    "STAGES",
    "Profile",
    "resource_attributes",
]

#: The ``naming`` setting's values: rlmetrics' own names only (the default), or those and the
#: proposal's.
DEFAULT: Final = _naming.DEFAULT
RL_PROPOSAL: Final = "rl_proposal"
NAMINGS: Final = (DEFAULT, RL_PROPOSAL)

GROUP = "rl.proposal"
LOOP = "loop"
#: Each phase name that is one of the proposal's stages: the proposal's own (``sample``,
#: ``reward``, ``train``, ``sync``) and NeMo-RL's (its timer's and the efficiency family's).
STAGES: Final[dict[str, str]] = {
    "sample": "sample",
    "generation": "sample",
    "reward": "reward",
    "reward_calculation": "reward",
    "train": "train",
    "training": "train",
    "policy_training": "train",
    "sync": "sync",
    "refit": "sync",
    "weight_sync": "sync",
    "idle/refit_bubble": "sync",
}
#: The histogram of each stage (and of the loop).
DURATIONS: Final[dict[str, str]] = {
    stage: f"rl.{stage}.duration" for stage in (LOOP, "sample", "reward", "train", "sync")
}
_SPANS: Final[dict[str, str]] = {stage: f"rl.{stage}" for stage in DURATIONS}
LOOP_ITERATION_ATTR = "rl.loop.iteration"

#: The resource attributes the profile sets or asks for.
RUN_ID_ATTR = "rl.run.id"
ALGORITHM_ATTR = "rl.algorithm"
SYSTEM_ATTR = "rl.system"
RESOURCE_ATTRIBUTES: Final = (RUN_ID_ATTR, ALGORITHM_ATTR, SYSTEM_ATTR)

#: Every other metric name the proposal defines (rlmetrics emits none of them): no plugin
#: may declare one, nor a series under one (``rlmetrics check``, rule ``rl-proposal``).
#: The proposal's other metric names, which ``rlmetrics check`` reserves.
PROPOSAL_NAMES: Final = RL_PROPOSAL_NAMES

# Seconds doubling from 10 ms (the GenAI conventions' duration buckets), then to ~6 hours: a
# loop or a training phase of a large run takes minutes to hours.
_BUCKETS = (
    *(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92),
    *(163.84, 327.68, 655.36, 1310.72, 2621.44, 5242.88, 10485.76, 20971.52),
)
_WHAT = {
    LOOP: "one training iteration (an rlmetrics.step), end to end",
    "sample": "one sampling (generation) phase",
    "reward": "one reward phase",
    "train": "one training phase",
    "sync": "one weight synchronisation (refit) phase",
}

declare(
    GROUP,
    [
        MetricSpec(
            name,
            Kind.HISTOGRAM,
            unit="s",
            description=f"Duration of {_WHAT[stage]}: the RL conventions proposal's name "
            "(semantic-conventions-genai #88), recorded only with naming='rl_proposal'",
            buckets=_BUCKETS,
            reduce=SUM,
        )
        for stage, name in DURATIONS.items()
    ],
)


class Profile(_naming.Naming):
    """The proposal's span names and histograms, for the tracing package."""

    def stage(self, phase: str) -> str | None:
        return STAGES.get(phase)

    def span_name(self, stage: str) -> str:
        return _SPANS[stage]

    def step_attributes(self, attributes: dict[str, Any], iteration: int | None) -> None:
        if iteration is not None:
            attributes[LOOP_ITERATION_ATTR] = iteration

    def record(self, stage: str, seconds: float) -> None:
        record(GROUP, {DURATIONS[stage]: seconds})

    def resource_attributes(self, resource: Mapping[str, Any]) -> dict[str, Any]:
        return resource_attributes(resource)


def resource_attributes(resource: Mapping[str, Any]) -> dict[str, Any]:
    """The profile's attributes for a resource that holds ``resource`` (the environment's,
    the caller's and rlmetrics' own): ``rl.run.id`` is ``rlmetrics.run.id`` unless given;
    ``rl.algorithm`` and ``rl.system`` only the user can give (said once when missing)."""
    attributes: dict[str, Any] = {RUN_ID_ATTR: resource.get(RUN_ID_ATTR, resource.get(RUN_ID))}
    missing = [key for key in (ALGORITHM_ATTR, SYSTEM_ATTR) if key not in resource]
    if missing:
        warn_once(
            "rl-proposal:resource",
            f"rlmetrics: naming='rl_proposal' puts {' and '.join(missing)} on the resource once "
            "you name them: start(resource={'rl.algorithm': 'grpo', 'rl.system': 'verl'}) or "
            "OTEL_RESOURCE_ATTRIBUTES=rl.algorithm=grpo,rl.system=verl",
        )
    return attributes


_naming.register(RL_PROPOSAL, Profile)
