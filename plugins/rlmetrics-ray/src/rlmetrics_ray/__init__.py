"""rlmetrics on Ray: every host's memory (``rl.host.memory.*``) and one run across workers.

- The ``ray_host_memory`` family (:mod:`rlmetrics_ray.host_memory`, an entry point, so
  ``rlmetrics.start()`` loads it) starts a :class:`HostMemoryMonitor` on the exporting driver;
  :func:`configure` sets its interval, timeout, address resolver and node source.
- :func:`register_worker_group` labels hosts with the worker groups placed on them.
- :func:`runtime_env` carries the driver's run to Ray workers, whose own
  ``rlmetrics.start()`` then exports as part of it.
- ``Logger(ranks="ray")`` (:mod:`rlmetrics_ray.ranks`) reduces Ray actors' values on the
  driver; the monitor reports each host from one elected process (:mod:`rlmetrics_ray.election`).

Importing this package declares nothing and does not import Ray or the OpenTelemetry SDK.
"""

from __future__ import annotations

from .config import HostMemorySettings, active_monitor, configure, configured, settings
from .monitor import HostMemory, HostMemoryMonitor, Snapshot
from .nodes import RayNode, loopback_metrics_url, metrics_url
from .worker_groups import (
    WORKER_GROUPS,
    WorkerGroups,
    register_worker_group,
    register_worker_group_nodes,
    unregister_worker_group,
)
from .workers import runtime_env

__version__ = "0.2.0"

__all__ = [
    "WORKER_GROUPS",
    "HostMemory",
    "HostMemoryMonitor",
    "HostMemorySettings",
    "RayNode",
    "Snapshot",
    "WorkerGroups",
    "__version__",
    "active_monitor",
    "configure",
    "configured",
    "loopback_metrics_url",
    "metrics_url",
    "register_worker_group",
    "register_worker_group_nodes",
    "runtime_env",
    "settings",
    "unregister_worker_group",
]
