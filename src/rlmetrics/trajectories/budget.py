"""Which trajectories of a batch get spans: the span budget.

A step of a large run holds thousands of rollouts; a trace backend wants the ones worth
opening. The budget keeps every trajectory that did not succeed, the ``top_k`` and
``bottom_k`` by reward of the ones that did (a failure, kept anyway, takes no place among
them: a batch whose failures scored lowest still traces its lowest-scoring successes), and
``sample_rate`` of the rest (chosen by a hash of the sample id,
so the same rollout is chosen in every process and every rerun). A trajectory without spans
still counts in every metric and still has its row; how many lost their spans is counted in
a declared series (``rl.trajectory.spans.dropped``) and said once.

The budget applies to each ``log_trajectories`` batch (a step's, as trainers hand them over).
Live trajectories (``rlmetrics.trajectory``) are always traced: one rollout cannot know
whether it is among its step's best.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import attrs

from .records import Trajectory

__all__ = ["SpanBudget"]


def _count(budget: SpanBudget, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"SpanBudget.{attribute.name} must be an int from 0, got {value!r}")


def _rate(budget: SpanBudget, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"SpanBudget.sample_rate must be a number in [0, 1], got {value!r}")


@attrs.frozen(slots=True)
class SpanBudget:
    """Which trajectories of a batch are traced (see the module's docstring). A batch of at
    most ``trace_all_below`` trajectories is traced whole; a larger one keeps its failures,
    the ``top_k`` and ``bottom_k`` by reward of its successes and ``sample_rate`` of the
    rest."""

    top_k: int = attrs.field(default=8, validator=_count)
    bottom_k: int = attrs.field(default=8, validator=_count)
    sample_rate: float = attrs.field(default=0.1, validator=_rate)
    trace_all_below: int = attrs.field(default=64, validator=_count)

    def select(self, trajectories: Sequence[Trajectory]) -> list[bool] | None:
        """Whether each of ``trajectories`` gets spans; None when every one does."""
        n = len(trajectories)
        if n <= self.trace_all_below or self.sample_rate >= 1.0:
            return None
        keep = [t.failed or self._sampled(t) for t in trajectories]
        if self.top_k or self.bottom_k:
            scored = [
                (reward, i)
                for i, t in enumerate(trajectories)
                if not t.failed and (reward := t.total_reward()) is not None
            ]
            scored.sort()
            for _, i in scored[: self.bottom_k]:
                keep[i] = True
            for _, i in scored[max(0, len(scored) - self.top_k) :]:
                keep[i] = True
        return keep

    def _sampled(self, trajectory: Trajectory) -> bool:
        rate = self.sample_rate
        if rate <= 0.0:
            return False
        key = repr(trajectory.sample_id).encode("utf-8", "surrogatepass")
        return zlib.crc32(key) < rate * 4294967296.0
