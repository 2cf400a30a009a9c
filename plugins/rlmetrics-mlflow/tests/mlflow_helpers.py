"""Reading an MLflow run back, and a tiny telemetry family for the isolation tests."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

__all__ = ["history"]


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    """``[(step, value), ...]`` of one metric, sorted (the store does not keep log order)."""
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
