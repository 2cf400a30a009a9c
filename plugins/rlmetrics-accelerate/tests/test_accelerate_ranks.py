"""``log_ranks`` under ``accelerate launch`` on two CPU processes: the tracker gets one row per
step, not two, and each run-level value is the one computed by hand from the two ranks' raw
JSONL (reward weighted by num_samples, num_samples summed, an undeclared key averaged).

``accelerate launch --cpu --num_processes 2`` starts one process (Accelerate's simple launcher
runs several CPU processes only through ``mpirun`` and a host file); two CPU processes on one
host are its torchrun launcher (``--multi_gpu``) with a loop that asks for the CPU
(``Accelerator(cpu=True)``, and ``ACCELERATE_USE_CPU``): Accelerate makes that ``MULTI_CPU`` on
gloo, the same process group ``--cpu`` with ``mpirun`` gets."""

from __future__ import annotations

import math
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from rlmetrics.backends.jsonl import read_jsonl

LOOP = Path(__file__).with_name("launched_loop.py")
sys.path.insert(0, str(LOOP.parent))
import launched_loop  # noqa: E402  (the loop's own numbers)

#: Two processes importing torch and Accelerate on a busy two-core host.
RUN_TIMEOUT_S = 600.0
#: What a rank aborted in torch's teardown at exit prints.
TEARDOWN_ABORT = "terminate called without an active exception"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_accelerate_launch_on_two_processes_logs_one_merged_row_per_step(
    tmp_path: Path,
) -> None:
    launcher = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    assert launcher is not None, "accelerate's launcher is installed with accelerate"
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),  # no user's accelerate config is read
        "ACCELERATE_USE_CPU": "true",
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
    }
    command = [
        launcher,
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_ip",
        "127.0.0.1",
        "--main_process_port",
        "PORT",
        str(LOOP),
        str(tmp_path),
    ]
    for _attempt in range(2):
        for stale in tmp_path.glob("*.jsonl"):
            stale.unlink()
        port = str(_free_port())  # a fresh one: the last may still be held
        done = subprocess.run(
            [port if part == "PORT" else part for part in command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        # One launch in three or so ends with a rank aborted in torch's teardown at exit
        # (SIGABRT, "terminate called without an active exception"). torch's own: the same
        # loop with a raw all_gather_object and all_gather_into_tensor in place of log_ranks
        # aborts the same way, and one with only accelerator.log did not. Only that failure
        # is run once more.
        if done.returncode == 0 or TEARDOWN_ABORT not in done.stderr:
            break
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = list(read_jsonl(tmp_path / "tracker.jsonl"))
    assert [row["step"] for row in rows] == list(range(launched_loop.STEPS))  # one per step
    raw_rows = {rank: list(read_jsonl(tmp_path / f"rlmetrics.rank{rank}.jsonl")) for rank in (0, 1)}
    # Every rank's raw rows carry the tracker's run id and prefix. Before: each rank's merger
    # generated a run id of its own (rank 0's too), and the raw rows' prefix was "", where
    # the tracker's rows say "train".
    assert {(row["run_id"], row["prefix"]) for found in raw_rows.values() for row in found} == {
        (row["run_id"], row["prefix"]) for row in rows
    }
    raw = {rank: {row["step"]: row["metrics"] for row in found} for rank, found in raw_rows.items()}
    for row in rows:
        step, merged = row["step"], row["metrics"]
        mine = [raw[rank][step] for rank in (0, 1)]
        assert mine == [launched_loop.values(rank, step) for rank in (0, 1)]
        weights = [m["num_samples"] for m in mine]
        assert merged["num_samples"] == math.fsum(weights)
        assert merged["reward"] == math.fsum(
            m["reward"] * w for m, w in zip(mine, weights, strict=True)
        ) / math.fsum(weights)
        assert merged["loss_term"] == math.fsum(m["loss_term"] for m in mine) / 2
