"""Startup phases: the ``timing/setup`` dict logged once at step 0, as one dimensioned gauge.

Dimensioned rather than a row per phase because the phase set is not knowable up front (the
sparse-refit transports add ``vllm_<transport>_sparse_init_time_s`` at run time); an open
attribute with a cap keeps it bounded. No ``rl.bucket``: phases overlap by construction
(``total_setup`` contains the rest), so a rollup by bucket would count startup several times.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import hookimpl
from ..registry import declare, is_exporting, record
from ..spec import OPEN, Kind, MetricSpec

__all__ = ["DURATION", "GROUP", "PHASE_ATTR", "map_setup_seconds", "setup_phase"]

GROUP = "rl.setup"
DURATION = "rl.setup.duration"
PHASE_ATTR = "rl.setup.phase"

declare(
    GROUP,
    [
        MetricSpec(
            DURATION,
            Kind.GAUGE,
            unit="s",
            description="Wall clock spent in one startup phase (phases overlap: read one "
            "at a time)",
            attributes={PHASE_ATTR: OPEN},
            max_series=64,
        )
    ],
)

# Longest first: "generation_init_time_s" must lose "_time_s", not just "_s".
_SUFFIXES = ("_time_s", "_s")


def setup_phase(key: str) -> str | None:
    """The phase a setup key times (``generation_init_time_s`` → ``generation_init``), or None
    for a key that is not a duration (``parallel_init_enabled``)."""
    for suffix in _SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)]
    return None


def map_setup_seconds(timings: Mapping[str, Any]) -> dict[str, Any]:
    """``{phase: value}`` for every duration key; None values and non-durations are left out."""
    phases: dict[str, Any] = {}
    for key, value in timings.items():
        phase = setup_phase(key)
        if phase is not None and value is not None:
            phases[phase] = value
    return phases


@hookimpl
def on_setup_timing(timings: Mapping[str, Any]) -> None:
    if not is_exporting():
        return
    for phase, seconds in map_setup_seconds(timings).items():
        record(GROUP, {DURATION: seconds}, {PHASE_ATTR: phase})
