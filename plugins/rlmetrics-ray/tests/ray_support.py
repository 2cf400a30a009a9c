"""Test support for rlmetrics-ray: Ray 2.60's real node exposition and ``ray.nodes()`` entry
(captured by ``fixtures/capture_ray.py``) and readings derived from them, HTTP servers on
127.0.0.1 that serve them (answering, failing, holding or never answering), and an OTLP gRPC
receiver on 127.0.0.1.

A module of its own (not conftest.py) so test modules import it by a name no other test
folder uses. Every server binds 127.0.0.1; every wait is bounded.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlmetrics import testing

__all__ = [
    "EXPOSITION",
    "FIXTURES",
    "HOLD_BOUND_S",
    "NODE_FIXTURE",
    "PLACEMENT_GROUP_TABLE",
    "WAIT_S",
    "Cluster",
    "ExpositionServer",
    "dead_port",
    "node_info",
    "render_exposition",
    "render_gpus",
    "wait_until",
]

FIXTURES = Path(__file__).parent / "fixtures"
RAY_VERSION = "2.60.0"
EXPOSITION = (FIXTURES / f"ray-{RAY_VERSION}-node-metrics.txt").read_text()
NODE_FIXTURE: dict[str, Any] = json.loads((FIXTURES / f"ray-{RAY_VERSION}-nodes.json").read_text())[
    0
]
PLACEMENT_GROUP_TABLE: dict[str, Any] = json.loads(
    (FIXTURES / f"ray-{RAY_VERSION}-placement-group-table.json").read_text()
)

#: Upper bound for anything that should happen within a few cycles.
WAIT_S = 20.0
#: A held response is released at teardown, or after this long at the latest.
HOLD_BOUND_S = 30.0

_MEMORY_FAMILIES = (
    "ray_node_mem_used_host",
    "ray_node_mem_total_host",
    "ray_node_mem_used",
    "ray_node_mem_total",
)


def wait_until(predicate: Callable[[], Any], timeout_s: float = WAIT_S, what: str = "") -> Any:
    """:func:`rlmetrics.testing.wait_until` with these tests' bound."""
    return testing.wait_until(predicate, timeout_s, what)


# -- readings derived from the fixtures -----------------------------------------------------------


def render_exposition(
    used: float | None = None,
    total: float | None = None,
    used_host: float | None = None,
    total_host: float | None = None,
    *,
    ip: str | None = None,
    text: str = EXPOSITION,
) -> str:
    """Ray's real exposition with the value of each memory family replaced, or the family
    removed (HELP, TYPE and samples) when its value is None. ``ip`` rewrites the ``ip``
    label of the memory samples. Every other family stays as Ray served it."""
    values = {
        "ray_node_mem_used": used,
        "ray_node_mem_total": total,
        "ray_node_mem_used_host": used_host,
        "ray_node_mem_total_host": total_host,
    }
    out: list[str] = []
    for line in text.splitlines():
        family = _memory_family(line)
        if family is None:
            out.append(line)
            continue
        value = values[family]
        if value is None:
            continue
        if line.startswith("#"):
            out.append(line)
            continue
        labels, _, _old = line.rpartition(" ")
        if ip is not None:
            labels = re.sub(r'ip="[^"]*"', f'ip="{ip}"', labels)
        out.append(f"{labels} {float(value)!r}")
    return "\n".join(out) + "\n"


def _memory_family(line: str) -> str | None:
    name = line
    for comment in ("# HELP ", "# TYPE "):
        if line.startswith(comment):
            name = line[len(comment) :]
    for family in _MEMORY_FAMILIES:
        if name.startswith(family) and name[len(family) : len(family) + 1] in ("{", " "):
            return family
    return None


#: Ray 2.60's GPU families (``reporter_agent.py``: declared in bytes and percentage, filled
#: with NVML's percent and MiB), each sample labelled with the node's labels plus the GPU's.
_GPU_FAMILIES = (
    ("ray_node_gpus_available", "Total GPUs available on a ray node"),
    ("ray_node_gpus_utilization", "Total GPUs usage on a ray node"),
    ("ray_node_gram_used", "Total GPU RAM usage on a ray node"),
    ("ray_node_gram_available", "Total GPU RAM available on a ray node"),
)
_NODE_LABELS = re.search(r"^ray_node_mem_used\{([^}]*)\}", EXPOSITION, re.M)
assert _NODE_LABELS is not None, "the fixture lost its ray_node_mem_used sample"


