"""One run across worker processes: ``runtime_env()`` and the resource detector.

Without a Ray cluster, a worker here is a real child Python process started with exactly
the environment variables the runtime_env would give a Ray worker; it calls a plain
``rlmetrics.start(exporters=["otlp"])`` and exports to a real OTLP receiver on 127.0.0.1.
(The same with real Ray actors is in ``cluster/test_ray_cluster.py``.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ray_support import WAIT_S
from rlmetrics_ray import runtime_env
from rlmetrics_ray.resource import RayProcessResourceDetector, process_attributes
from rlmetrics_ray.workers import (
    DETECTORS_ENV,
    RESOURCE_DETECTOR,
    RESOURCE_ENV,
    RUN_ID_ATTR,
    SERVICE_NAME_ENV,
    WORKER_GROUP_ATTR,
    parse_resource_env,
)

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.testing import OtlpReceiver, in_memory_telemetry, isolated_state

# What a worker process does: a plain start(), one logged step, a bounded shutdown (which
# exports what it recorded), and its own view of who it was.
WORKER = """
import json, os
import rlmetrics
handle = rlmetrics.start(exporters=["otlp"])
rlmetrics.Logger(backends={}).log_metrics({"reward": 0.5}, step=1, prefix="train")
handle.shutdown(timeout_s=10)
print(json.dumps({"pid": os.getpid(), "run_id": handle.run_id}))
"""


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    otlp = OtlpReceiver().start()
    yield otlp
    otlp.close()


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[rlmetrics.Telemetry]:
    """A driver's telemetry with a run id and run-wide resource attributes."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "60000")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "4")
    with (
        isolated_state(),
        in_memory_telemetry(
            service_name="grpo",
            run_id="run-42",
            resource={"rl.algorithm": "grpo", "rl.model": "Qwen/Qwen3-0.6B", "process.pid": 1},
        ) as (handle, _reader),
    ):
        yield handle


