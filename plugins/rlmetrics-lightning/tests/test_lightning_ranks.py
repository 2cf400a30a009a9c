"""RLMetricsLogger(ranks="torch") in a real Lightning DDP fit on CPU with two processes: the
tracker gets one row per step, not two, and each run-level value is the one computed by hand
from the two ranks' raw JSONL (reward weighted by num_samples, num_samples summed, an
undeclared key averaged); the module's save_hyperparameters() lands in the tracker."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlmetrics.backends.jsonl import HYPERPARAMS_KIND, read_jsonl

RUN = Path(__file__).with_name("ddp_run.py")
sys.path.insert(0, str(RUN.parent))
import ddp_run  # noqa: E402  (the run's own numbers)

#: Two processes importing torch and Lightning on a busy two-core host, then DDP's setup.
RUN_TIMEOUT_S = 600.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("made", ["built", "given"])
def test_a_ddp_fit_on_two_processes_logs_one_merged_row_per_step(tmp_path: Path, made: str) -> None:
    """``built``: ``RLMetricsLogger(ranks="torch")``, Lightning's own launcher. Before: with
    save_hyperparameters() the fit hung — Lightning calls log_hyperparams on rank zero only,
    and the Logger built there opened the merger's process group (a collective) without the
    other rank, until the process group's timeout failed the fit.

    ``given``: ``RLMetricsLogger(rlmetrics.Logger(ranks="torch"))`` under torchrun, the advice
    of the error for a Logger and ranks= both. Before: the logger called that Logger on rank
    zero only, so its merges never paired and the tracker got no row."""
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
    }
    launch = [sys.executable]
    if made == "given":
        launch += ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr"]
        launch += ["127.0.0.1", "--master_port", str(_free_port())]
    done = subprocess.run(
        [*launch, str(RUN), str(tmp_path), made],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tracker = list(read_jsonl(tmp_path / "tracker.jsonl", every_row=True))
    hyperparams = [row["hyperparams"] for row in tracker if row.get("kind") == HYPERPARAMS_KIND]
    assert hyperparams == [{"lr": ddp_run.LR}]  # once, on rank zero's tracker
    rows = [row for row in read_jsonl(tmp_path / "tracker.jsonl") if "reward" in row["metrics"]]
    assert [row["step"] for row in rows] == list(range(ddp_run.STEPS))  # one per step
    raw_rows = {rank: list(read_jsonl(tmp_path / f"rlmetrics.rank{rank}.jsonl")) for rank in (0, 1)}
    # Every rank's raw rows carry the tracker's run id (before: each rank generated its own).
    assert {row["run_id"] for found in raw_rows.values() for row in found} == {
        row["run_id"] for row in tracker
    }
    # The checkpoint folder is the run's (the logger's version: rank zero's id, taken by the
    # Logger built later on every rank).
    (run_id,) = {row["run_id"] for row in tracker}
    assert [p.parent for p in tmp_path.glob("**/*.ckpt")] == [
        tmp_path / "rlmetrics" / run_id / "checkpoints"
    ]
    raw = {rank: {row["step"]: row["metrics"] for row in found} for rank, found in raw_rows.items()}
    for row in rows:
        step, merged = row["step"], row["metrics"]
        mine = [raw[rank][step] for rank in (0, 1)]
        assert [m["reward"] for m in mine] == [ddp_run.values(r, step)["reward"] for r in (0, 1)]
        weights = [m["num_samples"] for m in mine]
        assert merged["num_samples"] == math.fsum(weights)
        assert merged["reward"] == math.fsum(
            m["reward"] * w for m, w in zip(mine, weights, strict=True)
        ) / math.fsum(weights)
        assert merged["loss_term"] == math.fsum(m["loss_term"] for m in mine) / 2
