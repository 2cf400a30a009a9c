"""Stragglers: where one phase of a step took the ranks different times, as a few series per
phase — the slowest, fastest and mean seconds across ranks, which rank was slowest (a value,
not a label) and the skew (slowest over mean) — never one series per rank.

The rank merger (:mod:`rlmetrics.ranks.merger`) records them on the logging rank for every
key declared ``reduce=STRAGGLER`` (and the efficiency dict's phase seconds); the phase is the
key as a train dict reads it (:func:`rlmetrics.ranks.merger.phase_of`), bounded by
``max_series``. ``RLStragglerRank`` (:mod:`rlmetrics.alerts.ranks`) fires on the skew.

The entries the merge adds to the run's row beside each straggler key
(``<key>/rank_min`` ... ``<key>/rank_skew``) are declared as reaching the trackers only: these
series carry them, so ``rlmetrics check --run`` names none of them as a typo.
"""

from __future__ import annotations

from ..known_keys import declare_keys
from ..ranks.reduce import (
    PHASE_ATTR,
    STRAGGLER_GROUP,
    STRAGGLER_MAX,
    STRAGGLER_MEAN,
    STRAGGLER_MIN,
    STRAGGLER_SKEW,
    STRAGGLER_SLOWEST,
    STRAGGLER_SUFFIXES,
)
from ..registry import declare
from ..spec import LAST, MAX, MEAN, MIN, OPEN, Kind, MetricSpec

__all__ = ["GROUP", "MAX_PHASES", "PHASE_ATTR"]

GROUP = STRAGGLER_GROUP
#: Distinct phases one run exports straggler series for.
MAX_PHASES = 64

_PHASE = {PHASE_ATTR: OPEN}

declare(
    GROUP,
    [
        MetricSpec(
            STRAGGLER_MAX,
            Kind.GAUGE,
            unit="s",
            description="Seconds the slowest rank spent in one phase of the step",
            attributes=_PHASE,
            max_series=MAX_PHASES,
            reduce=MAX,
        ),
        MetricSpec(
            STRAGGLER_MIN,
            Kind.GAUGE,
            unit="s",
            description="Seconds the fastest rank spent in one phase of the step",
            attributes=_PHASE,
            max_series=MAX_PHASES,
            reduce=MIN,
        ),
        MetricSpec(
            STRAGGLER_MEAN,
            Kind.GAUGE,
            unit="s",
            description="Mean seconds across ranks of one phase of the step",
            attributes=_PHASE,
            max_series=MAX_PHASES,
            reduce=MEAN,
        ),
        MetricSpec(
            STRAGGLER_SLOWEST,
            Kind.GAUGE,
            unit="{rank}",
            description="The rank that was slowest in one phase of the step (the lowest on a tie)",
            attributes=_PHASE,
            max_series=MAX_PHASES,
            reduce=LAST,
        ),
        MetricSpec(
            STRAGGLER_SKEW,
            Kind.GAUGE,
            unit="1",
            description="The slowest rank's seconds over the mean across ranks in one phase "
            "(1 is no straggler)",
            attributes=_PHASE,
            max_series=MAX_PHASES,
            reduce=MAX,
        ),
    ],
)

declare_keys(
    [f"**{suffix}" for suffix in STRAGGLER_SUFFIXES],
    prefixes=["**"],
    backend_only=True,
    note="the ranks' straggler entries beside a phase (rl.ranks.* carries them)",
)
