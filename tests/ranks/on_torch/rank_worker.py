"""One rank of the 4-rank training loops in test_ranks_torch.py (run as a subprocess with
RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT set; argv: scenario, folder)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

import rlmetrics
from rlmetrics.ranks import torch_distributed
from rlmetrics.spec import MIN
from rlmetrics.testing import in_memory_telemetry, points

STEPS = 3
SLOW_RANK, SLOW_STEP, SLOW_S = 2, STEPS - 1, 1.5


def values(rank: int, step: int) -> dict[str, float]:
    """Numbers every rank can recompute: distinct per rank and step."""
    return {
        "num_samples": float(8 + 4 * rank + step),
        "reward": 0.1 * rank + 0.01 * step + 0.5,
        "loss": 1.0 + rank * 0.25 - step * 0.125,
        "lr": 1e-5 * (rank + 1),
        "grad_norm": 2.0 + 0.5 * ((rank + step) % 4),
        "valid_tokens_per_second": 100.0 * (rank + 1) + step,
        "custom/queue_min": float(10 - rank - step),
        "custom/undeclared": float(rank * 3 + step),
    }


#: The straggler scenario: the slow rank's seconds in its phase, and every other rank's.
STRAGGLER_RANK, STRAGGLER_S, OTHERS_S = 2, 0.2, 0.02
#: Bounds that scenario: it steps until the test writes ``stop`` in the folder, or this many.
STRAGGLER_MAX_STEPS = 3000


def straggle(rank: int, folder: Path, group: object) -> None:
    """Rank 2 slow in ``policy_time`` at every step, until the test says stop: rank 0 exports
    the run's series (the straggler set among them) on a Prometheus endpoint whose address it
    writes to ``endpoint.txt``, for the test's ``rlmetrics stack`` to scrape."""
    merger = torch_distributed(group, raw_path=folder / "rank{rank}.jsonl")
    started = (
        rlmetrics.start(run_id="ranks-alert", exporters=["prometheus"], prometheus_port=0)
        if rank == 0
        else None
    )
    if started is not None:
        assert started.prometheus_address is not None
        endpoint = folder / "endpoint.txt"
        endpoint.with_suffix(".tmp").write_text(f"127.0.0.1:{started.prometheus_address[1]}")
        endpoint.with_suffix(".tmp").rename(endpoint)  # whole, or not there
    logger = rlmetrics.Logger(
        backends={"jsonl": {"path": str(folder / f"tracker{rank}.jsonl")}}, ranks=merger
    )
    stop = torch.zeros(1)
    for step in range(STRAGGLER_MAX_STEPS):
        began = time.perf_counter()
        time.sleep(STRAGGLER_S if rank == STRAGGLER_RANK else OTHERS_S)
        metrics = {"policy_time": time.perf_counter() - began, "num_samples": 8.0}
        logger.log_metrics(metrics, step=step, prefix="train")
        # Every rank stops at the same step: the stop file as seen by any rank.
        stop[0] = float((folder / "stop").exists())
        dist.all_reduce(stop, op=dist.ReduceOp.MAX, group=group)  # type: ignore[arg-type]
        if stop[0]:
            break
    logger.finish()
    if started is not None:
        started.shutdown()


#: The busy scenario's steps: more than a few, so merges overlap the loop's own collectives.
BUSY_STEPS = 30


def busy(rank: int, folder: Path, group: object) -> None:
    """The loop all_reduces on the very group it gave the merger, every step, while its
    merges run on the merger's thread; it logs one dict, and a loss tensor, that it
    overwrites right after each call."""
    merger = torch_distributed(group, raw_path=folder / "rank{rank}.jsonl")
    logger = rlmetrics.Logger(
        backends={"jsonl": {"path": str(folder / f"tracker{rank}.jsonl")}}, ranks=merger
    )
    loss = torch.zeros((), dtype=torch.float64)  # a tensor the loop refills in place
    metrics: dict[str, object] = {"loss": loss}
    sums = []
    for step in range(BUSY_STEPS):
        loss.fill_(float(rank * step))
        metrics["num_samples"] = float(rank + step)
        logger.log_metrics(metrics, step=step, prefix="train")
        metrics["num_samples"] = -1.0  # the loop's dict and tensor, refilled at once
        loss.fill_(-1.0)
        total = torch.tensor([float(rank + step)])
        dist.all_reduce(total, group=group)  # type: ignore[arg-type]
        sums.append(total.item())
    logger.finish()
    (folder / f"result{rank}.json").write_text(
        json.dumps(
            {
                "sums": sums,
                "background": merger.handoff is not None,
                "unmerged": merger.unmerged,
                "broken": merger.broken,
            }
        )
    )


