"""rlmetrics-ray against a real one-node Ray cluster (``ray start --head``) this module
starts and connects to as the driver.

Ray reports the machine's own interface address for its nodes unless told otherwise; these
tests must never send traffic there. ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (set before Ray
is imported, and checked) makes Ray use 127.0.0.1 as the node address, so every Ray process
listens and talks on loopback, and the monitor additionally scrapes through the loopback
resolver. Every port chosen here is outside Ray's worker range (10002-19999).

Skipped where Ray is not installed (the SDK envs); the tox env ``ray`` runs them, with
``RLMETRICS_REQUIRE_RAY=1`` so that a missing Ray fails there instead of skipping.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

if importlib.util.find_spec("ray") is None:
    if os.environ.get("RLMETRICS_REQUIRE_RAY") == "1":  # the ray env: missing Ray is a failure
        raise ImportError("RLMETRICS_REQUIRE_RAY=1 but Ray is not installed")
    pytest.skip("needs Ray (ray[default]); the tox env 'ray' installs it", allow_module_level=True)

from ray_support_cluster import RAY_ENV, RayHead, connect, driver

os.environ.update(RAY_ENV)  # before Ray is imported: it reads them at import

import psutil
import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray_support import WAIT_S, wait_until
from rlmetrics_ray import (
    active_monitor,
    configure,
    loopback_metrics_url,
    register_worker_group,
    runtime_env,
)
from rlmetrics_ray.host_memory import TOTAL, USED

from rlmetrics.testing import OtlpReceiver, in_memory_telemetry, isolated_state, points

#: Starting Ray takes ~20 s on these machines; a first scrape can take a few more.
RAY_WAIT_S = 90.0


@pytest.fixture(scope="module")
def head() -> Iterator[RayHead]:
    """A one-node Ray cluster (``ray start --head``, two CPUs) for this module."""
    with RayHead(num_cpus=2) as ray_head:
        yield ray_head


@pytest.fixture(scope="module")
def cluster(head: RayHead) -> Iterator[list[dict[str, Any]]]:
    """This process connected to ``head`` as its driver; ``ray.nodes()``."""
    with driver(head) as nodes:
        assert {node["MetricsExportPort"] for node in nodes} == {head.metrics_port}
        yield nodes


def host_points(reader: Any) -> list[Any]:
    return [p for p in points(reader) if p.name in (USED, TOTAL)]


def test_the_monitor_finds_the_node_through_ray_nodes_and_exports_its_memory(
    cluster: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    (node,) = cluster
    configure(resolver=loopback_metrics_url, interval_s=0.5)
    with (
        caplog.at_level(logging.INFO, logger="rlmetrics"),
        isolated_state(),
        in_memory_telemetry() as (_handle, reader),
    ):
        monitor = active_monitor()
        assert monitor is not None, "telemetry_started did not start a monitor on the driver"
        found = wait_until(lambda: host_points(reader), RAY_WAIT_S, "the node's memory")
        assert monitor.gpus  # GPUs are read from the same scrape: this machine has none
        everything = points(reader)
    by_name = {p.name: p for p in found}
    # No GPU here: the real raylet serves no GPU family, so no hw.gpu.* series, one INFO line
    # saying so, and nothing at WARNING.
    assert not [p for p in everything if p.name.startswith("hw.gpu.")]
    said = [r for r in caplog.records if "no host reports a GPU" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.INFO]
    ours = [r for r in caplog.records if r.getMessage().startswith("rlmetrics-ray")]
    assert not [r for r in ours if r.levelno >= logging.WARNING]
    assert set(by_name) == {USED, TOTAL} and len(found) == 2
    expected = {
        "host.name": node["NodeManagerHostname"],
        "rl.worker_groups": "none",
        "rl.host.memory.source": "host",  # Ray 2.60 serves the *_host series
    }
    for point in found:
        assert point.attributes == expected and point.unit == "By"
    # Ray reads the machine's memory through psutil: the same total, and a used figure
    # inside it.
    assert by_name[TOTAL].value == psutil.virtual_memory().total
    assert 0 < by_name[USED].value < by_name[TOTAL].value


def test_a_placement_group_labels_its_host_from_none_to_its_worker_group(
    cluster: list[dict[str, Any]],
) -> None:
    (node,) = cluster
    configure(resolver=loopback_metrics_url, interval_s=0.2)

    def labels(reader: Any) -> set[str]:
        found = host_points(reader)
        # One point per metric in every collection: never the old label next to the new.
        assert sorted(p.name for p in found) in ([], [TOTAL, USED]), found
        assert all(p.attributes["host.name"] == node["NodeManagerHostname"] for p in found)
        return {p.attributes["rl.worker_groups"] for p in found}

    with isolated_state(), in_memory_telemetry() as (_handle, reader):
        wait_until(lambda: labels(reader) == {"none"}, RAY_WAIT_S, "the host labelled none")
        group = placement_group([{"CPU": 1}], strategy="PACK")
        register_worker_group("lm_policy", group)  # when the group is created, not placed
        try:
            ray.get(group.ready(), timeout=RAY_WAIT_S)
            wait_until(lambda: labels(reader) == {"lm_policy"}, WAIT_S, "the new label")
        finally:
            remove_placement_group(group)
        wait_until(lambda: labels(reader) == {"none"}, WAIT_S, "the label after removal")


def test_two_actors_export_with_the_drivers_run_id_and_their_own_resources(
    cluster: list[dict[str, Any]],
) -> None:
    (node,) = cluster
    receiver = OtlpReceiver().start()

    # Defined here so cloudpickle ships it by value (the workers cannot import this file).
    @ray.remote(num_cpus=0)
    class TelemetryWorker:
        def run(self) -> dict[str, Any]:
            import os

            import ray
            import rlmetrics_ray

            import rlmetrics

            handle = rlmetrics.start(exporters=["otlp"])  # configured by the runtime_env only
            monitor = rlmetrics_ray.active_monitor()
            rlmetrics.Logger(backends={}).log_metrics({"reward": 0.25}, step=1, prefix="train")
            handle.shutdown(timeout_s=10)
            return {
                "pid": os.getpid(),
                "node": ray.get_runtime_context().get_node_id(),
                "run_id": handle.run_id,
                "monitor": monitor is not None,
            }

    try:
        with isolated_state(), in_memory_telemetry(service_name="grpo", run_id="run-ray"):
            env = runtime_env("rollout", otlp_endpoint=receiver.endpoint)
            actors = [TelemetryWorker.options(runtime_env=env).remote() for _ in range(2)]
            reports = ray.get([actor.run.remote() for actor in actors], timeout=RAY_WAIT_S)
            for actor in actors:
                ray.kill(actor)

        def exported(r: OtlpReceiver) -> dict[int, dict[str, Any]]:
            found = {
                res.get("process.pid"): res
                for res, names in r.resources()
                if "rl.reward.mean" in names
            }
            return found if len(found) == 2 else {}

        resources = receiver.wait_for(exported, WAIT_S, "both actors' exports")
    finally:
        receiver.close()

    assert {r["run_id"] for r in reports} == {"run-ray"}
    assert not any(r["monitor"] for r in reports), "a Ray worker started a host monitor"
    assert set(resources) == {r["pid"] for r in reports} and len(resources) == 2
    for res in resources.values():
        assert res["rlmetrics.run.id"] == "run-ray"  # one run: join on it
        assert res["service.name"] == "grpo"
        assert res["rl.worker_group"] == "rollout"
        assert res["ray.node.id"] == node["NodeID"]
    assert len({res["service.instance.id"] for res in resources.values()}) == 2


def test_telemetry_started_before_ray_init_waits_for_it_and_the_job_runtime_env_carries_the_run(
    head: RayHead, cluster: list[dict[str, Any]]
) -> None:
    # NeMo-RL's order: telemetry on the driver first, then ray.init() with the job's runtime
    # env; a task (no runtime env of its own) then exports as part of the run.
    (node,) = cluster
    ray.shutdown()
    receiver = OtlpReceiver().start()
    configure(resolver=loopback_metrics_url, interval_s=0.2)
    try:
        with (
            isolated_state(),
            in_memory_telemetry(service_name="grpo", run_id="run-job") as (
                _handle,
                reader,
            ),
        ):
            monitor = active_monitor()
            assert monitor is not None, "no monitor while Ray is not initialised yet"
            # Before ray.init() the monitor waits in Ray's post-init hooks, on no thread.
            assert not monitor.running and monitor.cycles == 0
            assert not host_points(reader)

            connect(head, runtime_env=runtime_env(otlp_endpoint=receiver.endpoint))
            found = wait_until(lambda: host_points(reader), RAY_WAIT_S, "the node's memory")
            assert {p.attributes["host.name"] for p in found} == {node["NodeManagerHostname"]}

            @ray.remote(num_cpus=0)
            def task() -> int:
                import os

                import rlmetrics

                handle = rlmetrics.start(exporters=["otlp"])
                rlmetrics.Logger(backends={}).log_metrics({"reward": 1.0}, step=1, prefix="train")
                handle.shutdown(timeout_s=10)
                return os.getpid()

            pid = ray.get(task.remote(), timeout=RAY_WAIT_S)

        def exported(r: OtlpReceiver) -> list[dict[str, Any]]:
            return [res for res, names in r.resources() if "rl.reward.mean" in names]

        (resource,) = receiver.wait_for(exported, WAIT_S, "the task's export")
    finally:
        receiver.close()
    assert resource["rlmetrics.run.id"] == "run-job" and resource["service.name"] == "grpo"
    assert resource["process.pid"] == pid and resource["ray.node.id"] == node["NodeID"]
    assert "rl.worker_group" not in resource


_LAZY_DRIVER = """
import sys, threading, time
import rlmetrics
from rlmetrics_ray import active_monitor, configure, loopback_metrics_url
from rlmetrics.testing import in_memory_telemetry

def monitor_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("rlmetrics-ray")]

configure(resolver=loopback_metrics_url, interval_s=0.5)
with in_memory_telemetry():
    monitor = active_monitor()
    waiting = monitor is not None and not monitor.running
    print("started", waiting, monitor_threads(), "ray" in sys.modules)
    import ray
    print("imported", monitor.running, monitor_threads())
    ray.init(address=sys.argv[1], log_to_driver=False)
    print("connected", monitor.wait_for_cycles(1, 60.0), monitor_threads())
    ray.shutdown()
"""


def test_a_driver_starts_the_monitor_thread_only_when_it_reaches_ray(head: RayHead) -> None:
    # Ray imported after rlmetrics.start() (the import hook) and connected later (Ray's own
    # post-init hook): no thread until ray.init(), then the monitor cycles.
    result = subprocess.run(
        [sys.executable, "-c", _LAZY_DRIVER, head.address],
        capture_output=True,
        text=True,
        timeout=RAY_WAIT_S,
        env={**os.environ, **RAY_ENV},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        "started True [] False",
        "imported False []",
        "connected True ['rlmetrics-ray-host-memory']",
    ]
