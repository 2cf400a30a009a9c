"""Reading an MLflow run back, and a tiny telemetry family for the isolation tests."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

from rlmetrics.testing import wait_until

__all__ = ["history", "wait_for_history"]

#: How long a queued row may take to reach the store before a test gives up on it.
WAIT_S = 30.0


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    """``[(step, value), ...]`` of one metric, sorted (the store does not keep log order)."""
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def wait_for_history(
    client: MlflowClient, run_id: str, key: str, expected: list[tuple[int, float]]
) -> list[tuple[int, float]]:
    """Wait (bounded) until the backend's own thread has written ``expected``: the MLflow
    backend is queued, so a row is in the store some time after ``log_metrics`` returns."""
    wait_until(lambda: history(client, run_id, key) == expected, WAIT_S, f"{key} {expected}")
    return history(client, run_id, key)
