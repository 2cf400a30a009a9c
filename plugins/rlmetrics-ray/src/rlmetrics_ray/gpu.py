"""The ``ray_gpu`` family: every GPU of every Ray host as ``hw.gpu.*``, and NeMo-RL's rows.

OpenTelemetry's hardware conventions, one point per host and GPU, from the same cycle of the
process's :class:`~rlmetrics_ray.monitor.HostMemoryMonitor` that reads host memory (one scrape
of each raylet gives both), so the guarantees are the host memory ones: a GPU or host that
failed its last scrape, or disappeared, has no point (a gap, never its last value), and a
collection never waits on HTTP.

- ``hw.gpu.utilization`` (gauge, ``1``): utilisation as a fraction, Ray's percent / 100;
- ``hw.gpu.memory.usage`` and ``hw.gpu.memory.limit`` (up-down counters, ``By``): memory in
  use, and in all (used + available); Ray publishes MiB, converted to bytes;
- ``hw.gpu.memory.utilization`` (gauge, ``1``): the fraction of memory in use, usage / limit.

Attributes: ``host.name`` (as for host memory: the host the GPU is on, not the resource's
host), ``hw.id`` (the GPU's index on its host, which the conventions require) and ``hw.model``
(Ray's ``GpuDeviceName``); ``hw.gpu.utilization`` also carries ``hw.gpu.task`` = ``general``
(the conventions define utilisation per task; Ray's and NVML's rate is the general one). A
process without Ray reads its own GPUs through NVML instead
(:mod:`rlmetrics_ray.nvml`); no GPU or no NVML means no series and one INFO line.

For the trackers, :class:`GpuRows` logs the rows NeMo-RL's Ray GPU monitor logs
(``ray/node.<i>.gpu.<j>.util`` in percent, ``.mem_gb`` in GiB, ``ray/node.<i>.mem_gb`` and
``mem_total_gb``) on the intervals of its ``gpu_monitoring`` config.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec
from rlmetrics.events import WALL_TIME_KEY
from rlmetrics.known_keys import ANY, declare_keys
from rlmetrics.spec import MAX

from .config import active_monitor, settings
from .monitor import (
    GPU_INDEX_ATTR,
    GPU_MODEL_ATTR,
    GPU_TASK_ATTR,
    GPU_TASK_GENERAL,
    HOST_NAME_ATTR,
    HostMemoryMonitor,
    Observation,
    Snapshot,
)
from .nodes import ray_nodes
from .nvml import NvmlGpus
from .workers import WORKER_PREFIX

if TYPE_CHECKING:
    from rlmetrics.check import Exemption

__all__ = [
    "GROUP",
    "MAX_GPUS",
    "MEMORY_LIMIT",
    "MEMORY_USAGE",
    "MEMORY_UTILIZATION",
    "ROW_PREFIX",
    "STEP_KEY",
    "UTILIZATION",
    "GpuRows",
    "nemo_rl_rows",
]

GROUP = "hw.gpu"
UTILIZATION = "hw.gpu.utilization"
MEMORY_USAGE = "hw.gpu.memory.usage"
MEMORY_LIMIT = "hw.gpu.memory.limit"
MEMORY_UTILIZATION = "hw.gpu.memory.utilization"
#: GPUs one collection may report (eight a host for host memory's 4096 hosts).
MAX_GPUS = 8 * 4096

_ATTRIBUTES = {HOST_NAME_ATTR: OPEN, GPU_INDEX_ATTR: OPEN, GPU_MODEL_ATTR: OPEN}
_TASK_ATTRIBUTES = {**_ATTRIBUTES, GPU_TASK_ATTR: {GPU_TASK_GENERAL}}


def _observe(read: Callable[[HostMemoryMonitor], Sequence[Observation]]) -> Sequence[Observation]:
    monitor = active_monitor()
    return () if monitor is None else read(monitor)


rlmetrics.declare(
    GROUP,
    [
        MetricSpec(
            UTILIZATION,
            Kind.OBSERVABLE_GAUGE,
            unit="1",
            description="Fraction of time a GPU was busy (Ray's ray_node_gpus_utilization / 100, "
            "or NVML's)",
            attributes=_TASK_ATTRIBUTES,
            max_series=MAX_GPUS,
            callback=lambda: _observe(HostMemoryMonitor.gpu_utilization),
            reduce=MAX,
        ),
        MetricSpec(
            MEMORY_USAGE,
            Kind.OBSERVABLE_UP_DOWN_COUNTER,
            unit="By",
            description="GPU memory in use (Ray's ray_node_gram_used, MiB, in bytes; or NVML's)",
            attributes=_ATTRIBUTES,
            max_series=MAX_GPUS,
            callback=lambda: _observe(HostMemoryMonitor.gpu_memory_usage),
            reduce=MAX,
        ),
        MetricSpec(
            MEMORY_LIMIT,
            Kind.OBSERVABLE_UP_DOWN_COUNTER,
            unit="By",
            description="GPU memory in all (Ray's ray_node_gram_used + ray_node_gram_available, "
            "in bytes; or NVML's total)",
            attributes=_ATTRIBUTES,
            max_series=MAX_GPUS,
            callback=lambda: _observe(HostMemoryMonitor.gpu_memory_limit),
            reduce=MAX,
        ),
        MetricSpec(
            MEMORY_UTILIZATION,
            Kind.OBSERVABLE_GAUGE,
            unit="1",
            description="Fraction of a GPU's memory in use (hw.gpu.memory.usage / "
            "hw.gpu.memory.limit)",
            attributes=_ATTRIBUTES,
            max_series=MAX_GPUS,
            callback=lambda: _observe(HostMemoryMonitor.gpu_memory_utilization),
            reduce=MAX,
        ),
    ],
    on_use=True,
)


@rlmetrics.hookimpl
def register_check_exemptions(register: Callable[[Exemption], None]) -> None:
    from rlmetrics.check import Exemption  # only rlmetrics check needs it

    register(
        Exemption(
            "unbounded-attribute",
            {UTILIZATION, MEMORY_USAGE, MEMORY_LIMIT, MEMORY_UTILIZATION},
            "OpenTelemetry's hardware conventions require hw.id; here it is a GPU's index on "
            "its host (a handful of values), capped with the series at max_series",
            attribute=GPU_INDEX_ATTR,
        )
    )


# -- NeMo-RL's tracker rows --------------------------------------------------------------------

#: NeMo-RL logs its GPU rows under this prefix, on their own step axis ``ray/ray_step``.
ROW_PREFIX = "ray"
STEP_KEY = "ray_step"
# Rows for the trackers (the GPU series are recorded from the snapshot itself), and what each
# Ray Train worker reports under worker/<rank> (rlmetrics_ray.train, with all_workers): known
# keys, never a typo for Logger(unknown_keys=...).
declare_keys([ANY], prefixes=[ROW_PREFIX], backend_only=True, note="NeMo-RL's GPU rows")
declare_keys(
    [ANY], prefixes=[f"{WORKER_PREFIX}/*"], backend_only=True, note="each worker's own report"
)
declare_keys(
    ["count", "workers", "ranks", "error"],
    prefixes=["ray_train/failure"],  # rlmetrics_ray.train.FAILURE_PREFIX (imports Ray Train)
    backend_only=True,
    note="a Ray Train worker failure",
)
_GIB = 1024**3


def nemo_rl_rows(snapshot: Snapshot) -> dict[str, float]:
    """The rows NeMo-RL's ``RayGpuMonitorLogger`` writes for one cycle, from a snapshot:
    ``node.<i>.gpu.<j>.util`` (percent), ``node.<i>.gpu.<j>.mem_gb`` (GiB in use),
    ``node.<i>.mem_gb`` and ``node.<i>.mem_total_gb`` (the host's memory, GiB). ``i`` is the
    host's place among the cycle's hosts sorted by name (stable while the cluster is), ``j``
    the GPU's index on it; a value the snapshot lacks has no row."""
    index = {name: i for i, name in enumerate(snapshot.host_names)}
    rows: dict[str, float] = {}
    for host in snapshot.hosts:
        i = index.get(host.host_name)
        if i is None:
            continue
        if host.used is not None:
            rows[f"node.{i}.mem_gb"] = host.used / _GIB
        if host.total is not None:
            rows[f"node.{i}.mem_total_gb"] = host.total / _GIB
    for host_gpu in snapshot.gpus:
        i = index.get(host_gpu.host_name)
        if i is None:  # this machine's own GPUs (no Ray): the one node
            i = len(index)
            index[host_gpu.host_name] = i
        gpu = host_gpu.gpu
        if gpu.utilization_pct is not None:
            rows[f"node.{i}.gpu.{gpu.index}.util"] = gpu.utilization_pct
        if gpu.used_bytes is not None:
            rows[f"node.{i}.gpu.{gpu.index}.mem_gb"] = gpu.used_bytes / _GIB
    return rows


class GpuRows:
    """Log NeMo-RL's GPU rows to a :class:`rlmetrics.Logger`, as its ``RayGpuMonitorLogger``
    does: every ``collection_interval`` seconds a reading (the telemetry monitor's latest
    snapshot while it is fresh, else a scrape of its own), every ``flush_interval`` seconds
    the readings since the last flush, each logged under prefix ``ray`` with ``ray_step`` =
    whole seconds since start (the step too) and ``telemetry/wall_time_seconds``, so a
    tracker plots them on their own axis rather than the trainer's.

    ``GpuRows.from_config(logger, cfg["logger"]["gpu_monitoring"])`` takes NeMo-RL's config
    (``collection_interval``, ``flush_interval``). Start and stop it (or use it as a context
    manager); ``stop()`` flushes what is buffered. Nothing it does raises into the caller.
    """

    def __init__(
        self,
        logger: rlmetrics.Logger,
        collection_interval: float = 10.0,
        flush_interval: float = 10.0,
        *,
        monitor: HostMemoryMonitor | None = None,
    ) -> None:
        for name, value in (
            ("collection_interval", collection_interval),
            ("flush_interval", flush_interval),
        ):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (math.isfinite(value) and value > 0)
            ):
                raise ValueError(f"GpuRows: {name} must be a positive number of seconds")
        self.logger = logger
        self.collection_interval = float(collection_interval)
        self.flush_interval = float(flush_interval)
        self._own_monitor = monitor
        self._buffer: list[tuple[int, dict[str, float]]] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()

    @classmethod
    def from_config(cls, logger: rlmetrics.Logger, config: Mapping[str, Any]) -> GpuRows:
        """From NeMo-RL's ``logger.gpu_monitoring`` section."""
        return cls(logger, config["collection_interval"], config["flush_interval"])

    def collect(self) -> dict[str, float]:
        """Take one reading into the buffer now; returns its rows (empty: none buffered)."""
        snapshot = self._snapshot()
        rows = {} if snapshot is None else nemo_rl_rows(snapshot)
        if rows:
            step = int(time.monotonic() - self._started)
            with self._lock:
                self._buffer.append((step, rows))
        return rows

    def flush(self) -> None:
        """Log every buffered reading, oldest first."""
        with self._lock:
            buffered, self._buffer = self._buffer, []
        for step, rows in buffered:
            wall = time.time()
            self.logger.log_metrics(
                {**rows, STEP_KEY: step, WALL_TIME_KEY: wall}, step=step, prefix=ROW_PREFIX
            )

    def _snapshot(self) -> Snapshot | None:
        try:
            running = active_monitor()
            fresh = running.fresh_snapshot() if running is not None else None
            if fresh is not None:
                return fresh
            if self._own_monitor is None:
                current = settings()
                local = NvmlGpus() if current.gpus and current.nodes is None else None
                self._own_monitor = HostMemoryMonitor(
                    timeout_s=current.timeout_s,
                    resolver=current.resolver,
                    nodes=current.nodes if current.nodes is not None else ray_nodes,
                    gpus=current.gpus,
                    local_gpus=local,  # no Ray node listed: this machine's GPUs
                )
            return self._own_monitor.refresh()
        except Exception:
            rlmetrics.warn_once(
                "ray:gpu-rows",
                "rlmetrics-ray: a GPU row reading failed; that interval has no rows",
            )
            return None

    # -- the thread --------------------------------------------------------------------------

    def start(self) -> GpuRows:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return self
            self._stopping = threading.Event()
            self._started = time.monotonic()
            self._thread = threading.Thread(
                target=self._run, args=(self._stopping,), name="rlmetrics-ray-gpu-rows", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread and flush what is buffered."""
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        if self._own_monitor is not None:
            self._own_monitor.stop(0)  # releases NVML when it read this machine's GPUs
        self.flush()

    def __enter__(self) -> GpuRows:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _run(self, stopping: threading.Event) -> None:
        last_flush = time.monotonic()
        while not stopping.is_set():
            started = time.monotonic()
            self.collect()
            if time.monotonic() - last_flush >= self.flush_interval:
                self.flush()
                last_flush = time.monotonic()
            stopping.wait(max(0.0, self.collection_interval - (time.monotonic() - started)))
