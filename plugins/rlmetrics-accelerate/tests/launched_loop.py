"""One Accelerate loop on CPU, for test_accelerate_ranks.py: started on two CPU processes by
``accelerate launch --multi_gpu --num_processes 2 launched_loop.py <folder>`` (the loop asks
for the CPU: Accelerate makes that MULTI_CPU on gloo). Each rank logs its
own values through ``log_ranks``; the main process's RLMetricsTracker writes the run's."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from rlmetrics_accelerate import RLMetricsTracker, log_ranks

STEPS = 3


def values(rank: int, step: int) -> dict[str, float]:
    """What each rank logs: distinct per rank and step."""
    return {
        "num_samples": float(8 + 4 * rank + step),
        "reward": 0.5 + 0.1 * rank + 0.01 * step,
        "loss_term": 1.0 + 0.25 * rank - 0.125 * step,
    }


def main() -> None:
    folder = Path(sys.argv[1])
    tracker = RLMetricsTracker(backends={"jsonl": {"path": str(folder / "tracker.jsonl")}})
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    assert accelerator.num_processes == 2, accelerator.distributed_type
    accelerator.init_trackers("ranks", config={"lr": 0.1})
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for step in range(STEPS):
        x, y = torch.randn(4, 2), torch.randn(4, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        log_ranks(accelerator, values(accelerator.process_index, step), step=step)
    accelerator.end_training()
    # As torch asks before exit (docs/ranks.md): a gloo group left to the interpreter's exit
    # can abort the process ("terminate called without an active exception", seen in CI).
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
