"""Running the installed ``rlmetrics`` console script as a user runs it (a module with a name
no other test folder uses, so it imports the same whichever folders pytest collects)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["RLMETRICS", "Stack", "run_cli"]

#: The console script the installed distribution put beside this interpreter.
RLMETRICS = str(Path(sys.executable).with_name("rlmetrics"))


def run_cli(
    *args: str | os.PathLike[str], env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``rlmetrics ARGS`` in a subprocess; stdout and stderr captured as text."""
    return subprocess.run(
        [RLMETRICS, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


class Stack:
    """``rlmetrics stack`` running in a subprocess, and its Prometheus' API."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [RLMETRICS, "stack", "--json", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
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
