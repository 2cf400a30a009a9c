"""Which telemetry session the garbage-collector and process series are enabled for: the
switch :func:`~rlmetrics_gym.runtime.enable_runtime_metrics` turns, read by both observers."""

from __future__ import annotations

import rlmetrics

#: The group every runtime series is declared under (event loop, garbage collector, process).
GROUP = "gym.runtime"

PENDING = object()  # enabled before start(): applies to the next telemetry session
#: The Telemetry handle the series are enabled for (None: off; PENDING: the next one).
enabled_for: list[object] = [None]


def enabled() -> bool:
    """Whether the garbage-collector and process series are on for the running session."""
    session = enabled_for[0]
    return session is not None and session is rlmetrics.current()
