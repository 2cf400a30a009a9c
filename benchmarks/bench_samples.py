"""What ``Logger.log_samples`` of 64 rows x 2 KB costs the training loop with every tracker
configured, as ratios to writing the same rows to a JSONL file by hand.

    python benchmarks/bench_samples.py [--processes 3] [--rounds 20] [--number 10] [--update-readme]

Needs rlmetrics-wandb, rlmetrics-mlflow, rlmetrics-tensorboard and rlmetrics-swanlab (the tox
env ``trackers``). Every tracker runs offline in a temporary folder: W&B offline, MLflow on a
sqlite store, TensorBoard event files, SwanLab offline; no network.

Cases, each against the same baseline in alternating rounds (A B, then B A):

- **every backend**: ``log_samples`` with JSONL (inline: the rows are written to the samples
  file before the call returns) and the four queued trackers (their rows are snapshotted and
  queued; their threads build the W&B table, the MLflow artifact, the TensorBoard text and the
  SwanLab media);
- **queued trackers only**: the same without the JSONL file, so what is left is bounding the
  rows, the snapshot and four non-blocking queue hand-offs.

The baseline is the least a loop could do to keep its samples: ``json.dumps`` of each row and
one write and flush to a file. Time is the *calling thread's* CPU time (``time.thread_time``):
the trackers' threads do their writing on the other core meanwhile, and what the loop pays is
what this measures. The goal is the loop's cost, so the median seconds per call are printed
next to the ratios: it must stay at or under 1 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
from _harness import Comparison, compare, machine, update_readme

ROWS, CELL = 64, 2048
GOAL_S = 0.001


def _rows() -> list[dict[str, Any]]:
    return [
        {
            "prompt": f"question {i}: " + "p" * (CELL // 4),
            "completion": f"answer {i}: " + "c" * CELL,
            "reward": i % 3 / 2,
            "response_tokens": 512 + i,
        }
        for i in range(ROWS)
    ]


def _backends(work: Path) -> dict[str, dict[str, Any]]:
    import swanlab
    from mlflow.tracking import MlflowClient

    db = work / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()  # migrated once, up front
    return {
        "jsonl": {"path": work / "metrics.jsonl"},
        "wandb": {"project": "bench", "dir": work / "wandb", "mode": "offline"},
        "mlflow": {
            "tracking_uri": f"sqlite:///{db}",
            "experiment_name": "bench",
            "artifact_location": (work / "artifacts").as_uri(),
        },
        "tensorboard": {"root_dir": work / "runs"},
        "swanlab": {
            "project": "bench",
            "mode": "offline",
            "log_dir": work / "swanlog",
            "init_kwargs": {
                "settings": swanlab.Settings(
                    terminal={"proxy_type": "none"},
                    probe={"monitor": False, "hardware": False, "git": False},
                )
            },
        },
    }


def measure(rounds: int, number: int) -> dict[str, Comparison]:
    import rlmetrics

    rows = _rows()
    results: dict[str, Comparison] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        backends = _backends(work)
        baseline_file = (work / "hand.jsonl").open("a", encoding="utf-8")

        def by_hand() -> None:
            baseline_file.write("".join(json.dumps(row) + "\n" for row in rows))
            baseline_file.flush()

        cases = {
            "every backend": backends,
            "queued trackers only": {k: v for k, v in backends.items() if k != "jsonl"},
        }
        for name, config in cases.items():
            logger = rlmetrics.Logger(backends=config, queue_size=rounds * number + 10)
            assert set(logger.backends) == set(config), logger.backends
            step = iter(range(10**9))
            results[name] = compare(
                lambda logger=logger, step=step: logger.log_samples(rows, step=next(step)),
                by_hand,
                number=number,
                rounds=rounds,
            )
            logger.finish(timeout_s=600)  # the trackers write the backlog (not timed)
        baseline_file.close()
    return results


def table(results: dict[str, Comparison], runs: str) -> str:
    lines = [
        f"log_samples({ROWS} rows x {CELL // 1024} KB), the loop's thread CPU time; {runs}",
        "",
        f"{'case':<22} {'ratio min':>9} {'median':>7} {'max':>7} "
        f"{'case ms':>8} {'by hand ms':>10}  goal (<= 1 ms)",
    ]
    for name, result in results.items():
        low, mid, high = result.spread
        met = "met" if result.case_s <= GOAL_S else "MISSED"
        lines.append(
            f"{name:<22} {low:>9.2f} {mid:>7.2f} {high:>7.2f} "
            f"{result.case_s * 1e3:>8.3f} {result.base_s * 1e3:>10.3f}  {met}"
        )
    return "\n".join(lines) + "\n"


def _in_processes(processes: int, rounds: int, number: int) -> dict[str, Comparison]:
    """Fresh interpreters one after the other, their rounds pooled (``_harness``)."""
    runs = []
    for _ in range(processes):
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--as-json",
                "--rounds",
                str(rounds),
                "--number",
                str(number),
            ],
            check=True,
            stdout=subprocess.PIPE,
            text=True,
            env=os.environ,
        )
        # The trackers print lines of their own; the result is the one JSON line.
        (line,) = [x for x in done.stdout.splitlines() if x.startswith('{"')]
        runs.append(json.loads(line))
    return {
        name: Comparison.pooled(
            [
                Comparison(tuple(run[name]["ratios"]), run[name]["case_s"], run[name]["base_s"])
                for run in runs
            ]
        )
        for name in runs[0]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20, help="rounds per case per process")
    parser.add_argument("--number", type=int, default=10, help="calls per side per round")
    parser.add_argument("--update-readme", action="store_true")
    parser.add_argument("--as-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name, value in {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "SWANLAB_MODE": "offline",
        "DO_NOT_TRACK": "1",
        "WANDB_DISABLE_GIT": "true",
        "WANDB_CONSOLE": "off",
        "WANDB_X_DISABLE_STATS": "true",
    }.items():
        os.environ.setdefault(name, value)
    if args.as_json:
        measured = measure(args.rounds, args.number)
        sys.stdout.write(
            "\n" + json.dumps({k: attrs.asdict(v) for k, v in measured.items()}) + "\n"
        )
        return
    results = _in_processes(args.processes, args.rounds, args.number)
    runs = f"{args.processes} processes of {args.rounds} rounds x {args.number} calls"
    block = table(results, runs)
    sys.stdout.write(f"{machine()}\n\n{block}")
    if args.update_readme:
        update_readme("bench-samples", f"{machine()}\n\n```text\n{block}```\n")


if __name__ == "__main__":
    main()
