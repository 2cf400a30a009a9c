"""The Ray reducer's driver side at 1,024 ranks, against the torch path's rank 0.

One step of 1,024 simulated Ray workers x 60 keys (one key absent on 1 in 8), as the driver
handles it: every rank's push into the buffer (:class:`rlmetrics_ray.step_buffer.StepBuffer`,
in this process: the actor's own work, without Ray's transport), its release, and the merge
(:func:`rlmetrics_ray.ranks.merge_step`) — against rank 0's side of the same step on
torch.distributed (the packed rows unpacked and reduced, bench_ranks.py's case). Ratios in
alternating rounds (benchmarks/_harness.py); needs no Ray and no torch:

    tox exec -e ray -- python benchmarks/bench_ray_ranks.py --number 20 --rounds 10
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import compare
from rlmetrics_ray.ranks import merge_step
from rlmetrics_ray.step_buffer import StepBuffer

from rlmetrics.ranks import RankMerger, Reductions
from rlmetrics.spec import STRAGGLER, SUM

KEYS = 60
SIM_RANKS = 1024
PHASES = ("generation", "training", "refit", "logging")
REDUCTIONS: dict[str, Any] = {
    **{f"bench/k{i:02d}": SUM for i in range(0, KEYS - 4, 2)},
    **{f"timing/{p}": STRAGGLER for p in PHASES},
}


def step_dict(rank: int, step: int) -> dict[str, float]:
    out = {f"bench/k{i:02d}": float(rank + i + step) for i in range(KEYS - 4)}
    for phase in PHASES:
        out[f"timing/{phase}"] = 0.01 * (rank + 1)
    if rank % 8 == 0:
        del out["bench/k03"]
    return out


class Gathered:
    """The rows a real all_gather would hand rank 0 (bench_ranks.py's stand-in)."""

    def __init__(self, rank: int, rows: list[list[float]] | None = None) -> None:
        self.rank, self.world_size, self.rows = rank, SIM_RANKS, rows
        self.captured: list[float] = []

    def all_gather(self, row: list[float]) -> list[list[float]]:
        self.captured = row
        return self.rows if self.rows is not None else [row] * SIM_RANKS

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [step_dict(rank, 0) for rank in range(SIM_RANKS)]


def torch_rank0() -> RankMerger:
    packing = Gathered(rank=1)
    packer = RankMerger(packing, raw_path=None, reductions=REDUCTIONS)
    packer.merge(step_dict(1, 0), 0, "")
    rows = []
    for rank in range(SIM_RANKS):
        packer.merge(step_dict(rank, 1), 1, "")
        rows.append(list(packing.captured))
    merger = RankMerger(Gathered(rank=0), raw_path=None, reductions=REDUCTIONS)
    merger.merge(step_dict(0, 0), 0, "")
    merger.collective.rows = rows  # type: ignore[attr-defined]
    return merger


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--number", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    numbers = [step_dict(rank, 1) for rank in range(SIM_RANKS)]
    reductions = Reductions(REDUCTIONS)
    columns: dict[Any, Any] = {}
    merger = torch_rank0()
    steps = iter(range(10**9))

    def ray_driver() -> None:
        buffer = StepBuffer(world_size=SIM_RANKS)
        step = next(steps)
        for rank, row in enumerate(numbers):
            buffer.push(rank, "train", step, "train", row)
        (gathered,) = buffer.release().gathered
        merge_step(gathered, reductions, columns)

    def torch_path() -> None:
        merger.merge(step_dict(0, 1), 1, "")

    (gathered,) = _one(numbers).gathered
    merged = merge_step(gathered, reductions)
    assert merged["bench/k00"] == sum(float(r + 1) for r in range(SIM_RANKS))
    result = compare(ray_driver, torch_path, number=args.number, rounds=args.rounds)
    low, median, high = result.spread
    print(
        f"Ray driver's side of one 1,024-rank x {KEYS}-key step (push, release, merge) vs "
        f"torch rank 0's (unpack, merge): {low:.2f} / {median:.2f} / {high:.2f}x "
        f"(min/median/max of {args.rounds} rounds; {result.case_s * 1000:.1f} ms vs "
        f"{result.base_s * 1000:.1f} ms per step, median "
        f"{statistics.median(result.ratios):.2f})"
    )


def _one(numbers: list[dict[str, float]]) -> Any:
    buffer = StepBuffer(world_size=SIM_RANKS)
    for rank, row in enumerate(numbers):
        buffer.push(rank, "train", 0, "train", row)
    return buffer.release()


if __name__ == "__main__":
    main()
