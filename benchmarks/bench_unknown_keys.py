"""What ``Logger(unknown_keys="warn")`` adds to a logged step: the realistic 60-key GRPO step
of ``grpo_step.py`` through a Logger with the JSONL backend and telemetry exporting (one
in-memory reader), the option on against the same Logger with it off, in alternating rounds.

    python benchmarks/bench_unknown_keys.py [--rounds 31] [--number 2000]

The decision is made once per key sequence (rlmetrics.keyplans) and its findings are said
the first time, so a step with the option on costs a tuple of its keys and a dict lookup more:
the goal is a median ratio of at most 1.10 (the tuple and its hash are most of it: 4-6 µs
for 60 keys, what a key map's own plan costs too). Cases: the step as logged (about 40 of its keys
are NeMo-RL's own that no declaration knows: said on the first step, never after); the same
with those keys declared backend-only (``rlmetrics.declare_keys``), so every key is known; and
that with one misspelt key.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

from _harness import Comparison, compare, machine
from grpo_step import GRPO_STEP

import rlmetrics
from rlmetrics.known_keys import Vocabulary, declare_keys
from rlmetrics.testing import in_memory_telemetry, isolated_state

GOAL = 1.10


def _measure(step: dict[str, Any], folder: Path, rounds: int, number: int) -> Comparison:
    """``step`` logged through a Logger with the option on against one with it off."""
    with in_memory_telemetry():
        on, off = (
            rlmetrics.Logger(
                backends={"jsonl": {"path": folder / f"{mode}.jsonl"}}, unknown_keys=mode
            )
            for mode in ("warn", "ignore")
        )
        steps = itertools.count()
        try:
            return compare(
                lambda: on.log_metrics(step, step=next(steps), prefix="train"),
                lambda: off.log_metrics(step, step=next(steps), prefix="train"),
                number=number,
                rounds=rounds,
            )
        finally:
            on.finish()
            off.finish()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--number", type=int, default=2000)
    args = parser.parse_args(argv)
    logging.getLogger("rlmetrics").setLevel(logging.ERROR)  # the findings' one warning each
    print(f"machine: {machine()}")
    worst = 0.0
    with isolated_state(), tempfile.TemporaryDirectory() as folder:
        for case, step in (
            ("the step as logged (~40 keys unknown)", GRPO_STEP),
            ("every key known (the rest declared)", None),
            ("one misspelt key", {**GRPO_STEP, "kl_penalti": 0.01}),
        ):
            if step is None:  # the loop's own keys declared, as a user of the option would
                declare_keys(
                    [u.key for u in Vocabulary().unknown("train", GRPO_STEP)], backend_only=True
                )
                step = GRPO_STEP
            result = _measure(step, Path(folder) / str(len(case)), args.rounds, args.number)
            low, median, high = result.spread
            worst = max(worst, median)
            print(
                f"{case}: ratio median {median:.3f} (min {low:.3f}, max {high:.3f}); "
                f"{result.case_s * 1e6:.1f} µs vs {result.base_s * 1e6:.1f} µs per step"
            )
    print(f"goal: median <= {GOAL}: {'met' if worst <= GOAL else 'NOT met'}")
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
