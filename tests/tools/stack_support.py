"""``rlmetrics stack`` in a subprocess with its servers' APIs, and a training loop that can
pause: what the stack's tests (its alerts, their delivery, ``rlmetrics query`` reading them)
share. A module with a name no other test folder uses."""

from __future__ import annotations

import http.server
import json
import signal
import subprocess
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from tools_support import RLMETRICS

import rlmetrics

__all__ = ["Receiver", "Run", "Stack", "receiver", "stacks"]


class Stack:
    """``rlmetrics stack`` running in a subprocess (``env``: its environment), and its
    Prometheus' API."""

    def __init__(
        self, *args: str, env: dict[str, str] | None = None, search_path: bool = False
    ) -> None:
        named = any(arg.startswith("--alertmanager") or arg == "--no-alertmanager" for arg in args)
        if not named and not search_path:
            # A test about something else starts no Alertmanager: one found on PATH would
            # take its usual port, 9093, which a parallel tox env's stack may be taking too
            # (each sees it free, one loses the bind).
            args = (*args, "--no-alertmanager")
        self.process = subprocess.Popen(
            [RLMETRICS, "stack", "--json", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.report = self._read_report()
        self.url: str = self.report["prometheus"]["url"]

    def _read_report(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        lines = []
        for line in self.process.stdout:
            lines.append(line)
            if line == "}\n":
                return dict(json.loads("".join(lines)))
        _out, err = self.process.communicate(timeout=30)
        raise AssertionError(f"rlmetrics stack ended before its report: {''.join(lines)}{err}")

    def get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=5) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/query", query=expr)["result"])

    def alert_states(self, name: str) -> set[str]:
        return {
            a["state"]
            for a in self.get("/api/v1/alerts")["alerts"]
            if a["labels"]["alertname"] == name
        }

    def active_targets(self, job: str) -> dict[str, str]:
        return {
            t["labels"]["instance"]: t["health"]
            for t in self.get("/api/v1/targets")["activeTargets"]
            if t["labels"]["job"] == job
        }

    def stop(self) -> tuple[int, str]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        _out, err = self.process.communicate(timeout=30)
        return self.process.returncode, err


@pytest.fixture
def stacks() -> Iterator[list[Stack]]:
    """The stacks a test starts (append them), stopped after it."""
    started: list[Stack] = []
    yield started
    for stack in started:
        stack.stop()


class Run:
    """A training loop logging a step every ``interval_s`` until paused, to the Logger
    ``backends`` given (none by default)."""

    def __init__(self, interval_s: float = 0.1, backends: dict[str, Any] | None = None) -> None:
        self.interval_s = interval_s
        self.running = threading.Event()
        self.done = threading.Event()
        self.step = 0
        self.logger = rlmetrics.Logger(backends=backends or {})
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.done.is_set():
            if self.running.wait(0.05):
                self.step += 1
                self.logger.log_metrics({"reward": self.step / 100}, step=self.step, prefix="train")
                self.done.wait(self.interval_s)

    def __enter__(self) -> Run:
        self.running.set()
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.done.set()
        self.thread.join(5)
        self.logger.finish()


class Receiver:
    """An HTTP server on 127.0.0.1 that records every JSON body POSTed to it, by path (an
    Alertmanager webhook's receiver)."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        lock = threading.Lock()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with lock:
                    owner.received.append((self.path, json.loads(body)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def bodies(self, path: str) -> list[dict[str, Any]]:
        return [body for where, body in list(self.received) if where == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A :class:`Receiver`, closed after the test."""
    started = Receiver()
    yield started
    started.close()