def rank_0_only(rank: int, folder: Path, group: object) -> None:
    """The Logger with ranks built on rank 0 only, as under ``if rank == 0:``: rank 0 logs a
    few steps and finishes; the other ranks build none and go on to the trainer's next
    collective on the same group, whose timeout their wait for rank 0 must stay within."""
    dist.barrier(group=group)  # type: ignore[arg-type]  (every rank starts together)
    if rank != 0:
        total = torch.ones(1)
        dist.all_reduce(total, group=group)  # type: ignore[arg-type]
        (folder / f"result{rank}.json").write_text(json.dumps({"total": total.item()}))
        return
    merger = torch_distributed(group, raw_path=folder / "rank{rank}.jsonl")
    logger = rlmetrics.Logger(
        backends={"jsonl": {"path": str(folder / f"tracker{rank}.jsonl")}}, ranks=merger
    )
    started = time.monotonic()
    for step in range(STEPS):
        logger.log_metrics(values(rank, step), step=step, prefix="train")
    logged_s = time.monotonic() - started
    logger.finish()
    total = torch.ones(1)
    dist.all_reduce(total, group=group)  # type: ignore[arg-type]
    (folder / f"result{rank}.json").write_text(
        json.dumps({"logged_s": logged_s, "broken": merger.broken, "total": total.item()})
    )


def subgroups(rank: int, folder: Path, timeout: timedelta) -> None:
    """Two data-parallel groups, [0, 1] and [2, 3], each merged on its own: every rank logs
    its own values over its group's merger."""
    pairs = [dist.new_group([0, 1], timeout=timeout), dist.new_group([2, 3], timeout=timeout)]
    merger = torch_distributed(pairs[rank // 2], raw_path=folder / "rank{rank}.jsonl")
    logger = rlmetrics.Logger(
        backends={"jsonl": {"path": str(folder / f"tracker{rank}.jsonl")}}, ranks=merger
    )
    for step in range(STEPS):
        logger.log_metrics(values(rank, step), step=step, prefix="train")
    logger.finish()


def _registered(group: object) -> bool:
    """Whether torch.distributed still holds ``group`` (destroy_process_group forgets it)."""
    try:
        dist.get_process_group_ranks(group)  # type: ignore[arg-type]
    except KeyError:
        return False
    return True


#: The budget scenario: each rank's batch of trajectories, larger than trace_all_below, with
#: a few failures; rewards distinct per rank and trajectory.
BUDGET_BATCH, BUDGET_FAILED = 100, 3


def budget_batch(rank: int) -> list[dict[str, object]]:
    """Rank ``rank``'s batch of one step (the test rebuilds it to compute the budget)."""
    return [
        {
            "sample_id": f"r{rank}-{i}",
            "reward": rank + i / BUDGET_BATCH,
            "outcome": "error" if i < BUDGET_FAILED else "success",
        }
        for i in range(BUDGET_BATCH)
    ]


def budget(rank: int, folder: Path, group: object) -> None:
    """Each rank logs its share of the step's rollouts through a Logger with ranks=: the
    span budget applies to that batch, in that process."""
    from rlmetrics.testing.traces import in_memory_tracing, span_records
    from rlmetrics.trajectories.spans import SAMPLE_ID_ATTR

    with in_memory_tracing(run_id="ranks-budget") as (_handle, reader, spans):
        dist.barrier()  # on the default group, as main()'s
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(folder / f"tracker{rank}.jsonl")}},
            ranks=torch_distributed(group, raw_path=folder / "rank{rank}.jsonl"),
        )
        logger.log_metrics({"num_samples": float(BUDGET_BATCH)}, step=0, prefix="train")
        logger.log_trajectories(budget_batch(rank), step=0)
        logger.finish()
        traced = sorted(
            {
                str(s.attributes[SAMPLE_ID_ATTR])
                for s in span_records(spans)
                if SAMPLE_ID_ATTR in s.attributes
            }
        )
        dropped = sum(p.value for p in points(reader) if p.name == "rl.trajectory.spans.dropped")
    (folder / f"result{rank}.json").write_text(json.dumps({"traced": traced, "dropped": dropped}))