def render_gpus(
    gpus: list[tuple[int, float, float, float]],
    *,
    model: str = "NVIDIA H100 80GB HBM3",
    ip: str = "127.0.0.1",
    text: str = EXPOSITION,
) -> str:
    """``text`` (Ray's real exposition) with the GPU families a raylet on a GPU machine adds:
    one ``(index, utilisation %, used MiB, available MiB)`` per GPU, labelled as Ray 2.60
    labels them (the node's labels of the fixture's own samples, then ``GpuDeviceName``,
    ``GpuIndex`` and ``GpuUuid``, in the exporter's sorted order)."""
    assert _NODE_LABELS is not None
    node = dict(re.findall(r'(\w+)="([^"]*)"', _NODE_LABELS.group(1)))
    node["ip"] = ip
    lines = []
    for family, help_text in _GPU_FAMILIES:
        lines += [f"# HELP {family} {help_text}", f"# TYPE {family} gauge"]
        for index, utilization, used, available in gpus:
            labels = {
                **node,
                "GpuDeviceName": model,
                "GpuIndex": str(index),
                "GpuUuid": f"GPU-{index:08x}-1c80-48d5-8719-b44f240b8d88",
            }
            value = {
                "ray_node_gpus_available": 1.0,
                "ray_node_gpus_utilization": utilization,
                "ray_node_gram_used": used,
                "ray_node_gram_available": available,
            }[family]
            rendered = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            lines.append(f"{family}{{{rendered}}} {float(value)!r}")
    return text + "\n".join(lines) + "\n"


def node_info(
    node_id: str,
    hostname: str,
    metrics_port: int | None,
    *,
    address: str = "127.0.0.1",
    alive: bool = True,
) -> dict[str, Any]:
    """An entry of ``ray.nodes()``: the captured one with its identity replaced."""
    info = copy.deepcopy(NODE_FIXTURE)
    info.update(
        NodeID=node_id,
        NodeManagerHostname=hostname,
        NodeManagerAddress=address,
        NodeName=address,
        MetricsExportPort=metrics_port,
        Alive=alive,
        alive=alive,
    )
    return info


class Cluster:
    """The node list a monitor reads: ``ray.nodes()`` entries the test edits between cycles."""

    def __init__(self) -> None:
        self.infos: list[dict[str, Any]] = []

    def add(self, node_id: str, hostname: str, port: int | None) -> dict[str, Any]:
        info = node_info(node_id, hostname, port)
        self.infos.append(info)
        return info

    def __call__(self) -> list[dict[str, Any]]:
        return list(self.infos)


def dead_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- HTTP servers on 127.0.0.1 --------------------------------------------------------------------


class ExpositionServer(testing.ExpositionServer):
    """An HTTP server on 127.0.0.1 answering ``/metrics`` with ``text``.

    ``mode``: ``"ok"`` answers; ``"error"`` answers HTTP 500; ``"hold"`` accepts the request
    and answers only when :meth:`release` is called (or after :data:`HOLD_BOUND_S`), like a
    node whose agent is stuck. ``requests`` counts the requests received and ``arrived`` is
    set by each one.
    """

    def __init__(self, text: str = EXPOSITION, mode: str = "ok") -> None:
        self.text = text
        self.mode = mode
        self.requests = 0
        self.arrived = threading.Event()
        self._released = threading.Event()
        self._lock = threading.Lock()
        super().__init__(self._answer)

    def _answer(self) -> str:
        with self._lock:
            self.requests += 1
            mode, text = self.mode, self.text
        self.arrived.set()
        if mode == "hold":
            self._released.wait(HOLD_BOUND_S)
        if mode == "error":
            raise RuntimeError("agent failed")  # the server answers HTTP 500
        return text

    def set(self, text: str | None = None, mode: str | None = None) -> None:
        with self._lock:
            if text is not None:
                self.text = text
            if mode is not None:
                self.mode = mode
                if mode == "hold":
                    self._released.clear()
                    self.arrived.clear()

    def release(self) -> None:
        self._released.set()

    @property
    def holding(self) -> bool:
        """Whether a held request is still waiting for :meth:`release`."""
        return self.mode == "hold" and not self._released.is_set()

    def close(self) -> None:
        self.release()
        super().close()
