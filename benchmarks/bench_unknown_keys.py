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
import logging
import sys
import tempfile
from pathlib import Path

from _harness import compare, machine
from grpo_step import GRPO_STEP

import rlmetrics
from rlmetrics.known_keys import Vocabulary, declare_keys
from rlmetrics.testing import in_memory_telemetry, isolated_state

GOAL = 1.10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--number", type=int, default=2000)
    args = parser.parse_args(argv)
    logging.getLogger("rlmetrics").setLevel(logging.ERROR)  # the typo's one warning
    typo = {**GRPO_STEP, "kl_penalti": 0.01}
    print(f"machine: {machine()}")
    worst = 0.0
    cases = (
        ("the step as logged (~40 keys unknown)", GRPO_STEP),
        ("every key known (the rest declared)", GRPO_STEP),
        ("one misspelt key", typo),
    )
    with isolated_state(), tempfile.TemporaryDirectory() as folder:
        for index, (name, step) in enumerate(cases):
            if index == 1:
                unknown = [u.key for u in Vocabulary().unknown("train", GRPO_STEP)]
                declare_keys(unknown, backend_only=True)
            telemetry = in_memory_telemetry()
            telemetry.__enter__()
            loggers = {
                mode: rlmetrics.Logger(
                    backends={"jsonl": {"path": Path(folder) / f"{mode}.jsonl"}},
                    unknown_keys=mode,
                )
                for mode in ("warn", "ignore")
            }
            counter = iter(range(10**9))

            def case(lg: rlmetrics.Logger = loggers["warn"], s: dict = step) -> None:  # type: ignore[type-arg]
                lg.log_metrics(s, step=next(counter), prefix="train")

            def base(lg: rlmetrics.Logger = loggers["ignore"], s: dict = step) -> None:  # type: ignore[type-arg]
                lg.log_metrics(s, step=next(counter), prefix="train")

            result = compare(case, base, number=args.number, rounds=args.rounds)
            low, median, high = result.spread
            worst = max(worst, median)
            print(
                f"{name}: ratio median {median:.3f} (min {low:.3f}, max {high:.3f}); "
                f"{result.case_s * 1e6:.1f} µs vs {result.base_s * 1e6:.1f} µs per step"
            )
            for logger in loggers.values():
                logger.finish()
            telemetry.__exit__(None, None, None)
    print(f"goal: median <= {GOAL}: {'met' if worst <= GOAL else 'NOT met'}")
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
