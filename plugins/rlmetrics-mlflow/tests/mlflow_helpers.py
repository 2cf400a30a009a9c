"""Reading an MLflow run back, and a tiny telemetry family for the isolation tests."""

from __future__ import annotations

from typing import Any

from mlflow.tracking import MlflowClient

import rlmetrics

__all__ = ["TeePlugin", "declare_tee", "history"]


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    """``[(step, value), ...]`` of one metric, sorted (the store does not keep log order)."""
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


class TeePlugin:
    """A tiny telemetry family: mirrors ``train/loss`` into an OTel gauge ``tee.loss``."""

    GROUP = "tee"

    @rlmetrics.hookimpl
    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        if prefix == "train" and "loss" in metrics:
            rlmetrics.record(self.GROUP, {"loss": metrics["loss"]})


def declare_tee() -> None:
    rlmetrics.declare(
        TeePlugin.GROUP, [rlmetrics.MetricSpec("tee.loss", rlmetrics.Kind.GAUGE, key="loss")]
    )
