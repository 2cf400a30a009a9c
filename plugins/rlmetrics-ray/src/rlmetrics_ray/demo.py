"""The host-memory and GPU part of ``rlmetrics demo``: two simulated Ray hosts whose raylet
metrics endpoints are real HTTP servers on 127.0.0.1, scraped by this distribution's real
:class:`~rlmetrics_ray.monitor.HostMemoryMonitor`.

Before telemetry starts the part serves each host's memory in the shape Ray 2.60 exposes it
(``ray_node_mem_used_host`` / ``ray_node_mem_total_host`` and the cgroup pair, labelled as a
raylet labels them) and each host's two GPUs as a raylet on a GPU machine does
(``ray_node_gpus_utilization`` in percent, ``ray_node_gram_used`` / ``_available`` in MiB, with
``GpuIndex`` and ``GpuDeviceName``), points the monitor at them (:func:`rlmetrics_ray.configure`
with a node source and a resolver; nothing is sent anywhere but 127.0.0.1) and places two
worker groups, so ``rl.worker_groups`` labels the worker host. Memory in use grows with the
run; the worker's GPUs are busy, the head's mostly idle; each step also runs one monitor cycle,
so a run shorter than the scrape interval is still exported.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import rlmetrics
from rlmetrics.demo.parts import DemoSettings, DemoStep
from rlmetrics.testing import ExpositionServer

from .config import active_monitor, configure
from .nodes import RayNode
from .worker_groups import register_worker_group_nodes, unregister_worker_group

__all__ = ["HostMemoryDemoPart", "SimulatedRaylet", "register_demo_parts"]

_GIB = 1024**3
_GPU_MIB = 81559.0  # an 80 GB H100 as NVML reports it, in MiB
_GPU_MODEL = "NVIDIA H100 80GB HBM3"
_WORKER_GROUPS = ("lm_policy", "vllm_policy")
# (host name, node id, head?, total bytes, bytes in use at the start)
_HOSTS = (
    ("demo-head", "a1" * 28, True, 64 * _GIB, 9 * _GIB),
    ("demo-worker-1", "b2" * 28, False, 256 * _GIB, 41 * _GIB),
)


class SimulatedRaylet:
    """One raylet's ``/metrics`` endpoint on 127.0.0.1, serving its host's memory."""

    def __init__(self, host_name: str, head: bool, total: int, used: int) -> None:
        self.host_name = host_name
        self.head = head
        self.total = total
        self.used = used
        # (utilisation %, MiB in use) of each of the host's two GPUs
        self.gpus: list[tuple[float, float]] = [(0.0, 0.0), (0.0, 0.0)]
        self._lock = threading.Lock()
        self.endpoint = ExpositionServer(self.exposition, name=f"demo-raylet-{host_name}")

    def set_used(self, used: int) -> None:
        with self._lock:
            self.used = min(used, self.total)

    def set_gpus(self, gpus: Sequence[tuple[float, float]]) -> None:
        with self._lock:
            self.gpus = [(min(100.0, max(0.0, u)), min(_GPU_MIB, max(0.0, m))) for u, m in gpus]

    def exposition(self) -> str:
        with self._lock:
            used, total, gpus = self.used, self.total, list(self.gpus)
        kind = "head" if self.head else "worker"
        labels = (
            f'IsHeadNode="{str(self.head).lower()}",RayNodeType="{kind}",'
            'SessionName="session_demo",Version="2.60.0",ip="127.0.0.1"'
        )
        lines = []
        for family, value in (
            ("ray_node_mem_used_host", used),
            ("ray_node_mem_total_host", total),
            ("ray_node_mem_used", used),
            ("ray_node_mem_total", total),
            ("ray_node_mem_available", total - used),
        ):
            lines += [
                f"# HELP {family} Memory of the node.",
                f"# TYPE {family} gauge",
                f"{family}{{{labels}}} {float(value)!r}",
            ]
        for family, column in (
            ("ray_node_gpus_utilization", 0),
            ("ray_node_gram_used", 1),
            ("ray_node_gram_available", 2),
        ):
            lines += [f"# HELP {family} GPUs of the node.", f"# TYPE {family} gauge"]
            for index, (busy, in_use) in enumerate(gpus):
                reading = (busy, in_use, _GPU_MIB - in_use)[column]
                gpu_labels = f'GpuDeviceName="{_GPU_MODEL}",GpuIndex="{index}",{labels}'
                lines.append(f"{family}{{{gpu_labels}}} {reading!r}")
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.endpoint.close()


class HostMemoryDemoPart:
    """Two raylets on 127.0.0.1 and the monitor pointed at them."""

    def __init__(self, settings: DemoSettings) -> None:
        self.steps = settings.steps
        self.raylets: dict[str, SimulatedRaylet] = {}
        self.node_ids: dict[str, str] = {}
        try:
            for host, node_id, head, total, used in _HOSTS:
                self.raylets[node_id] = SimulatedRaylet(host, head, total, used)
                self.node_ids[host] = node_id
            self._start = {node_id: r.used for node_id, r in self.raylets.items()}
            configure(
                enabled=True,
                nodes=self._nodes,
                resolver=self._resolve,
                interval_s=1.0,
                timeout_s=1.0,
            )
            worker = self.node_ids["demo-worker-1"]
            for group in _WORKER_GROUPS:
                register_worker_group_nodes(group, [worker])
        except BaseException:
            self.close()
            raise

    def _nodes(self) -> Sequence[Mapping[str, Any]]:
        return [
            {
                "NodeID": node_id,
                "Alive": True,
                "NodeManagerAddress": "127.0.0.1",
                "NodeManagerHostname": raylet.host_name,
                "MetricsExportPort": raylet.endpoint.port,
            }
            for node_id, raylet in self.raylets.items()
        ]

    def _resolve(self, node: RayNode) -> str | None:
        raylet = self.raylets.get(node.node_id)
        return None if raylet is None else raylet.endpoint.url

    def step(self, step: DemoStep) -> None:
        rng = step.random("host_memory")
        for node_id, raylet in self.raylets.items():
            growth = (0.35 if raylet.head else 0.55) * raylet.total * step.step / self.steps
            raylet.set_used(
                int(self._start[node_id] + growth + rng.uniform(-0.01, 0.01) * raylet.total)
            )
            # The worker's GPUs generate and train; the head's mostly wait. vLLM reserves
            # most of a GPU's memory for its KV cache up front.
            busy = 70.0 if not raylet.head else 8.0
            raylet.set_gpus(
                [
                    (busy + rng.uniform(-6, 25), 0.9 * _GPU_MIB * (0.5 + 0.5 * (gpu == 0)))
                    for gpu in range(2)
                ]
            )
        # Scrape now as well as on the monitor's own timer, so every step's memory is exported
        # even in a run shorter than one interval (refresh() replaces the snapshot, as a cycle).
        monitor = active_monitor()
        if monitor is not None:
            monitor.refresh()

    def close(self) -> None:
        for group in _WORKER_GROUPS:
            unregister_worker_group(group)
        configure(enabled=None, nodes=None, resolver=None, interval_s=None, timeout_s=None)
        for raylet in self.raylets.values():
            raylet.close()
        self.raylets.clear()


@rlmetrics.hookimpl
def register_demo_parts(
    register: Callable[[str, Callable[[DemoSettings], HostMemoryDemoPart]], None],
) -> None:
    register("host_memory", HostMemoryDemoPart)
