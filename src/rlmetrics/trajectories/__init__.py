"""Trajectories: one rollout record that is spans, a sample row and metrics at once.

A rollout is a trajectory: turns of generations, tool calls and reward checks. rlmetrics
takes it in two forms that end in the same code (:mod:`.delivery`):

- live, while an agent loop runs: ``with rlmetrics.trajectory(sample_id, ...) as t:``
  (:mod:`.live`);
- after the fact, for a trainer's finished batch: ``logger.log_trajectories(records, step)``
  with plain dicts (:mod:`.records` documents the schema).

Each record becomes spans named by the OpenTelemetry GenAI conventions (:mod:`.spans`), one
row of the samples path (:mod:`.rows`) and, through the ``on_trajectories`` hook, the metrics
the trajectory family declares. Text leaves the process only under a text policy
(:mod:`.text`); a span budget (:mod:`.budget`) keeps failures and reward extremes of a large
batch and counts what it drops. :func:`configure` sets both for the process.

One module per concern: :mod:`.records` (the record and its parser), :mod:`.text`,
:mod:`.budget`, :mod:`.settings`, :mod:`.spans`, :mod:`.rows`, :mod:`.delivery`, :mod:`.live`.
"""

from __future__ import annotations

from typing import Any

from .budget import SpanBudget
from .delivery import SAMPLES_NAME, deliver
from .live import LiveTrajectory, LiveTurn, trajectory
from .records import (
    MAX_CALLS_PER_TURN,
    MAX_TURNS,
    OUTCOMES,
    TOOL_OUTCOMES,
    Generation,
    Reward,
    ToolCall,
    Trajectory,
    TrajectoryBatch,
    Turn,
    parse_trajectories,
    parse_trajectory,
)
from .settings import TrajectorySettings, configure, settings
from .text import TEXT_MODES, TextPolicy, as_text

__all__ = [
    "MAX_CALLS_PER_TURN",
    "MAX_TURNS",
    "OUTCOMES",
    "SAMPLES_NAME",
    "TEXT_MODES",
    "TOOL_OUTCOMES",
    "Generation",
    "LiveTrajectory",
    "LiveTurn",
    "Reward",
    "SpanBudget",
    "TextPolicy",
    "ToolCall",
    "Trajectory",
    "TrajectoryBatch",
    "TrajectorySettings",
    "Turn",
    "as_text",
    "configure",
    "deliver",
    "inside",
    "parse_trajectories",
    "parse_trajectory",
    "settings",
    "trajectory",
]


class inside:
    """Make ``context`` (a :class:`TrajectoryBatch`'s ``contexts[i]``) current for the block,
    so a histogram recorded inside gets an exemplar pointing at the trajectory's span; a no-op
    for None. (A class, not a generator: it runs once per trajectory.)"""

    __slots__ = ("_context", "_token")

    def __init__(self, context: Any) -> None:
        self._context = context
        self._token: Any = None

    def __enter__(self) -> None:
        if self._context is not None:
            from opentelemetry import context as otel_context

            self._token = otel_context.attach(self._context)

    def __exit__(self, *_: object) -> None:
        if self._token is not None:
            from opentelemetry import context as otel_context

            otel_context.detach(self._token)
