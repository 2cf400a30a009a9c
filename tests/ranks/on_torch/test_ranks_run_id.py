"""Ranks launched by torchrun name one run without being told its id: each rank's telemetry
(its OpenTelemetry resource, which cannot change after ``start()``) and each rank's rows
take torchrun's rendezvous id. Before, every rank exported under a random id of its own, so
one run was as many runs in every backend as it had ranks."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from rlmetrics.backends.jsonl import read_jsonl

WORLD = 2

#: A rank that imports no torch (torchrun's agent does): it starts telemetry with no run id,
#: logs one row to its own JSONL file and writes the id its resource carries to a file of its
#: own (parsed from the ranks' shared stdout instead, a line once did not split into a rank
#: and an id, on a host under load).
RANK = """
import os, pathlib, sys
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
import rlmetrics
folder = sys.argv[1]
rank = os.environ["RANK"]
with rlmetrics.start(readers=[InMemoryMetricReader()]) as handle:
    logger = rlmetrics.Logger(backends={"jsonl": {"path": f"{folder}/rank{rank}.jsonl"}})
    logger.log_metrics({"loss": 1.0}, step=0, prefix="train")
    logger.finish()
    (pathlib.Path(folder) / f"id{rank}.txt").write_text(handle.run_id)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _torchrun(folder: Path, *launch: str) -> dict[str, str]:
    """Each rank's run id as it printed it, after the launch ended."""
    script = folder / "rank.py"
    script.write_text(RANK)
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    assert torchrun is not None, "the integrations env installs torch, which ships torchrun"
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")}
    done = subprocess.run(
        [torchrun, *launch, f"--nproc-per-node={WORLD}", str(script), str(folder)],
        env={**env, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {path.stem[2:]: path.read_text() for path in folder.glob("id*.txt")}


def test_ranks_under_torchrun_standalone_share_its_rendezvous_id(tmp_path: Path) -> None:
    ids = _torchrun(tmp_path, "--standalone")
    assert sorted(ids) == ["0", "1"]
    assert len(set(ids.values())) == 1, ids
    [run_id] = set(ids.values())
    assert len(run_id) == 36  # torchrun --standalone's rendezvous id: a UUID
    for rank in ids:
        rows = [row for row in read_jsonl(tmp_path / f"rank{rank}.jsonl") if "metrics" in row]
        assert [row["run_id"] for row in rows] == [run_id]


def test_torchruns_default_id_none_names_no_run(tmp_path: Path) -> None:
    """Without ``--standalone`` or ``--rdzv-id``, torchrun's id is the word ``none`` for every
    job: taken as the run id it would join unrelated runs into one."""
    ids = _torchrun(
        tmp_path, "--nnodes=1", "--master-addr=127.0.0.1", f"--master-port={_free_port()}"
    )
    assert sorted(ids) == ["0", "1"] and "none" not in ids.values()
