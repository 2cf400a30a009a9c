"""The rank merge's cost: per logged step, and for a run of 1,024 ranks.

1. ``merge``: a 60-key step merged across 4 gloo ranks on this host through a Logger's merger
   (``Logger(ranks=...)``; rank 0 delivers the run's rows to a Logger with no backend) against
   one raw ``all_reduce`` of the same packed tensor on the training loop's thread — goal <=
   1.1x. CPU time of the loop's thread (``time.thread_time_ns``: gloo's own threads move the
   bytes for both sides), in alternating rounds, min / median / max of the per-round ratios
   (benchmarks/_harness.py). The merge runs on the merger's own thread (the default): what the
   loop's thread pays is the hand-off (a copy of the dict and a queue put); before each call
   of either side the merger's thread has finished the step before (off the clock: a loop
   steps far slower than it merges). Beside it, for the total: the merger's thread's CPU per
   step (its own clock, ``pthread_getcpuclockid``), the total (hand-off + merger's thread) over
   the ``all_reduce``, and the synchronous merge (``background=False``: pack, one
   ``all_gather``, unpack and reduce, all on the loop's thread) against the same baseline.
2. ``reducer``: rank 0's side of one step of 1,024 simulated ranks (60 keys each, a few absent,
   phase times as stragglers): unpacking the gathered rows and reducing them — goal <= 10 ms
   per step on one core — with the bytes one rank sends per step and the series the merged
   step exports.

Run in the integrations env (it has torch): ``tox exec -e integrations -- python
benchmarks/bench_ranks.py``. The reducer alone needs no torch: ``--reducer-only``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import Load, compare, machine

from rlmetrics.ranks import RankMerger
from rlmetrics.spec import STRAGGLER, SUM

KEYS = 60
WORLD = 4
SIM_RANKS = 1024


def step_dict(rank: int, step: int) -> dict[str, float]:
    out = {f"bench/k{i:02d}": float(rank + i + step) for i in range(KEYS - 4)}
    for phase in ("generation", "training", "refit", "logging"):
        out[f"timing/{phase}"] = 0.01 * (rank + 1)
    return out


REDUCTIONS: dict[str, Any] = {
    **{f"bench/k{i:02d}": SUM for i in range(0, KEYS - 4, 2)},
    **{f"timing/{p}": STRAGGLER for p in ("generation", "training", "refit", "logging")},
}


def rank_main(rank: int, port: int, number: int, rounds: int) -> None:
    import torch
    import torch.distributed as dist

    import rlmetrics
    from rlmetrics.ranks.torch import TorchCollective

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=timedelta(seconds=600))
    # The default: merged on the merger's thread, over a gloo group of its own.
    merger = RankMerger(TorchCollective(), raw_path=None, reductions=REDUCTIONS)
    logger = rlmetrics.Logger(backends={}, ranks=merger)
    handoff = merger.handoff
    assert handoff is not None
    # The synchronous merge, for the reference row: on the loop's thread, the default group.
    inline = RankMerger(TorchCollective(), raw_path=None, reductions=REDUCTIONS, background=False)
    flat = step_dict(rank, 0)
    merger.merge(flat, 0, "")  # agree on the table (the one object exchange)
    inline.merge(flat, 0, "")
    handoff.wait_idle(600)
    # The merger's packed row: its header (table, fit, step, prefix), mask words, values.
    width = 4 + 2 + KEYS
    tensor = torch.zeros(width, dtype=torch.float64)
    steps = iter(range(1, 10**9))

    def case() -> None:
        merger.merge(flat, next(steps), "")

    def sync_case() -> None:
        inline.merge(flat, next(steps), "")

    def base() -> None:
        dist.all_reduce(tensor)

    def idle() -> None:  # the step before merged (off the clock, before either side)
        handoff.wait_idle(600)

    merger_clock = time.pthread_getcpuclockid(handoff.thread.ident)  # type: ignore[arg-type]
    for _ in range(number):  # warm every path
        idle()
        case()
        idle()
        base()
        sync_case()
    idle()
    merger_before = time.clock_gettime_ns(merger_clock)
    result = compare(case, base, number=number, rounds=rounds, case_setup=idle, base_setup=idle)
    idle()
    merger_s = (time.clock_gettime_ns(merger_clock) - merger_before) / 1e9 / (number * rounds)
    synchronous = compare(sync_case, base, number=number, rounds=rounds)
    assert merger.exchanges["objects"] == 1 and inline.exchanges["objects"] == 1
    assert merger.broken is None and merger.unmerged == 0
    logger.finish()
    if rank == 0:
        done = {
            "ratios": result.ratios,
            "case_s": result.case_s,
            "base_s": result.base_s,
            "merger_s": merger_s,
            "sync_ratios": synchronous.ratios,
            "sync_case_s": synchronous.case_s,
            "sync_base_s": synchronous.base_s,
        }
        print(json.dumps(done))
    dist.destroy_process_group()


class Gathered:
    """A collective that hands back the rows a real all_gather would: the 1,024 simulated
    ranks' (``rows``), or the one row given (``capture``: a rank packing its step)."""

    def __init__(self, rank: int, world_size: int, rows: list[list[float]] | None = None) -> None:
        self.rank, self.world_size, self.rows = rank, world_size, rows
        self.captured: list[float] = []

    def all_gather(self, row: list[float]) -> list[list[float]]:
        self.captured = row
        return self.rows if self.rows is not None else [row] * self.world_size

    def all_gather_object(self, obj: Any) -> list[Any]:
        return [step_dict(rank, 0) for rank in range(self.world_size)]


