"""MLflow 3's tracing as a trajectory viewer: a demo run exported over rlmetrics' OTLP/HTTP
exporter to an ``mlflow server`` (``/v1/traces``, the experiment named in the
``x-mlflow-experiment-id`` header through ``OTEL_EXPORTER_OTLP_TRACES_HEADERS``) comes back
through MLflow's own client (``mlflow.search_traces``): every trajectory, its tree, its
attributes — and MLflow reads the GenAI names itself (agent, chat model and tool span types)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from rlmetrics.testing import wait_until

from ._servers import DemoExport, export_demo, flat


@pytest.fixture(scope="module")
def experiment(mlflow_url: str) -> str:
    from mlflow import MlflowClient

    experiment_id: str = MlflowClient(mlflow_url).create_experiment("rlmetrics-trajectories")
    return experiment_id


@pytest.fixture(scope="module")
def exported(
    mlflow_url: str, experiment: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DemoExport]:
    run = export_demo(
        tmp_path_factory.mktemp("mlflow-demo"),
        mlflow_url,
        {"OTEL_EXPORTER_OTLP_TRACES_HEADERS": f"x-mlflow-experiment-id={experiment}"},
    )
    try:
        yield run
    finally:
        run.stop()


def _spans(url: str, experiment: str) -> list[Any]:
    import mlflow

    mlflow.set_tracking_uri(url)
    traces = mlflow.search_traces(locations=[experiment], return_type="list", max_results=1000)
    return [span for trace in traces for span in trace.data.spans]


def _read_back(url: str, experiment: str, exported: DemoExport) -> dict[str, Any]:
    ids = {span_id for span_id, _p, _n in exported.trajectory_tree()}

    def landed() -> dict[str, Any] | None:
        spans = {s.span_id: s for s in _spans(url, experiment) if s.span_id in ids}
        return spans if len(spans) >= len(ids) else None

    found: dict[str, Any] = wait_until(landed, 300, "MLflow to hold the run's trajectories")
    return found


def test_mlflow_returns_every_trajectory_and_its_tree(
    mlflow_url: str, experiment: str, exported: DemoExport
) -> None:
    spans = _read_back(mlflow_url, experiment, exported)
    sent = exported.trajectory_tree()
    assert len(exported.trajectories()) == 32 * 2
    assert {(s.span_id, s.parent_id, s.name) for s in spans.values()} == sent
    agents = [s for s in spans.values() if s.name.startswith("invoke_agent")]
    assert len(agents) == 64


def test_mlflow_keeps_the_attributes_and_reads_the_genai_names(
    mlflow_url: str, experiment: str, exported: DemoExport
) -> None:
    spans = _read_back(mlflow_url, experiment, exported)
    checked = 0
    kinds: dict[str, set[str]] = {}
    for local in exported.traces.spans:
        span = spans.get(local.span_id)
        if span is None:
            continue
        attributes = flat(span.attributes)
        for key, value in local.attributes.items():
            if key.startswith(("gen_ai.", "rl.")):
                assert attributes.get(key) == (
                    list(value) if isinstance(value, tuple) else value
                ), (
                    local.name,
                    key,
                )
                checked += 1
        kinds.setdefault(local.attributes.get("gen_ai.operation.name", ""), set()).add(
            str(span.span_type)
        )
    assert checked > 64 * 8
    # MLflow maps the GenAI conventions to its own span types: the names rlmetrics sends are
    # the ones it reads.
    assert kinds["invoke_agent"] == {"AGENT"}
    assert kinds["chat"] == {"CHAT_MODEL"}
    assert kinds["execute_tool"] == {"TOOL"}
