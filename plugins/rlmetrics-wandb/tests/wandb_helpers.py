"""Reading a W&B run back, and a tiny telemetry family for the isolation tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs

import rlmetrics

__all__ = ["RunLog", "TeePlugin", "declare_tee", "read_run"]


@attrs.frozen
class RunLog:
    """What a finished run's transaction log holds."""

    records: list[dict[str, Any]]

    @property
    def history(self) -> list[dict[str, Any]]:
        """The logged items of each history row, W&B's own ``_``-keys removed."""
        return [
            {k: v for k, v in r["history"]["item"].items() if not k.startswith("_")}
            for r in self.records if r["type"] == "history"
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
        check=True, capture_output=True, text=True, timeout=60,
    )
    return RunLog([json.loads(line) for line in out.stdout.splitlines() if line.strip()])


class TeePlugin:
    """A tiny telemetry family: mirrors ``train/loss`` into an OTel gauge ``tee.loss``."""

    GROUP = "tee"

    @rlmetrics.hookimpl
    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        if prefix == "train" and "loss" in metrics:
            rlmetrics.record(self.GROUP, {"loss": metrics["loss"]})


def declare_tee() -> None:
    rlmetrics.declare(TeePlugin.GROUP, [rlmetrics.MetricSpec("tee.loss", rlmetrics.Kind.GAUGE,
                                                              key="loss")])
