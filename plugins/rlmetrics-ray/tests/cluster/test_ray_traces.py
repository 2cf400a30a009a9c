"""A step's trace context into real Ray workers (a one-node cluster on 127.0.0.1 that this
module starts, as ``test_ray_cluster.py`` does): a task started inside a step, and an actor
that outlives its steps and takes the context with each call, export spans that are children
of the driver's step spans, to the same collector as the driver.

Skipped where Ray is not installed (the SDK envs); the tox env ``ray`` runs them.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest

if importlib.util.find_spec("ray") is None:
    if os.environ.get("RLMETRICS_REQUIRE_RAY") == "1":  # the ray env: missing Ray is a failure
        raise ImportError("RLMETRICS_REQUIRE_RAY=1 but Ray is not installed")
    pytest.skip("needs Ray (ray[default]); the tox env 'ray' installs it", allow_module_level=True)

from ray_support_cluster import RAY_ENV, RayHead, driver

os.environ.update(RAY_ENV)  # before Ray is imported: it reads them at import

import ray
from ray_support import WAIT_S
from rlmetrics_ray import runtime_env

import rlmetrics
from rlmetrics.testing import OtlpReceiver, isolated_state
from rlmetrics.testing.peers import OtlpSpan

#: Starting Ray takes ~20 s on these machines; a first task a few more.
RAY_WAIT_S = 90.0


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayHead]:
    """A one-node Ray cluster, this process connected to it as the driver."""
    with RayHead(num_cpus=2) as head, driver(head):
        yield head


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    otlp = OtlpReceiver().start()
    try:
        yield otlp
    finally:
        otlp.close()


def _spans(receiver: OtlpReceiver, names: set[str], count: int) -> list[OtlpSpan]:
    def arrived(r: OtlpReceiver) -> list[OtlpSpan]:
        found = [s for s in r.spans() if s.name in names]
        return found if len(found) >= count else []

    found: list[OtlpSpan] = receiver.wait_for(arrived, WAIT_S, f"{count} spans of {names}")
    return found


def test_a_task_started_in_a_step_exports_spans_whose_parent_is_the_step(
    cluster: RayHead, receiver: OtlpReceiver
) -> None:
    # Defined here so cloudpickle ships it by value (the workers cannot import this file).
    @ray.remote(num_cpus=0)
    def rollout() -> int:
        import os

        import rlmetrics

        with (
            rlmetrics.start(exporters=["otlp"]),  # configured by the runtime_env only
            rlmetrics.phase("generate", bucket="productive"),
        ):
            pass
        return os.getpid()

    with (
        isolated_state(),
        rlmetrics.start(
            "grpo", run_id="run-ray-traces", exporters=["otlp"], otlp_endpoint=receiver.endpoint
        ),
    ):
        with rlmetrics.step(7):
            env = runtime_env("rollout", otlp_endpoint=receiver.endpoint)
            pid = ray.get(rollout.options(runtime_env=env).remote(), timeout=RAY_WAIT_S)
        [step] = _spans(receiver, {"rl.step"}, 1)
    [generate] = _spans(receiver, {"rl.generate"}, 1)
    assert (generate.trace_id, generate.parent_id) == (step.trace_id, step.span_id)
    assert generate.resource["process.pid"] == pid != os.getpid()
    assert generate.resource["rlmetrics.run.id"] == step.resource["rlmetrics.run.id"]
    assert generate.resource["rl.worker_group"] == "rollout"
    assert "ray.node.id" in generate.resource


def test_an_actor_takes_each_steps_context_with_the_call(
    cluster: RayHead, receiver: OtlpReceiver
) -> None:
    @ray.remote(num_cpus=0)
    class Scorer:
        def __init__(self) -> None:
            import rlmetrics

            self.telemetry = rlmetrics.start(exporters=["otlp"])

        def score(self, carrier: dict[str, str]) -> None:
            import rlmetrics

            with rlmetrics.trace_context(carrier), rlmetrics.phase("score", bucket="productive"):
                pass

        def stop(self) -> None:
            self.telemetry.shutdown(timeout_s=10)

    with (
        isolated_state(),
        rlmetrics.start(
            "grpo", run_id="run-ray-actor", exporters=["otlp"], otlp_endpoint=receiver.endpoint
        ),
    ):
        scorer = Scorer.options(  # type: ignore[attr-defined]
            runtime_env=runtime_env("reward", otlp_endpoint=receiver.endpoint)
        ).remote()
        for n in (1, 2):
            with rlmetrics.step(n):
                ray.get(scorer.score.remote(rlmetrics.trace_carrier()), timeout=RAY_WAIT_S)
        ray.get(scorer.stop.remote(), timeout=RAY_WAIT_S)
        ray.kill(scorer)
    steps = {s.attributes["rl.iteration"]: s for s in _spans(receiver, {"rl.step"}, 2)}
    scores = _spans(receiver, {"rl.score"}, 2)
    assert {s.parent_id for s in scores} == {steps[1].span_id, steps[2].span_id}
    for score in scores:
        assert score.trace_id == next(
            s.trace_id for s in steps.values() if s.span_id == score.parent_id
        )
        assert score.resource["rl.worker_group"] == "reward"
