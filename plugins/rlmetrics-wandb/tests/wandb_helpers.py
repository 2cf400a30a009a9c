"""Reading a W&B run back, and a tiny telemetry family for the isolation tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs

__all__ = ["WANDB_ENV", "RunLog", "offline_wandb", "read_run"]

# Offline and quiet: no network, no git or code capture, no console capture, no system
# stats thread, and no config/cache written outside the test's directory.
WANDB_ENV = {
    "WANDB_MODE": "offline",
    "WANDB_SILENT": "true",
    "WANDB_DISABLE_GIT": "true",
    "WANDB_DISABLE_CODE": "true",
    "WANDB_SAVE_CODE": "false",
    "WANDB_CONSOLE": "off",
    "WANDB_X_DISABLE_STATS": "true",
    "WANDB_X_DISABLE_MACHINE_INFO": "true",
}


def offline_wandb(monkeypatch: Any, home: Path) -> None:
    """W&B offline, quiet, without credentials, its config and caches under ``home``."""
    for name, value in WANDB_ENV.items():
        monkeypatch.setenv(name, value)
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(home / name.lower()))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


@attrs.frozen
class RunLog:
    """What a finished run's transaction log holds."""

    records: list[dict[str, Any]]

    @property
    def history(self) -> list[dict[str, Any]]:
        """The logged items of each history row, W&B's own ``_``-keys removed."""
        return [
            {k: v for k, v in r["history"]["item"].items() if not k.startswith("_")}
            for r in self.records
            if r["type"] == "history"
        ]

    @property
    def metrics(self) -> dict[str, dict[str, Any]]:
        """``define_metric`` records by name or glob."""
        out = {}
        for r in self.records:
            if r["type"] == "metric":
                m = r["metric"]
                out[m.get("name") or m["glob_name"]] = m
        return out

    @property
    def run(self) -> dict[str, Any]:
        return next(r["run"] for r in self.records if r["type"] == "run")


def read_run(transaction_log: Path) -> RunLog:
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(transaction_log)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Split on "\n" only: str.splitlines also splits inside a value holding U+2028 or \x85.
    return RunLog([json.loads(line) for line in out.stdout.split("\n") if line.strip()])
