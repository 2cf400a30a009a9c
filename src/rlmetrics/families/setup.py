"""Startup phases: the ``timing/setup`` dict logged once at step 0, as one dimensioned gauge.

Dimensioned rather than a row per phase because the phase set is not knowable up front (the
sparse-refit transports add ``vllm_<transport>_sparse_init_time_s`` at run time); an open
attribute with a cap keeps it bounded. No ``rl.bucket``: phases overlap by construction
(``total_setup`` contains the rest), so a rollup by bucket would count startup several times.
"""

from __future__ import annotations

from .. import hookimpl
from ..events import SetupTimings
from ..registry import declare, is_exporting, record
from ..spec import OPEN, STRAGGLER, Kind, MetricSpec
from ..values import key_attribute

__all__ = ["DURATION", "GROUP", "PHASE_ATTR"]

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
            reduce=STRAGGLER,
        )
    ],
)


@hookimpl(tee=True)
def on_setup_timing(timings: SetupTimings) -> None:
    if not is_exporting():
        return
    for phase, seconds in timings.seconds.items():
        if key_attribute(phase, "setup phase") is not None:
            record(GROUP, {DURATION: seconds}, {PHASE_ATTR: phase})
