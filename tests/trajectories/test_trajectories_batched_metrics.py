"""A batch's metrics are its trajectories' metrics: the family gathers a batch's histogram
values by attribute set and hands each set's over in one call (``record_values``), and adds
its counters up first; what is exported must be what logging each record alone exports."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import rlmetrics
from rlmetrics.testing import points
from rlmetrics.testing.traces import in_memory_tracing
from rlmetrics.trajectories import SpanBudget, configure
from rlmetrics.trajectories import settings as trajectory_settings

from .test_trajectories_records import record

_DROP_ALL_BUT_FAILURES = SpanBudget(top_k=0, bottom_k=0, sample_rate=0.0, trace_all_below=0)
_TRACE_ALL = SpanBudget(trace_all_below=1)


def _exported(batches: list[list[dict[str, Any]]]) -> dict[tuple[str, Any], tuple[Any, ...]]:
    """Every trajectory series' point after logging ``batches`` (one call each)."""
    with in_memory_tracing() as (_handle, reader, _spans):
        logger = rlmetrics.Logger(backends={})
        for step, batch in enumerate(batches):
            logger.log_trajectories(batch, step=step)
        found = points(reader)
    return {
        (p.name, frozenset(p.attributes.items())): (p.value, p.count, p.sum, p.bucket_counts)
        for p in found
        if p.name.startswith(("rl.trajectory.", "rl.tool.", "rl.offpolicy."))
        and p.name != "rl.trajectory.spans.dropped"  # a batch of one has nothing to drop
    }


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        # A batch's reward sum is added up before the SDK adds it: the same values, summed
        # in another grouping, may differ in the last bits.
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


@settings(max_examples=25)
@given(st.lists(record, min_size=1, max_size=6))
def test_a_batch_exports_what_its_records_logged_one_by_one_do(
    records: list[dict[str, Any]],
) -> None:
    before = trajectory_settings().budget
    try:
        # The batch's successes get no span: their values go through record_values; each
        # record alone is traced, its values recorded one by one inside its span.
        configure(budget=_DROP_ALL_BUT_FAILURES)
        together = _exported([records])
        configure(budget=_TRACE_ALL)
        alone = _exported([[r] for r in records])
    finally:
        configure(budget=before)
    assert together.keys() == alone.keys()
    for key, point in together.items():
        assert all(_close(a, b) for a, b in zip(point, alone[key], strict=True)), (
            key,
            point,
            alone[key],
        )
