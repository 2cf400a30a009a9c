"""Timing against a baseline measured in the same run, in alternating rounds.

Each round times the case and its baseline back to back — A B in even rounds, B A in odd ones,
so neither always runs on a warmer cache or a quieter machine — and keeps the ratio of the two.
What is reported is the min, median and max of the per-round ratios, never the fastest round
alone: on a shared 2-core machine absolute times are noise, and one lucky round says nothing.

Time is this process's CPU time (``time.process_time``), not wall time: on these VMs the
hypervisor steals a third of the CPU at times, which wall time would charge to whichever side
happened to be running.
"""

from __future__ import annotations

import statistics
import time
import timeit
from collections.abc import Callable

import attrs

__all__ = ["Comparison", "compare"]


@attrs.frozen
class Comparison:
    """Per-round ratios (case / baseline) and the median seconds per call of each side."""

    ratios: tuple[float, ...]
    case_s: float
    base_s: float

    @property
    def spread(self) -> tuple[float, float, float]:
        return min(self.ratios), statistics.median(self.ratios), max(self.ratios)


def _cpu(call: Callable[[], object], number: int) -> float:
    """CPU seconds of ``number`` calls (timeit's loop, its GC pause, this process's clock)."""
    return timeit.Timer(call, timer=time.process_time).timeit(number=number)


def compare(
    case: Callable[[], object], base: Callable[[], object], *, number: int, rounds: int
) -> Comparison:
    """Time ``case`` against ``base``, ``number`` calls each per round, alternating order."""
    ratios, case_times, base_times = [], [], []
    for index in range(rounds):
        if index % 2 == 0:
            case_t = _cpu(case, number)
            base_t = _cpu(base, number)
        else:
            base_t = _cpu(base, number)
            case_t = _cpu(case, number)
        ratios.append(case_t / base_t)
        case_times.append(case_t / number)
        base_times.append(base_t / number)
    return Comparison(tuple(ratios), statistics.median(case_times), statistics.median(base_times))
