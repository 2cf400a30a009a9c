"""``runtime_env()`` carries the current step's W3C trace context (``TRACEPARENT``) with the
run: a worker process started with it exports spans that are children of the driver's step.

As in ``test_ray_workers.py``, a worker here is a real child Python process given exactly
the environment variables the runtime_env holds (the same with real Ray is in
``cluster/test_ray_traces.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from ray_support import WAIT_S
from rlmetrics_ray import runtime_env
from rlmetrics_ray.workers import TRACEPARENT_ENV, TRACESTATE_ENV

import rlmetrics
from rlmetrics.testing import OtlpReceiver, isolated_state

WORKER = """
import rlmetrics
with rlmetrics.start(exporters=["otlp"]):
    with rlmetrics.phase("generate", bucket="productive"):
        pass
"""


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    otlp = OtlpReceiver().start()
    yield otlp
    otlp.close()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_") or name in (TRACEPARENT_ENV, TRACESTATE_ENV):
            monkeypatch.delenv(name)


def test_inside_a_step_the_runtime_env_carries_its_context(
    clean_env: None, receiver: OtlpReceiver
) -> None:
    with (
        isolated_state(),
        rlmetrics.start(
            "grpo", run_id="run-env", exporters=["otlp"], otlp_endpoint=receiver.endpoint
        ),
    ):
        outside = runtime_env("rollout", otlp_endpoint=receiver.endpoint)["env_vars"]
        base = {
            "env_vars": {
                TRACEPARENT_ENV: "00-" + "1" * 32 + "-" + "2" * 16 + "-01",
                TRACESTATE_ENV: "stale=1",
            }
        }
        with rlmetrics.step(4):
            env = runtime_env("rollout", otlp_endpoint=receiver.endpoint)["env_vars"]
            replaced = runtime_env("rollout", base=base)["env_vars"]
            untraced = runtime_env("rollout", trace=False)["env_vars"]
            child = {k: v for k, v in os.environ.items() if not k.startswith("RLMETRICS_")}
            subprocess.run(
                [sys.executable, "-c", WORKER], env={**child, **env}, check=True, timeout=120
            )
        [step] = receiver.wait_for(
            lambda r: [s for s in r.spans() if s.name == "rl.step"], WAIT_S, "the step"
        )
    assert TRACEPARENT_ENV not in outside and TRACEPARENT_ENV not in untraced
    assert env[TRACEPARENT_ENV].startswith(f"00-{step.trace_id}-{step.span_id}-")
    assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] == receiver.endpoint
    assert env["OTEL_EXPORTER_OTLP_TRACES_INSECURE"] == "true"
    assert replaced[TRACEPARENT_ENV] == env[TRACEPARENT_ENV] and TRACESTATE_ENV not in replaced
    [generate] = receiver.wait_for(
        lambda r: [s for s in r.spans() if s.name == "rl.generate"], WAIT_S, "the worker's span"
    )
    assert (generate.trace_id, generate.parent_id) == (step.trace_id, step.span_id)
    assert generate.resource["rlmetrics.run.id"] == "run-env"
    assert generate.resource["rl.worker_group"] == "rollout"
    assert generate.resource["process.pid"] != os.getpid()
