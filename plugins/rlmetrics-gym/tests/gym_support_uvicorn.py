"""Uvicorn running :mod:`gym_support_worker_app` with several worker processes, each exporting
over OTLP to a receiver the test started: what ``uvicorn --workers N`` does in production, in a
process group the test kills however it ends."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from rlmetrics.testing import OtlpReceiver

__all__ = ["uvicorn_workers"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def uvicorn_workers(
    workers: int, receiver: OtlpReceiver
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """``(port, the uvicorn process)`` of the app served by ``workers`` processes on
    127.0.0.1; the whole group is stopped on exit (SIGTERM, then SIGKILL past 30 s)."""
    port = _free_port()
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path]),
    }
    command = [sys.executable, "-m", "uvicorn", "gym_support_worker_app:app"]
    command += ["--workers", str(workers), "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(
        [*command, "--log-level", "warning"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield port, server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
