"""Which worker groups live on which Ray node: the ``rl.worker_groups`` label.

A worker group registers its placement group(s) when it is created; the bundles are resolved
to nodes from Ray's placement group table on the monitor's thread, once per cycle, so no
worker is ever asked anything and a group that is rescheduled is followed. Until a bundle is
placed it resolves to no node, which is why a host reads ``none`` until its groups are built.

The registry is an ordinary object in this process. A worker group built inside another
process (a Ray actor that creates its own placement group, such as a reward-model
environment building its policy) registers in that process's registry, which the driver's
monitor never sees: hosts that run only such groups are labelled ``none``. The memory figures
are unaffected; only the label is incomplete. Sharing the registry would take a named actor
and a round trip per sample, which a descriptive label is not worth.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rlmetrics import resets_process_state, warn_once

__all__ = [
    "NONE",
    "WORKER_GROUPS",
    "WorkerGroups",
    "label",
    "nodes_of",
    "register_worker_group",
    "register_worker_group_nodes",
    "unregister_worker_group",
]

#: The label of a host that runs no registered worker group.
NONE = "none"
_SEPARATOR = ","

TableReader = Callable[[Any], Mapping[str, Any]]


def label(names: Iterable[str]) -> str:
    """``rl.worker_groups``: the names sorted and comma-joined, or ``none``."""
    unique = sorted(set(names))
    return _SEPARATOR.join(unique) if unique else NONE


def nodes_of(table: Mapping[str, Any]) -> frozenset[str]:
    """The node ids holding a placement group's placed bundles, from one entry of
    ``ray.util.placement_group_table()``. A removed group holds none."""
    if table.get("state") == "REMOVED":
        return frozenset()
    placed = table.get("bundles_to_node_id")
    if not isinstance(placed, Mapping):
        return frozenset()
    return frozenset(node for node in placed.values() if isinstance(node, str) and node)


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a worker group name must be a non-empty string, got {name!r}")
    if _SEPARATOR in name:
        raise ValueError(
            f"worker group name {name!r} contains {_SEPARATOR!r}, which separates names in "
            "rl.worker_groups; rename the group"
        )
    if name == NONE:
        raise ValueError(f"{NONE!r} is the label of a host without worker groups; rename the group")
    return name


def _ray_placement_group_table(placement_group: Any) -> Mapping[str, Any]:
    table: Mapping[str, Any] = importlib.import_module("ray.util").placement_group_table(
        placement_group
    )
    return table


class WorkerGroups:
    """Worker group name → the nodes it runs on, for one process."""

    def __init__(self, read_table: TableReader = _ray_placement_group_table) -> None:
        self._read_table = read_table
        self._lock = threading.Lock()
        self._placement_groups: dict[str, tuple[Any, ...]] = {}
        self._fixed: dict[str, frozenset[str]] = {}
        # Last resolution of each placement-group registration, kept when a table read fails.
        self._resolved: dict[str, frozenset[str]] = {}

    def register(self, name: str, placement_group: Any) -> None:
        """Register a worker group by its placement group (or a list of them, one per node
        as some frameworks build them). Cheap: nothing is read until the monitor resolves it.
        Registering a name again replaces what it was registered with."""
        name = _check_name(name)
        groups = (
            tuple(placement_group)
            if isinstance(placement_group, (list, tuple))
            else (placement_group,)
        )
        if not groups:
            raise ValueError(f"worker group {name!r}: no placement group given")
        with self._lock:
            self._fixed.pop(name, None)
            self._resolved.pop(name, None)
            self._placement_groups[name] = groups

    def register_nodes(self, name: str, node_ids: Iterable[str]) -> None:
        """Register a worker group by the Ray node ids it runs on (for groups placed without
        a placement group)."""
        name = _check_name(name)
        nodes = frozenset(node_ids)
        if not all(isinstance(node, str) and node for node in nodes):
            raise ValueError(f"worker group {name!r}: node ids must be non-empty strings")
        with self._lock:
            self._placement_groups.pop(name, None)
            self._resolved.pop(name, None)
            self._fixed[name] = nodes

    def unregister(self, name: str) -> None:
        """Forget a worker group (it shut down); unknown names are ignored."""
        with self._lock:
            self._placement_groups.pop(name, None)
            self._fixed.pop(name, None)
            self._resolved.pop(name, None)

    def clear(self) -> None:
        with self._lock:
            self._placement_groups.clear()
            self._fixed.clear()
            self._resolved.clear()

    def names(self) -> list[str]:
        with self._lock:
            return sorted({*self._placement_groups, *self._fixed})

    def by_node(self) -> dict[str, frozenset[str]]:
        """Node id → names of the worker groups on it. Reads the placement group table of
        every group registered by placement group (a GCS call each): call it from the
        monitor's thread, never from a metrics callback."""
        with self._lock:
            pending = dict(self._placement_groups)
            fixed = dict(self._fixed)
        resolved: dict[str, frozenset[str]] = {}
        for name, placement_groups in pending.items():
            nodes = self._resolve(name, placement_groups)
            if nodes is not None:
                resolved[name] = nodes
        with self._lock:
            for name, nodes in resolved.items():
                if self._placement_groups.get(name) is pending[name]:
                    self._resolved[name] = nodes
            current = {
                name: self._resolved.get(name, frozenset()) for name in self._placement_groups
            }
        current.update(fixed)
        out: dict[str, set[str]] = {}
        for name, nodes in current.items():
            for node in nodes:
                out.setdefault(node, set()).add(name)
        return {node: frozenset(names) for node, names in out.items()}

    def _resolve(self, name: str, placement_groups: tuple[Any, ...]) -> frozenset[str] | None:
        nodes: set[str] = set()
        for placement_group in placement_groups:
            try:
                nodes |= nodes_of(self._read_table(placement_group))
            except Exception:
                warn_once(
                    "ray:worker-groups:table",
                    f"rlmetrics-ray: reading the placement group table of worker group "
                    f"{name!r} failed; its hosts keep the label they had",
                )
                return None
        return frozenset(nodes)


#: The process's registry, read by the host memory monitor.
WORKER_GROUPS = WorkerGroups()
resets_process_state(WORKER_GROUPS.clear)


def register_worker_group(name: str, placement_group: Any) -> None:
    """Register a worker group by its placement group(s) in the process's registry: the
    hosts its bundles are placed on report ``name`` in ``rl.worker_groups``."""
    WORKER_GROUPS.register(name, placement_group)


def register_worker_group_nodes(name: str, node_ids: Iterable[str]) -> None:
    """Register a worker group by the node ids it runs on, in the process's registry."""
    WORKER_GROUPS.register_nodes(name, node_ids)


def unregister_worker_group(name: str) -> None:
    """Remove a worker group from the process's registry (it shut down)."""
    WORKER_GROUPS.unregister(name)
