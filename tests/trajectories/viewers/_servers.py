"""Real trace UIs as the tests start them: a server process on 127.0.0.1 with its own working
folder, phone-home off, waited for through its health endpoint (a bounded poll), stopped by its
process id; and the demo run they receive over rlmetrics' OTLP/HTTP exporter."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlmetrics.report.traces import Span, TraceSet, read_traces

__all__ = [
    "DEMO_STEPS",
    "PHOENIX_LAUNCHER",
    "DemoExport",
    "ServerProcess",
    "export_demo",
    "flat",
    "free_port",
    "listening_on",
]

#: Steps of the demo run each UI receives (32 trajectories a step).
DEMO_STEPS = 2
#: A server's first start builds its database: minutes on a busy machine.
START_TIMEOUT_S = float(os.environ.get("RLMETRICS_TRACEUI_START_TIMEOUT_S", "600"))
#: Phone-home off for every server and for the exporting run.
QUIET_ENV = {
    "PHOENIX_TELEMETRY_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "1",
}

# Phoenix binds its OTLP/gRPC receiver to every interface ("[::]:port", no setting changes
# the host): this launcher rewrites that one address to 127.0.0.1 before `phoenix serve` runs,
# so nothing the test starts listens on the machine's interface. Its HTTP server (the UI, the
# REST API the client reads, OTLP/HTTP at /v1/traces) takes PHOENIX_HOST.
PHOENIX_LAUNCHER = """
import sys
from grpc.aio import _server

_add = _server.Server.add_insecure_port


def add_insecure_port(self, address):
    return _add(self, address.replace("[::]", "127.0.0.1", 1))


_server.Server.add_insecure_port = add_insecure_port
from phoenix.server.main import main

sys.argv = ["phoenix", "serve"]
main()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _end(process: subprocess.Popen[Any]) -> None:
    """SIGTERM (each server, and the demo, stop cleanly on it), else SIGKILL after a minute."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


_ADDRESSES = {
    "0100007F": "127.0.0.1",
    "00000000": "0.0.0.0",
    "00000000000000000000000001000000": "::1",
    # ::ffff:127.0.0.1, an IPv6 socket bound to the IPv4 loopback (gRPC binds so).
    "0000000000000000FFFF00000100007F": "127.0.0.1",
    "00000000000000000000000000000000": "::",
}


def listening_on(port: int) -> set[str] | None:
    """The local addresses a socket listens on at ``port`` (Linux's /proc/net tables), or
    None where there are no such tables."""
    found: set[str] = set()
    tables = [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]
    if not any(t.exists() for t in tables):
        return None
    for table in tables:
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            address, _, hex_port = fields[1].partition(":")
            if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(_ADDRESSES.get(address, address))
    return found


class ServerProcess:
    """A server subprocess, its log in ``folder/server.log``."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        folder: Path,
        env: Mapping[str, str],
        health: str,
        ports: Sequence[int],
    ) -> None:
        self.name, self.health, self.folder, self.ports = name, health, folder, tuple(ports)
        self.url = f"http://127.0.0.1:{ports[0]}"
        self.log = folder / "server.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                list(argv),
                cwd=folder,
                env={**os.environ, **QUIET_ENV, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited ({self.process.returncode}):\n{self.tail()}"
                )
            try:
                with urllib.request.urlopen(self.health, timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{self.name} not healthy after {timeout_s:.0f} s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        _end(self.process)


class DemoExport:
    """A demo run exporting to a UI, kept serving (``--serve``) so its batch processor sends
    every span however slowly the UI takes them (a run's shutdown is bounded; a busy UI can
    take longer than the bound); its spans as its own OTLP/JSON file holds them (what was
    sent), and its trajectory rows."""

    def __init__(self, process: subprocess.Popen[str], output: Path, log: Path) -> None:
        self.process, self.output, self.log = process, output, log
        self.traces: TraceSet = read_traces([output / "traces.jsonl"])

    def trajectories(self) -> list[Span]:
        return [s for s in self.traces.spans if s.name.startswith("invoke_agent")]

    def trajectory_tree(self) -> set[tuple[str, str | None, str]]:
        """(span id, parent id, name) of every trajectory span and every span below one."""
        out = set()
        for t in self.trajectories():
            for s in [t, *self.traces.descendants(t)]:
                out.add((s.span_id, s.parent_id, s.name))
        return out

    def stop(self) -> str:
        """End the run as Ctrl-C does (SIGTERM: telemetry shut down); its output."""
        _end(self.process)
        return self.log.read_text(errors="replace")


def export_demo(folder: Path, endpoint: str, env: Mapping[str, str] | None = None) -> DemoExport:
    """``rlmetrics demo --serve`` as a user runs it, exporting over OTLP/HTTP
    (``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf``) to ``endpoint``, returned once its steps
    are done and its spans file is complete (it serves, and exports, until :meth:`stop`)."""
    output = folder / "demo"
    log = folder / "demo.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("rlmetrics")),
                "demo",
                "--steps",
                str(DEMO_STEPS),
                "--interval",
                "0",
                "--prometheus-port",
                "0",
                "--no-plot",
                "--output",
                str(output),
                "--otlp-endpoint",
                endpoint,
                "--serve",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            env={
                **os.environ,
                **QUIET_ENV,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                # A UI that writes every span to its database answers slowly on a busy machine.
                "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "60",
                **(env or {}),
            },
        )
    deadline = time.monotonic() + 600
    while "Serving " not in log.read_text(errors="replace"):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the demo did not start serving:\n{log.read_text()}")
        time.sleep(0.2)
    return DemoExport(process, output, log)


def flat(attributes: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Attributes as dotted names, whether a UI returns them flat or nested by dots."""
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat(value, f"{name}."))
        else:
            out[name] = value
    return out