def reducer(rounds: int, number: int) -> dict[str, Any]:
    # Each simulated rank's packed row, as its own merger packs it (one key absent on 1 in 8):
    # one packer (a rank other than 0) agrees on the table once, then packs every rank's step.
    packing = Gathered(rank=1, world_size=SIM_RANKS)
    packer = RankMerger(packing, raw_path=None, reductions=REDUCTIONS)
    packer.merge(step_dict(1, 0), 0, "")
    rows = []
    for rank in range(SIM_RANKS):
        flat = step_dict(rank, 1)
        if rank % 8 == 0:
            del flat["bench/k03"]
        packer.merge(flat, 1, "")
        rows.append(list(packing.captured))
    gathered = Gathered(rank=0, world_size=SIM_RANKS)
    merger = RankMerger(gathered, raw_path=None, reductions=REDUCTIONS)
    merger.merge(step_dict(0, 0), 0, "")  # the same table, agreed the same way
    gathered.rows = rows
    per_step = []
    merged: dict[str, Any] | None = None
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(number):
            # The step the rows were packed at: a row carries its step, and a merge of rows of
            # another step stops the merging (the ranks' calls would differ).
            merged = merger.merge(step_dict(0, 1), 1, "")
        per_step.append((time.process_time() - started) / number)
    assert merged is not None
    assert merged["bench/k00"] == sum(float(r + 1) for r in range(SIM_RANKS))
    assert merger.exchanges["objects"] == 1
    return {
        "ms_per_step": [s * 1000 for s in per_step],
        "bytes_per_rank": len(rows[0]) * 8,
        "gathered_bytes": len(rows[0]) * 8 * SIM_RANKS,
        "merged_keys": len(merged),
    }


def spread(ratios: list[float]) -> str:
    return f"{min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rank", type=int)
    parser.add_argument("--port", type=int)
    parser.add_argument("--number", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--reducer-only", action="store_true")
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args.rank, args.port, args.number, args.rounds)
        return
    print(machine())
    load = Load()
    if not args.reducer_only:
        port = free_port()
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--rank",
                    str(rank),
                    "--port",
                    str(port),
                    "--number",
                    str(args.number),
                    "--rounds",
                    str(args.rounds),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for rank in range(WORLD)
        ]
        outs = [proc.communicate(timeout=1800)[0] for proc in procs]
        result = json.loads(outs[0].strip().splitlines()[-1])
        ratios = result["ratios"]
        print(
            f"merge, {KEYS} keys x {WORLD} gloo ranks, the loop's thread (hand-off to the "
            f"merger's thread) vs one raw all_reduce of the packed tensor: {spread(ratios)} "
            f"(min/median/max of {len(ratios)} rounds; goal <= 1.1); "
            f"{result['case_s'] * 1e6:.1f} us vs {result['base_s'] * 1e6:.0f} us of the "
            "loop thread's CPU per step"
        )
        total = (result["case_s"] + result["merger_s"]) / result["base_s"]
        print(
            f"  the merger's thread: {result['merger_s'] * 1e6:.0f} us of its CPU per step "
            f"(rank 0: collective, unpack, reduce, deliver); loop + merger thread = "
            f"{total:.2f}x the all_reduce (medians)"
        )
        sync = result["sync_ratios"]
        print(
            f"  synchronous merge (background=False) vs the same all_reduce: {spread(sync)}; "
            f"{result['sync_case_s'] * 1e6:.0f} us vs {result['sync_base_s'] * 1e6:.0f} us"
        )
    found = reducer(rounds=args.rounds, number=max(1, args.number // 20))
    ms = found["ms_per_step"]
    print(
        f"reducer, {SIM_RANKS} simulated ranks x {KEYS} keys: {min(ms):.2f} / "
        f"{statistics.median(ms):.2f} / {max(ms):.2f} ms per step (min/median/max of "
        f"{len(ms)} rounds; goal <= 10 ms); {found['bytes_per_rank']} bytes per rank per step, "
        f"{found['gathered_bytes']} gathered; the merged step has {found['merged_keys']} keys"
    )
    print(load.stop())


if __name__ == "__main__":
    main()
