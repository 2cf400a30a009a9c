"""Timing against a baseline measured in the same run, in alternating rounds.

Each round times the case and its baseline back to back — A B in even rounds, B A in odd ones,
so neither always runs on a warmer cache or a quieter machine — and keeps the ratio of the two.
What is reported is the min, median and max of the per-round ratios, never the fastest round
alone: on a shared 2-core machine absolute times are noise, and one lucky round says nothing.

A process's memory layout shifts its timings as a whole (by ±0.05 in a ratio, run to run),
which more rounds in the same process cannot average out; so a benchmark runs its rounds in
several fresh processes and pools them (:meth:`Comparison.pooled`).

Time is the calling thread's CPU time (``time.thread_time_ns``), not wall time: on these VMs
the hypervisor steals a third of the CPU at times and other jobs share the two cores, which
wall time would charge to whichever side happened to be running; the thread's own clock also
leaves out the SDK's and the backends' threads, which neither side waits for. (A case that
hands its work to threads of its own passes ``clock_ns=time.process_time_ns``.) Even so a busy
machine slows both sides' memory accesses, so a benchmark states the load it ran under
(:class:`Load`): the ratios of alternating rounds are what count, never the microseconds.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import timeit
from collections.abc import Callable, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import attrs

__all__ = [
    "Comparison",
    "Load",
    "compare",
    "fresh_runs",
    "machine",
    "pool",
    "printed_into_readme",
    "update_readme",
]

README = Path(__file__).resolve().parent / "README.md"


@attrs.frozen
class Comparison:
    """Per-round ratios (case / baseline) and the median seconds per call of each side."""

    ratios: tuple[float, ...]
    case_s: float
    base_s: float

    @property
    def spread(self) -> tuple[float, float, float]:
        return min(self.ratios), statistics.median(self.ratios), max(self.ratios)

    @classmethod
    def pooled(cls, parts: list[Comparison]) -> Comparison:
        """One comparison from several processes' rounds: every round's ratio counts once;
        the seconds are the median of the processes' medians (for scale only)."""
        return cls(
            tuple(ratio for part in parts for ratio in part.ratios),
            statistics.median(part.case_s for part in parts),
            statistics.median(part.base_s for part in parts),
        )


def _cpu(
    call: Callable[[], object],
    number: int,
    clock_ns: Callable[[], int],
    setup: Callable[[], object] | None,
) -> float:
    """CPU seconds of ``number`` calls on ``clock_ns``: timeit's loop (and its GC pause) when
    there is no ``setup``, else a loop that runs ``setup`` before each call off the clock."""
    if setup is None:
        return timeit.Timer(call, timer=clock_ns).timeit(number=number) / 1e9
    spent = 0
    for _ in range(number):
        setup()
        started = clock_ns()
        call()
        spent += clock_ns() - started
    return spent / 1e9


def compare(
    case: Callable[[], object],
    base: Callable[[], object],
    *,
    number: int,
    rounds: int,
    clock_ns: Callable[[], int] = time.thread_time_ns,
    case_setup: Callable[[], object] | None = None,
    base_setup: Callable[[], object] | None = None,
) -> Comparison:
    """Time ``case`` against ``base``, ``number`` calls each per round, alternating order.

    ``clock_ns`` is the clock: the calling thread's CPU time, or ``time.process_time_ns`` when
    the case hands work to threads of its own. ``case_setup`` / ``base_setup`` run before each
    call of their side, off the clock (a collection timed alone after the step that fills it)."""
    ratios, case_times, base_times = [], [], []
    for index in range(rounds):
        if index % 2 == 0:
            case_t = _cpu(case, number, clock_ns, case_setup)
            base_t = _cpu(base, number, clock_ns, base_setup)
        else:
            base_t = _cpu(base, number, clock_ns, base_setup)
            case_t = _cpu(case, number, clock_ns, case_setup)
        ratios.append(case_t / base_t)
        case_times.append(case_t / number)
        base_times.append(base_t / number)
    return Comparison(tuple(ratios), statistics.median(case_times), statistics.median(base_times))


@attrs.define
class Load:
    """The machine's load averages (1, 5, 15 minutes) when a benchmark started and ended: on
    shared machines the reader's context for every microsecond in the table."""

    start: tuple[float, float, float] = attrs.field(factory=os.getloadavg)
    end: tuple[float, float, float] | None = None

    def stop(self) -> Load:
        self.end = os.getloadavg()
        return self

    def __str__(self) -> str:
        def shown(values: tuple[float, float, float]) -> str:
            return " / ".join(f"{value:.2f}" for value in values)

        end = "?" if self.end is None else shown(self.end)
        return f"load (1 / 5 / 15 min) {shown(self.start)} at the start, {end} at the end"


def fresh_runs(script: str, processes: int, args: list[str]) -> list[Any]:
    """``python script ARGS`` in ``processes`` fresh interpreters, one after the other (never
    side by side on two cores); each prints one JSON document, returned in order."""
    runs = []
    for _ in range(processes):
        done = subprocess.run(
            [sys.executable, script, *args],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
            env=os.environ,
        )
        runs.append(json.loads(done.stdout))
    return runs


def pool(runs: list[dict[str, Any]]) -> dict[str, Comparison]:
    """Each case's comparisons of several runs (``{case: attrs.asdict(Comparison)}`` each)
    pooled into one (:meth:`Comparison.pooled`)."""
    return {
        name: Comparison.pooled(
            [
                Comparison(tuple(run[name]["ratios"]), run[name]["case_s"], run[name]["base_s"])
                for run in runs
            ]
        )
        for name in runs[0]
    }


def machine() -> str:
    """What a result was measured on: the SDK, the interpreter, the cores and the date."""
    return (
        f"OTel SDK {version('opentelemetry-sdk')}, CPython {platform.python_version()}, "
        f"{os.cpu_count()} cores, {datetime.date.today().isoformat()}"
    )


def update_readme(marker: str, block: str) -> None:
    """Put ``block`` between ``<!-- marker:start -->`` and ``<!-- marker:end -->`` in
    README.md, appending the pair when the README has none yet."""
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    text = README.read_text()
    section = f"{start}\n{block}{end}"
    if start in text:
        pattern = re.escape(start) + r".*?" + re.escape(end)
        text = re.sub(pattern, lambda _match: section, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    README.write_text(text)


class _Tee(io.StringIO):
    def __init__(self, out: io.TextIOBase | object) -> None:
        super().__init__()
        self._out = out

    def write(self, text: str) -> int:
        self._out.write(text)  # type: ignore[attr-defined]
        return super().write(text)


@contextlib.contextmanager
def printed_into_readme(marker: str | None) -> Iterator[None]:
    """Print :func:`machine`, then as usual; with a ``marker``, also put what was printed into
    README.md as a text block (a benchmark whose report is its printed table)."""
    print(machine(), end="\n\n")
    if marker is None:
        yield
        return
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        yield
    update_readme(marker, f"{machine()}\n\n```text\n{tee.getvalue().rstrip()}\n```\n")
