"""The ``ray_host_memory`` family: every Ray host's memory as ``rl.host.memory.*``.

Both series are observable gauges over the snapshot of the process's
:class:`~rlmetrics_ray.monitor.HostMemoryMonitor`, which ``telemetry_started`` starts on the
driver and ``telemetry_stopping`` stops. Nothing records them: an export reads the latest
snapshot, so a host whose label changed reports only the new label (a sum by ``host.name``
never counts it twice, on SDK 1.44 and 1.45 alike) and a host that failed its last scrape
has no point (a gap, not its last value).

- ``host.name``: Ray's ``NodeManagerHostname``, else the node's address; one point per host
  per cycle, however many raylets share it.
- ``rl.worker_groups``: the worker groups resident on the host, sorted and comma-joined, or
  ``none``. A descriptor to pick hosts with, never to aggregate on: the value is the whole
  host's memory (object store, raylet and driver included), shared by every group on it.
- ``rl.host.memory.source``: ``host`` when the figures are Ray's ``ray_node_mem_*_host``
  series (the machine's), ``cgroup`` when they are the cgroup-aware ``ray_node_mem_used`` /
  ``ray_node_mem_total`` (inside a container: the container's limit and usage).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from collections.abc import Sequence
from typing import Any

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec, resets_process_state
from rlmetrics.spec import MAX
from rlmetrics.variables import Variable

from .config import (
    ENABLED_ENV,
    GPUS_ENV,
    INTERVAL_ENV,
    TIMEOUT_ENV,
    _set_active,
    active_monitor,
    seconds_problem,
    settings,
    switch_problem,
)
from .election import HostElection
from .exposition import SOURCES
from .monitor import (
    HOST_NAME_ATTR,
    SOURCE_ATTR,
    WORKER_GROUPS_ATTR,
    HostMemoryMonitor,
    Observation,
)
from .nodes import NodeSource, no_nodes, ray_nodes
from .nvml import NvmlGpus, no_nvidia_driver
from .ray_init import on_ray_init, ray_is_initialized

__all__ = [
    "GROUP",
    "MAX_HOSTS",
    "TOTAL",
    "USED",
    "in_ray_worker",
    "observe_total",
    "observe_used",
    "register_variables",
    "telemetry_started",
    "telemetry_stopping",
]

logger = logging.getLogger("rlmetrics")

GROUP = "rl.host.memory"
USED = "rl.host.memory.used"
TOTAL = "rl.host.memory.total"
#: Hosts one collection may report; one attribute set per host.
MAX_HOSTS = 4096

_ATTRIBUTES = {HOST_NAME_ATTR: OPEN, WORKER_GROUPS_ATTR: OPEN, SOURCE_ATTR: SOURCES}

rlmetrics.declare(
    GROUP,
    [
        MetricSpec(
            USED,
            Kind.OBSERVABLE_GAUGE,
            unit="By",
            description="Memory in use on a Ray host, from its raylet's metrics endpoint",
            attributes=_ATTRIBUTES,
            max_series=MAX_HOSTS,
            callback=lambda: observe_used(),
            reduce=MAX,
        ),
        MetricSpec(
            TOTAL,
            Kind.OBSERVABLE_GAUGE,
            unit="By",
            description="Total memory of a Ray host, from its raylet's metrics endpoint",
            attributes=_ATTRIBUTES,
            max_series=MAX_HOSTS,
            callback=lambda: observe_total(),
            reduce=MAX,
        ),
    ],
    on_use=True,
)


def observe_used() -> Sequence[Observation]:
    """The ``rl.host.memory.used`` callback: the running monitor's latest snapshot."""
    monitor = active_monitor()
    return () if monitor is None else monitor.used()


def observe_total() -> Sequence[Observation]:
    """The ``rl.host.memory.total`` callback: the running monitor's latest snapshot."""
    monitor = active_monitor()
    return () if monitor is None else monitor.total()


def in_ray_worker() -> bool:
    """Whether this process is a Ray worker (connected, and not as a driver). The plugin
    never imports Ray: a process that has not imported it is no Ray worker."""
    ray: Any = sys.modules.get("ray")
    if ray is None:
        return False
    try:
        if not ray.is_initialized():
            return False
        mode = ray.get_runtime_context().worker.mode
    except Exception:
        return False
    return bool(mode != getattr(ray, "SCRIPT_MODE", 0))


