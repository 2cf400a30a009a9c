"""Running the stack's servers (Debian's ``prometheus``, and ``prometheus-alertmanager``:
:mod:`.alertmanager`): on 127.0.0.1, in the stack's folder, stopped with the command that
started them.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from .config import StackFiles

__all__ = [
    "INSTALL_HINT",
    "PrometheusProcess",
    "ServerProcess",
    "find_prometheus",
    "free_port",
    "port_is_free",
]

INSTALL_HINT = (
    "Prometheus is not installed. On Debian or Ubuntu: "
    "sudo apt-get install --no-install-recommends prometheus "
    "(or download it from https://prometheus.io/download/ and pass --prometheus PATH)"
)
_HOST = "127.0.0.1"


def find_prometheus(path: str | None = None) -> str | None:
    """The ``prometheus`` binary: ``path`` when given (a name on PATH or a file), else the one
    on PATH; None when there is none."""
    return shutil.which(path or "prometheus")


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:``port``. A port left in TIME_WAIT by a server
    that closed its connections first is free: Prometheus and Alertmanager (Go) bind with
    SO_REUSEADDR, so only a listener keeps them off it, and so must this check."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((_HOST, port))
        except OSError:
            return False
    return True


_Server = TypeVar("_Server", bound="ServerProcess")


class ServerProcess:
    """A server of the stack on 127.0.0.1:``port``, run in the stack's folder with its output
    in ``<name>.log`` there; ready when ``GET /-/ready`` answers 200 (both Prometheus and
    Alertmanager serve it)."""

    #: The log file's stem, and how messages name the server.
    name = "server"

    def __init__(self, binary: str, files: StackFiles, port: int) -> None:
        self.binary = binary
        self.files = files
        self.port = port
        self.log = files.root / f"{self.name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{_HOST}:{self.port}"

    @property
    def address(self) -> str:
        return f"{_HOST}:{self.port}"

    def command(self) -> list[str]:
        """The command line, run in the stack's folder (``files.root``)."""
        raise NotImplementedError

    def start(self: _Server, preexec: Callable[[], None] | None = None) -> _Server:
        """Start the server; ``preexec`` runs in the child before the server's binary does."""
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                cwd=self.files.root,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=preexec,
            )
        return self

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Wait until the server answers ``/-/ready`` (True), it exits or ``timeout_s`` passes
        (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        return False

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout_s``); its exit status."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=timeout_s)
        return process.returncode


class PrometheusProcess(ServerProcess):
    """``prometheus`` serving the stack's configuration on 127.0.0.1:``port``; its output goes
    to ``prometheus.log`` in the stack's folder.

    :param lifecycle: also serve ``POST /-/reload`` and ``/-/quit``
        (``--web.enable-lifecycle``). Off by default: those endpoints take no credentials, so
        any local process could stop the run's Prometheus with them. The stack needs neither:
        its targets are files Prometheus watches.
    """

    name = "prometheus"

    def __init__(
        self, binary: str, files: StackFiles, port: int, *, lifecycle: bool = False
    ) -> None:
        super().__init__(binary, files, port)
        self.lifecycle = lifecycle

    def command(self) -> list[str]:
        command = [
            self.binary,
            f"--config.file={self.files.config.name}",
            f"--web.listen-address={self.address}",
            # The links an alert carries (generatorURL) name the address it listens on, not
            # the machine's host name.
            f"--web.external-url={self.url}",
            f"--storage.tsdb.path={self.files.data.name}",
        ]
        if self.lifecycle:
            command.append("--web.enable-lifecycle")
        return command

    def api(self, path: str) -> Any:
        """A GET of the HTTP API (``/api/v1/...``), its ``data``."""
        with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as response:
            return json.load(response)["data"]
