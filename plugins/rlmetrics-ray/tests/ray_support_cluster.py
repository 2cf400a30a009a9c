"""A real one-node Ray cluster on 127.0.0.1 for the cluster tests: ``ray start --head
--block`` in a process session of its own.

- Loopback only: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes Ray use 127.0.0.1 as the node
  address (instead of the machine's interface address, which tests must never send traffic
  to), so every Ray process listens and talks on loopback.
- Ports: every port Ray would otherwise pick from a fixed default is chosen here, from the
  kernel's ephemeral range, which lies outside Ray's worker range (10002-19999).
- Stopping: SIGINT makes ``ray start --block`` stop every process it started; the session is
  ours, so its process group is killed by id if that does not happen. ``ray stop`` is never
  used (it stops every Ray on the machine).
- Ray waits a hard-coded 30 s for its raylet to register; on a loaded 2-core machine that can
  run out, so a start that fails is cleaned up and tried again.
- The driver: :func:`driver` connects this process to the head and refuses a Ray imported
  before ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` was set (it would advertise the interface
  address). Ray itself is imported only there: a test module sets :data:`RAY_ENV` first.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = ["RAY_ENV", "RayHead", "connect", "driver", "free_port"]

RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # node address 127.0.0.1
    "RAY_USAGE_STATS_ENABLED": "0",  # no usage report leaves the machine
    "RAY_AUTH_MODE": "disabled",  # no token written under $HOME
}
_STARTED = "Ray runtime started"


def free_port() -> int:
    """A free port on 127.0.0.1, never in Ray's worker range."""
    for _ in range(20):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not 10002 <= port <= 19999:
            return port
    raise RuntimeError("the kernel keeps handing out ports in Ray's worker range")


class RayHead:
    """``ray start --head --block`` on 127.0.0.1; :attr:`address` is the GCS address."""

    def __init__(self, num_cpus: int = 2) -> None:
        self.num_cpus = num_cpus
        self.gcs_port = free_port()
        self.metrics_port = free_port()
        self.address = f"127.0.0.1:{self.gcs_port}"
        self.temp_dir = tempfile.mkdtemp(prefix="rlr", dir="/tmp")  # short: socket paths
        self.log = Path(self.temp_dir) / "ray-start.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 120.0, attempts: int = 2) -> RayHead:
        for attempt in range(1, attempts + 1):
            if self._start_once(timeout_s):
                return self
            self.stop()
            if attempt == attempts:
                raise RuntimeError(f"ray start failed {attempts} times:\n{self.log_tail()}")
        return self

    def _start_once(self, timeout_s: float) -> bool:
        ray = str(Path(sys.executable).with_name("ray"))
        command = [
            ray, "start", "--head", "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={self.gcs_port}",
            f"--metrics-export-port={self.metrics_port}",
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
            f"--num-cpus={self.num_cpus}",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
        ]  # fmt: skip
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **RAY_ENV},
                start_new_session=True,
                # stop()'s SIGINT is heard even when this suite inherited SIGINT ignored (started
                # in the background by a non-interactive shell).
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if _STARTED in self.log.read_text(errors="replace"):
                return True
            if self.process.poll() is not None:
                return False
            time.sleep(0.2)
        return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(60)
        # Whatever it left behind is in its own process group: ours, stopped by its id.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        if process.poll() is None:
            process.wait(10)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> RayHead:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def connect(head: RayHead, **options: Any) -> None:
    """``ray.init`` on ``head`` as its driver (``options``: a ``runtime_env``, say), with
    Ray's worker logs kept off this process's output."""
    import ray

    ray.init(address=head.address, log_to_driver=False, logging_level=logging.WARNING, **options)


@contextlib.contextmanager
def driver(head: RayHead) -> Iterator[list[dict[str, Any]]]:
    """This process connected to ``head`` as its driver until the block ends: ``ray.nodes()``,
    every node on 127.0.0.1 (checked)."""
    import ray
    from ray._private import ray_constants  # the flag the environment variable sets

    if ray_constants.ENABLE_RAY_CLUSTER:
        pytest.fail(
            "Ray was imported before RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set, so it would "
            "advertise this machine's interface address: refusing to start it"
        )
    connect(head)
    try:
        nodes = ray.nodes()
        addresses = {node["NodeManagerAddress"] for node in nodes}
        assert addresses == {"127.0.0.1"}, f"Ray advertises {addresses}, not loopback"
        yield nodes
    finally:
        ray.shutdown()