def _activate() -> None:
    """The monitor found a host or a GPU: host memory and GPU series are exported from now on
    (a driver that never calls ray.init() runs none of their callbacks)."""
    rlmetrics.activate(GROUP)
    # rlmetrics_ray.gpu's group, named rather than imported: a process that left that module
    # out (a denied entry point) must not declare it here, after the registry froze.
    rlmetrics.activate("hw.gpu")


@rlmetrics.hookimpl
def register_variables(register: Any) -> None:
    """The monitor's variables (:mod:`rlmetrics_ray.config`), for ``rlmetrics config``."""
    register(Variable(ENABLED_ENV, switch_problem))
    register(Variable(GPUS_ENV, switch_problem))
    register(Variable(INTERVAL_ENV, seconds_problem))
    register(Variable(TIMEOUT_ENV, seconds_problem))


@rlmetrics.hookimpl
def telemetry_started(telemetry: rlmetrics.Telemetry) -> None:
    """Start the process's monitor on an exporting driver; it waits for ``ray.init()``. In a
    process without Ray it reads this machine's GPUs through NVML (unless GPUs are off)."""
    previous = _set_active(None)  # a stopped monitor of an earlier session reports no more
    if previous is not None:
        previous.stop()
    if not telemetry.exporting:
        return
    current = settings()
    if not current.enabled or in_ray_worker():  # a worker's host is the driver's to report
        return
    local = NvmlGpus() if current.gpus and current.nodes is None else None
    if local is not None and no_nvidia_driver():
        # Nothing for NVML to read: no monitor, or one that waits for ray.init(), rather than
        # a thread that finds out and idles (issue 37).
        logger.info("rlmetrics-ray: no NVIDIA driver on this machine; no hw.gpu.* series from NVML")
        local = None
    if current.nodes is None and importlib.util.find_spec("ray") is None:
        if local is None:
            return
        nodes: NodeSource = no_nodes  # no Ray here: this machine's GPUs, through NVML
    else:
        nodes = current.nodes if current.nodes is not None else ray_nodes
    monitor = HostMemoryMonitor(
        interval_s=current.interval_s,
        timeout_s=current.timeout_s,
        resolver=current.resolver,
        nodes=nodes,
        max_concurrency=current.max_concurrency,
        gpus=current.gpus,
        local_gpus=local,
        on_hosts=_activate,
        # One process per host and run reports the host, never one per rank.
        election=HostElection(telemetry.run_id, current.lock_dir) if current.elect else None,
    )
    _set_active(monitor)
    # A driver that never reaches Ray starts no thread: the monitor waits for ray.init() in
    # Ray's own post-init hooks. Given nodes, this machine's GPUs through NVML, or Ray already
    # connected: it has work now.
    reads_gpus = local is not None and importlib.util.find_spec("pynvml") is not None
    if nodes is not ray_nodes or reads_gpus or ray_is_initialized():
        monitor.start()
        return
    global _waiting
    _waiting = monitor
    if not on_ray_init(_start_waiting_monitor):
        _start_waiting_monitor()  # a Ray without post-init hooks: the thread waits instead


#: The monitor of the running session while it waits for ``ray.init()``.
_waiting: HostMemoryMonitor | None = None


@resets_process_state
def _forget_waiting_monitor() -> None:
    global _waiting
    _waiting = None


def _start_waiting_monitor() -> None:
    """Ray's post-init hook (one function, registered once however many sessions run)."""
    global _waiting
    monitor, _waiting = _waiting, None
    if monitor is not None:
        monitor.start()


@rlmetrics.hookimpl
def telemetry_stopping(telemetry: rlmetrics.Telemetry) -> None:
    """Stop the monitor's thread. Its last snapshot stays readable, so the final export
    still carries every host's latest reading (while it is fresh)."""
    global _waiting
    _waiting = None  # a ray.init() after the session starts nothing
    monitor = active_monitor()
    if monitor is not None:
        monitor.stop()