def main() -> None:
    scenario, folder = sys.argv[1], Path(sys.argv[2])
    rank = int(os.environ["RANK"])
    # The rendezvous waits as long as importing torch takes on a busy host; the merger's group
    # times out a collective a dead rank never joins after RLMETRICS_TEST_PG_TIMEOUT seconds.
    dist.init_process_group("gloo", timeout=timedelta(seconds=600))
    timeout = float(os.environ.get("RLMETRICS_TEST_PG_TIMEOUT", "120"))
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout))
    if scenario in ("straggler", "busy"):
        (straggle if scenario == "straggler" else busy)(rank, folder, group)
        dist.destroy_process_group()
        return
    if scenario == "budget":
        budget(rank, folder, group)
        dist.destroy_process_group()
        return
    if scenario == "subgroups":
        subgroups(rank, folder, timedelta(seconds=timeout))
        dist.destroy_process_group()
        return
    if scenario == "rank-0-only":
        rank_0_only(rank, folder, group)
        dist.barrier()  # the trainer's own collective, on its default group, after it
        dist.destroy_process_group()
        return
    # Data parallel by hand (DDP's import of torch._dynamo takes a minute on a busy host):
    # each rank's gradients averaged over the group.
    model = torch.nn.Linear(4, 1)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.01)
    merger = torch_distributed(
        group, raw_path=folder / "rank{rank}.jsonl", reductions={"custom/queue_min": MIN}
    )
    with in_memory_telemetry(run_id="ranks-test") as (_handle, reader):
        # Every rank builds its Logger together: a rank waits for the others' at most half
        # the group's timeout (2.5 s in the dying scenarios), less than a busy host's skew
        # between ranks since the rendezvous. On the default group, whose timeout is the
        # rendezvous': starting telemetry (the families' imports) took one rank more than the
        # dying scenarios' 5 s longer than another on a loaded host, and a barrier on `group`
        # timed out on every rank (rank 3 exited 1, 1 run in 8).
        dist.barrier()
        logger = rlmetrics.Logger(
            backends={"jsonl": {"path": str(folder / f"tracker{rank}.jsonl")}}, ranks=merger
        )
        if scenario == "late" and rank == 3:
            time.sleep(1.0)  # this rank reaches its first step a second after the others
        for step in range(STEPS):
            batch = torch.full((2, 4), float(rank + step))
            loss = model(batch).pow(2).mean()
            optimiser.zero_grad()
            started = time.perf_counter()
            loss.backward()
            # (Once a rank has died, the survivors train on alone: only their logging is tested.)
            if not (scenario.startswith("dies") and step >= 1):
                for parameter in model.parameters():
                    assert parameter.grad is not None
                    dist.all_reduce(parameter.grad)
                    parameter.grad /= dist.get_world_size()
            optimiser.step()
            if scenario.startswith("dies") and rank == 3 and step == 1:
                if scenario == "dies" and merger.handoff is not None:
                    # A rank that dies mid-step has had its last logged step merged (its merge
                    # runs on the merger's thread while the step computes, for seconds in a
                    # real loop); "dies-at-once" dies with it still queued.
                    merger.handoff.wait_idle(60)
                os._exit(3)  # dies before the step-1 merge
            if rank == SLOW_RANK and step == SLOW_STEP:
                time.sleep(SLOW_S)  # the slow phase
            metrics: dict[str, object] = {**values(rank, step)}
            metrics["policy_time"] = time.perf_counter() - started
            if scenario == "kinds" and rank == 3:
                metrics["only/rank3"] = 7.0 + step  # a key set other ranks lack
            if scenario == "kinds" and rank == 2 and step == 1:
                metrics["loss"] = math.nan  # a NaN on one rank
            if scenario == "kinds":
                # A divergence on every rank at the last step: NaN in the run's row too.
                metrics["diverged"] = math.nan if step == STEPS - 1 else 1.0
            if scenario == "kinds" and rank == 1 and step == 2:
                del metrics["grad_norm"]  # a key one rank leaves out once
            logger.log_metrics(metrics, step=step, prefix="train")
            if scenario == "extra-eval" and rank == 0 and step == 0:
                # An evaluation logged on rank 0 only, under a prefix no rank logged yet: its
                # row is narrower than the others' train rows at the same collective.
                logger.log_metrics({"accuracy": 0.5}, step=0, prefix="eval")
            if scenario == "extra" and rank == 0 and step == 0:
                # A second dict on rank 0 only (as under `if rank == 0:`): its merge would
                # pair it with the other ranks' step 1.
                logger.log_metrics(
                    {**values(rank, step), "policy_time": 0.0}, step=0, prefix="train"
                )
        logger.finish()
        own_group_left = _registered(merger.collective.group)
        found = [
            {"name": p.name, "attributes": p.attributes, "value": p.value}
            for p in points(reader)
            if p.name.startswith("rl.ranks.") or p.name == "rl.reward.mean"
        ]
    (folder / f"result{rank}.json").write_text(
        json.dumps(
            {
                "points": found,
                "exchanges": merger.exchanges,
                "broken": merger.broken,
                "own_group_left": own_group_left,
                "given_group_left": _registered(group),
            },
            default=str,
        )
    )
    if merger.broken is None:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
