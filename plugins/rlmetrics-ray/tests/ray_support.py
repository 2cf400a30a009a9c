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
    "ExpositionServer",
    "dead_port",
    "node_info",
    "render_exposition",
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
