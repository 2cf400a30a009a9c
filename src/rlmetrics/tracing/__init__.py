"""Traces: a step's time as spans, from the same clock reads that feed its efficiency summary.

One timer, two outputs. ``with rlmetrics.phase("generation", bucket="productive"):`` reads the
clock once when the block starts and once when it ends; the two readings are the start and end
of a leaf span tagged ``rl.bucket`` (while tracing) *and* the seconds added to the phase's
accounting. ``with rlmetrics.step(n):`` is the umbrella span of one step (``rl.iteration``,
no ``rl.bucket``); when it ends it delivers the step's
:class:`~rlmetrics.events.EfficiencySummary` through ``on_efficiency_summary`` (or its
Logger's ``log_efficiency_summary``), exactly as if the loop had logged ``efficiency/*``.
``run()`` and ``rollout()`` are the other umbrella spans.

This package names no phase and no category. Which phase names are accounted, how their
seconds add up (per step, or over the run) and which ``rl.bucket`` their span carries is
offered by plugins through the ``register_phases`` hook (:class:`PhaseKind`); the efficiency
family offers its categories there.

Without a started telemetry that traces, a phase is a near-free pair of clock reads that still
feeds the accounting; the OpenTelemetry API is imported only when tracing starts.

One module per concern:

- :mod:`~rlmetrics.tracing.accounting`: seconds per phase name across threads, the clocks,
  :class:`PhaseKind`;
- :mod:`~rlmetrics.tracing.phases`: the phase API (:class:`Phase`, :class:`PhaseTimer`,
  :func:`account`);
- :mod:`~rlmetrics.tracing.scopes`: the spans rlmetrics opens (:class:`Scope`, :func:`step`,
  :func:`run`, :func:`rollout`) and their attributes;
- :mod:`~rlmetrics.tracing.binding`: the tracer ``telemetry.start`` binds;
- :mod:`~rlmetrics.tracing.propagation`: a step's trace context across processes
  (:func:`trace_carrier`, :func:`trace_context`, :func:`trace_env`);
- ``_state``: what they share in this process.
"""

from __future__ import annotations

from ._state import new_session as new_session
from .accounting import BUCKETS, PhaseKind
from .binding import bind as bind
from .binding import tracing
from .binding import unbind as unbind
from .phases import DEFAULT_BUCKET, Phase, PhaseTimer, account, phase, phase_span_name
from .propagation import TRACEPARENT_ENV, TRACESTATE_ENV, trace_carrier, trace_context, trace_env
from .scopes import (
    BUCKET_ATTR,
    GENERATIONS_ATTR,
    ITERATION_ATTR,
    PHASE_ATTR,
    ROLLOUT_SPAN,
    RUN_SPAN,
    STEP_SPAN,
    STEP_SPANS,
    TRUNCATED_ATTR,
    WEIGHT_VERSION_ATTR,
    Scope,
    Step,
    Umbrella,
    close_open_scopes,
    current_step,
    rollout,
    run,
    step,
)

__all__ = [
    "BUCKETS",
    "BUCKET_ATTR",
    "DEFAULT_BUCKET",
    "GENERATIONS_ATTR",
    "ITERATION_ATTR",
    "PHASE_ATTR",
    "RUN_SPAN",
    "ROLLOUT_SPAN",
    "STEP_SPAN",
    "STEP_SPANS",
    "TRACEPARENT_ENV",
    "TRACESTATE_ENV",
    "TRUNCATED_ATTR",
    "WEIGHT_VERSION_ATTR",
    "Phase",
    "PhaseKind",
    "PhaseTimer",
    "Scope",
    "Step",
    "Umbrella",
    "account",
    "close_open_scopes",
    "current_step",
    "phase",
    "phase_span_name",
    "rollout",
    "run",
    "step",
    "trace_carrier",
    "trace_context",
    "trace_env",
    "tracing",
]