def run_workers(
    env_vars: dict[str, str], count: int, script: str = WORKER, *args: str
) -> list[dict[str, Any]]:
    """Start ``count`` worker processes at once with ``env_vars`` over a clean environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RLMETRICS_"))}
    env.update(env_vars)
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script, *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(count)
    ]
    out = []
    for worker in workers:
        stdout, stderr = worker.communicate(timeout=120)
        assert worker.returncode == 0, stderr
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_the_runtime_env_carries_the_run_and_the_exporter_settings(
    driver: rlmetrics.Telemetry,
) -> None:
    env = runtime_env("lm_policy", otlp_endpoint="http://127.0.0.1:4317")
    env_vars = env["env_vars"]
    assert parse_resource_env(env_vars[RESOURCE_ENV]) == {
        RUN_ID_ATTR: "run-42",
        WORKER_GROUP_ATTR: "lm_policy",
        "rl.algorithm": "grpo",
        "rl.model": "Qwen/Qwen3-0.6B",
    }  # the driver's own process.pid, service.version and so on stay behind
    assert env_vars[SERVICE_NAME_ENV] == "grpo"
    assert env_vars[DETECTORS_ENV] == RESOURCE_DETECTOR
    assert env_vars["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"] == "http://127.0.0.1:4317"
    assert env_vars["OTEL_EXPORTER_OTLP_METRICS_INSECURE"] == "true"
    assert env_vars["OTEL_METRIC_EXPORT_INTERVAL"] == "60000"
    assert env_vars["OTEL_EXPORTER_OTLP_METRICS_TIMEOUT"] == "4"
    assert set(env) == {"env_vars"}


def test_a_base_runtime_env_is_extended_not_replaced(
    driver: rlmetrics.Telemetry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DETECTORS_ENV, "host")
    base = {
        "pip": ["vllm"],
        "env_vars": {
            "NCCL_DEBUG": "INFO",
            RESOURCE_ENV: "team=rl%2Cinfra,rl.worker_group=old",
            SERVICE_NAME_ENV: "overridden",
        },
    }
    env = runtime_env("vllm_policy", base=base)
    assert env["pip"] == ["vllm"]
    assert env["env_vars"]["NCCL_DEBUG"] == "INFO"
    resource = parse_resource_env(env["env_vars"][RESOURCE_ENV])
    assert resource["team"] == "rl,infra" and resource[WORKER_GROUP_ATTR] == "vllm_policy"
    assert env["env_vars"][SERVICE_NAME_ENV] == "grpo"
    assert env["env_vars"][DETECTORS_ENV] == f"host,{RESOURCE_DETECTOR}"
    assert base["env_vars"][SERVICE_NAME_ENV] == "overridden"  # the caller's dict is untouched


def test_values_that_need_escaping_survive_the_trip() -> None:
    env = runtime_env(run_id="a,b=c d%", service_name="svc")
    assert parse_resource_env(env["env_vars"][RESOURCE_ENV]) == {RUN_ID_ATTR: "a,b=c d%"}


def test_without_a_run_to_carry_it_says_what_to_do() -> None:
    assert rlmetrics.current() is None
    with pytest.raises(RuntimeError, match=r"rlmetrics.start\(\) on the driver first"):
        runtime_env("lm_policy")
    with pytest.raises(ValueError, match="worker_group"):
        runtime_env("", run_id="r")


def test_two_workers_export_as_one_run_with_their_own_resources(
    driver: rlmetrics.Telemetry, receiver: OtlpReceiver
) -> None:
    env = runtime_env("rollout", otlp_endpoint=receiver.endpoint)
    workers = run_workers(env["env_vars"], count=2)
    assert {w["run_id"] for w in workers} == {"run-42"}

    def both(r: OtlpReceiver) -> list[dict[str, Any]]:
        found = [res for res, names in r.resources() if "rl.reward.mean" in names]
        return found if len({res.get("process.pid") for res in found}) == 2 else []

    resources = receiver.wait_for(both, WAIT_S, "both workers' exports")
    by_pid = {res["process.pid"]: res for res in resources}
    assert set(by_pid) == {w["pid"] for w in workers}  # the detector ran in each worker
    for res in by_pid.values():
        assert res[RUN_ID_ATTR] == driver.run_id == "run-42"
        assert res["service.name"] == "grpo"
        assert res[WORKER_GROUP_ATTR] == "rollout"
        assert res["rl.algorithm"] == "grpo"
        assert "ray.node.id" not in res  # not a Ray worker: no node
    instances = {res["service.instance.id"] for res in by_pid.values()}
    assert len(instances) == 2  # the two workers' series never collide


# A worker whose Logger exists before its telemetry (or that never starts any): its rows.
EARLY_WORKER = """
import json, sys
import rlmetrics
logger = rlmetrics.Logger(backends={"jsonl": {"path": sys.argv[1]}})
logger.log_metrics({"reward": 0.5}, step=0, prefix="train")
logger.finish()
print(json.dumps({"run_id": logger.identity.run_id}))
"""


def test_a_workers_logger_built_before_its_telemetry_names_the_drivers_run(
    driver: rlmetrics.Telemetry, tmp_path: Path
) -> None:
    """Before: a worker's Logger built before its own rlmetrics.start() (or in a worker that
    starts none) named a random run, so its rows were another run's although the runtime_env
    carried the driver's run id; start() in the same worker took the driver's."""
    rows = tmp_path / "worker.jsonl"
    (worker,) = run_workers(runtime_env("rollout")["env_vars"], 1, EARLY_WORKER, str(rows))
    assert worker["run_id"] == "run-42"
    logged = [row for row in read_jsonl(rows) if "metrics" in row]
    assert [(row["run_id"], row["metrics"]) for row in logged] == [("run-42", {"reward": 0.5})]


def test_the_detector_gives_the_pid_and_no_node_outside_ray() -> None:
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        pytest.skip("Ray is initialised in this process")
    assert process_attributes() == {"process.pid": os.getpid()}
    assert dict(RayProcessResourceDetector().detect().attributes) == {"process.pid": os.getpid()}


# Text an environment variable can hold: no NUL, no lone surrogates.
env_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=30,
)


@settings(max_examples=100)
@given(run_id=env_text, group=env_text, service=env_text)
def test_the_sdk_reads_back_exactly_what_the_runtime_env_carries(
    run_id: str, group: str, service: str
) -> None:
    # The SDK's own parser is the oracle: it is what builds the worker's resource.
    from opentelemetry.sdk.resources import OTELResourceDetector

    env_vars = runtime_env(group, run_id=run_id, service_name=service)["env_vars"]
    carried = {k: env_vars[k] for k in (RESOURCE_ENV, SERVICE_NAME_ENV)}
    with mock.patch.dict(os.environ, carried):
        detected = dict(OTELResourceDetector().detect().attributes)
    assert parse_resource_env(env_vars[RESOURCE_ENV]) == {
        RUN_ID_ATTR: run_id,
        WORKER_GROUP_ATTR: group,
    }
    assert detected == {RUN_ID_ATTR: run_id, WORKER_GROUP_ATTR: group, "service.name": service}
