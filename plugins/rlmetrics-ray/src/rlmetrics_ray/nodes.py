"""Ray nodes, the hosts they run on, and where each host's metrics endpoint is.

``ray.nodes()`` lists raylets, not machines: a local multi-node cluster (or several raylets
packed on one big machine) has several nodes on one host, each publishing the same
whole-host memory on its own endpoint. The monitor therefore groups nodes by host name and
scrapes one endpoint per host, so there is exactly one point per host and ``sum by
(host.name)`` never counts a machine twice.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

__all__ = [
    "Host",
    "NodeSource",
    "RayNode",
    "Resolver",
    "alive_nodes",
    "group_by_host",
    "loopback_metrics_url",
    "metrics_url",
    "no_nodes",
    "ray_nodes",
]


@attrs.frozen
class RayNode:
    """One raylet, from an entry of ``ray.nodes()``."""

    node_id: str
    address: str  # NodeManagerAddress
    hostname: str  # NodeManagerHostname ("" when Ray resolved none)
    metrics_port: int | None  # MetricsExportPort

    @property
    def host_name(self) -> str:
        """``host.name`` of this node's points: Ray's hostname, else its address."""
        return self.hostname or self.address

    @classmethod
    def from_ray(cls, info: Mapping[str, Any]) -> RayNode | None:
        """The node an entry of ``ray.nodes()`` describes; None for a dead node or an entry
        without an id or an address."""
        if not (info.get("Alive") or info.get("alive")):
            return None
        node_id = info.get("NodeID")
        address = info.get("NodeManagerAddress")
        if not isinstance(node_id, str) or not node_id:
            return None
        if not isinstance(address, str) or not address:
            return None
        hostname = info.get("NodeManagerHostname")
        port = info.get("MetricsExportPort")
        valid_port = isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536
        return cls(
            node_id=node_id,
            address=address,
            hostname=hostname if isinstance(hostname, str) else "",
            metrics_port=port if valid_port else None,
        )


@attrs.frozen
class Host:
    """One machine: the alive nodes whose host name is ``name``, sorted by node id."""

    name: str
    nodes: tuple[RayNode, ...]

    @property
    def target(self) -> RayNode:
        """The node whose endpoint is scraped for this host: the first one that has a metrics
        port (by node id, so the choice is stable from cycle to cycle)."""
        for node in self.nodes:
            if node.metrics_port is not None:
                return node
        return self.nodes[0]


#: Turns a node into the URL of its metrics endpoint, or None to leave the node's host out
#: of this cycle. The hook for clusters whose advertised addresses are not reachable as-is
#: from the driver (and for tests, which must scrape on 127.0.0.1).
Resolver = Callable[[RayNode], str | None]

#: Returns the entries of ``ray.nodes()`` (or the same shape from elsewhere).
NodeSource = Callable[[], Iterable[Mapping[str, Any]]]


def metrics_url(node: RayNode) -> str | None:
    """The default resolver: ``http://<NodeManagerAddress>:<MetricsExportPort>/metrics``."""
    if node.metrics_port is None:
        return None
    host = f"[{node.address}]" if ":" in node.address else node.address
    return f"http://{host}:{node.metrics_port}/metrics"


def loopback_metrics_url(node: RayNode) -> str | None:
    """A resolver for a cluster that lives on one machine: every node's endpoint on
    127.0.0.1, whatever address Ray advertises for it."""
    if node.metrics_port is None:
        return None
    return f"http://127.0.0.1:{node.metrics_port}/metrics"


def alive_nodes(infos: Iterable[Mapping[str, Any]]) -> list[RayNode]:
    """The alive nodes among entries of ``ray.nodes()``, in order, each id once."""
    seen: set[str] = set()
    nodes: list[RayNode] = []
    for info in infos:
        node = RayNode.from_ray(info) if isinstance(info, Mapping) else None
        if node is not None and node.node_id not in seen:
            seen.add(node.node_id)
            nodes.append(node)
    return nodes


def group_by_host(nodes: Iterable[RayNode]) -> list[Host]:
    """One :class:`Host` per distinct host name, sorted by name."""
    by_name: dict[str, list[RayNode]] = {}
    for node in nodes:
        by_name.setdefault(node.host_name, []).append(node)
    return [
        Host(name, tuple(sorted(members, key=lambda node: node.node_id)))
        for name, members in sorted(by_name.items())
    ]


def no_nodes() -> Sequence[Mapping[str, Any]]:
    """The node source of a process without Ray: none, ever (its monitor reads this
    machine's GPUs only)."""
    return ()


def ray_nodes() -> Sequence[Mapping[str, Any]]:
    """``ray.nodes()`` of the cluster this process is connected to; nothing while Ray is not
    initialised (or not even imported: the plugin never imports Ray itself)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return []
    return list(ray.nodes())
