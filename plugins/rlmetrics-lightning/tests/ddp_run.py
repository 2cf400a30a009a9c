"""One Lightning DDP fit on CPU with two processes, for test_lightning_ranks.py (argv: the
folder to write in, then how the Logger is made). Lightning's subprocess launcher starts rank 1
by running this file again, with the same argv and the rank in the environment.

``built``: ``RLMetricsLogger(ranks="torch")`` builds the Logger that merges. ``given``: run
under torchrun, each rank initialises the process group and builds a
``rlmetrics.Logger(ranks="torch")`` of its own, given to ``RLMetricsLogger``."""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import lightning
import torch
from lightning.pytorch.strategies import DDPStrategy
from rlmetrics_lightning import RLMetricsLogger
from torch.utils.data import DataLoader, TensorDataset

import rlmetrics

STEPS = 3
#: The run's hyperparameters (save_hyperparameters(): Lightning logs them on rank zero only).
LR = 0.1
#: The process group's timeout: long enough for the second process to import torch and
#: Lightning on a busy host, and what a collective made on one rank only waits before failing.
PG_TIMEOUT = timedelta(seconds=120)


def values(rank: int, step: int) -> dict[str, float]:
    """What each rank logs: distinct per rank and step, exact in float32 (Lightning holds
    logged numbers as float32 tensors)."""
    return {
        "num_samples": float(8 + 4 * rank + step),
        "reward": 0.5 + 0.125 * rank + 0.25 * step,
        "loss_term": 1.0 + rank - 0.5 * step,
    }


class Ranked(lightning.LightningModule):  # type: ignore[misc]
    def __init__(self, lr: float = LR) -> None:
        super().__init__()
        self.save_hyperparameters()  # Lightning calls log_hyperparams on rank zero only
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        for key, value in values(self.global_rank, self.global_step).items():
            self.log(key, value)  # each rank's own value (no sync_dist): rlmetrics merges
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def main() -> None:
    folder, made = Path(sys.argv[1]), sys.argv[2]
    torch.manual_seed(0)
    data = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
    backends = {"jsonl": {"path": str(folder / "tracker.jsonl")}}
    given: rlmetrics.Logger | None = None
    if made == "given":
        torch.distributed.init_process_group("gloo", timeout=PG_TIMEOUT)  # Lightning's then
        given = rlmetrics.Logger(backends, ranks="torch")
        logger = RLMetricsLogger(given)
    else:
        logger = RLMetricsLogger(backends=backends, ranks="torch")
    trainer = lightning.Trainer(
        max_steps=STEPS,
        logger=logger,
        log_every_n_steps=1,
        accelerator="cpu",
        devices=2,
        strategy=DDPStrategy(timeout=PG_TIMEOUT),
        default_root_dir=folder,  # the checkpoint: <folder>/rlmetrics/<run id>/checkpoints
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Ranked(), data)
    logger.finish()
    if given is not None:
        given.finish()  # on every rank: the Logger is its owner's
    # Lightning destroys the default group at exit only when it is NCCL's; a gloo group left to
    # the interpreter's exit can abort the process (torch's "terminate called without an
    # active exception"), as torch's docs warn.
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
