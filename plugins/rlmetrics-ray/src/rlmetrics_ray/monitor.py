"""HostMemoryMonitor: every host's memory and GPUs, scraped on a timer into a snapshot.

The monitor runs on its own thread. Once per interval it lists the alive nodes
(``ray.nodes()``), groups them by host, resolves every host's worker groups, scrapes one
metrics endpoint per host (all at once, each request bounded by ``timeout_s``) and then
**replaces** its snapshot wholesale. The metric callbacks only read the snapshot, so an
export never waits on HTTP, however slow or dead a node is. One scrape gives a host's memory
(``rl.host.memory.*``) and its GPUs (``hw.gpu.*``, :mod:`rlmetrics_ray.gpu`); when no Ray node
is listed (no Ray in this process) a ``local_gpus`` reader gives this machine's GPUs instead
(NVML, :mod:`rlmetrics_ray.nvml`).

Replacing rather than merging is what makes a failed or slow scrape a gap for that host
instead of a flat line at its last value, and what makes a host whose ``rl.worker_groups``
changed report only its new label from the next cycle on. A snapshot older than
``max_age_s`` (the monitor stalled: Ray's control plane hung, say) is not reported at all.

Scraping uses one event loop with aiohttp, not a thread per node: 256 nodes with a tenth of
them black-holed take one timeout, not one timeout per wave of a thread pool. aiohttp is
imported by the first cycle, not with the module: every process that uses rlmetrics imports
the plugin's family module, and most of them never scrape anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from rlmetrics import warn_once

from .exposition import (
    MEMORY_FAMILIES,
    SOURCES,
    MemoryReading,
    family_lines,
    memory_from_samples,
    read_samples,
)
from .gpu_readings import GPU_FAMILIES, GPU_PREFIXES, GpuReading, gpus_from_samples
from .nodes import (
    Host,
    NodeSource,
    Resolver,
    alive_nodes,
    group_by_host,
    metrics_url,
    no_nodes,
    ray_nodes,
)
from .worker_groups import WORKER_GROUPS, WorkerGroups, label

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "GPU_INDEX_ATTR",
    "GPU_MODEL_ATTR",
    "GPU_TASK_ATTR",
    "GPU_TASK_GENERAL",
    "HOST_NAME_ATTR",
    "MAX_EXPOSITION_BYTES",
    "SOURCE_ATTR",
    "WORKER_GROUPS_ATTR",
    "HostGpu",
    "HostMemory",
    "HostMemoryMonitor",
    "NodeReading",
    "Observation",
    "Snapshot",
    "build_snapshot",
]

HOST_NAME_ATTR = "host.name"
WORKER_GROUPS_ATTR = "rl.worker_groups"
SOURCE_ATTR = "rl.host.memory.source"
#: OpenTelemetry's hardware conventions: ``hw.id`` identifies a component within its host
#: (here the GPU's index), ``hw.model`` is its model name.
GPU_INDEX_ATTR = "hw.id"
GPU_MODEL_ATTR = "hw.model"
#: ``hw.gpu.utilization`` is the fraction of time spent in one task (``hw.gpu.task``:
#: ``general``, ``encoder``, ``decoder``); Ray and NVML's utilisation rate is the general one.
GPU_TASK_ATTR = "hw.gpu.task"
GPU_TASK_GENERAL = "general"

logger = logging.getLogger("rlmetrics")
_SCRAPED_FAMILIES = MEMORY_FAMILIES | GPU_FAMILIES
_SCRAPED_PREFIXES = ("ray_node_mem_", *GPU_PREFIXES)

#: A node's exposition is ~215 KB on Ray 2.60; anything past this is not a raylet's.
MAX_EXPOSITION_BYTES = 32 * 1024 * 1024
_HEADERS = {"Accept": "text/plain;version=0.0.4"}  # the classic text format Ray serves
_CHUNK = 256 * 1024

#: A value and its attribute set: a frozenset of (name, value) pairs, the same object for
#: the same host (or GPU) every cycle (see :func:`_attribute_set`).
Observation = tuple[float, frozenset[tuple[str, str | int]]]

#: Past this many distinct attribute sets (hosts come and go over a long run) the table
#: starts over; a set built again is only a slower check at the next collection.
_MAX_ATTRIBUTE_SETS = 16384
_attribute_sets: dict[frozenset[tuple[str, str | int]], frozenset[tuple[str, str | int]]] = {}


def _attribute_set(attributes: Mapping[str, str | int]) -> frozenset[tuple[str, str | int]]:
    """``attributes`` as the one frozenset this process uses for them. Built on the monitor's
    thread, so the collection's check of a thousand hosts finds each set by identity instead
    of building, hashing and comparing one per host under the SDK's collection lock."""
    built = frozenset(attributes.items())
    found = _attribute_sets.get(built)
    if found is None:
        if len(_attribute_sets) >= _MAX_ATTRIBUTE_SETS:
            _attribute_sets.clear()
        _attribute_sets[built] = found = built
    return found


@attrs.frozen
class HostMemory:
    """One host's reading in a snapshot."""

    host_name: str
    used: float | None
    total: float | None
    source: str
    worker_groups: str

    @property
    def attributes(self) -> dict[str, str]:
        return {
            HOST_NAME_ATTR: self.host_name,
            WORKER_GROUPS_ATTR: self.worker_groups,
            SOURCE_ATTR: self.source,
        }


@attrs.frozen
class HostGpu:
    """One GPU of one host in a snapshot."""

    host_name: str
    gpu: GpuReading

    @property
    def attributes(self) -> dict[str, str]:
        attributes = {HOST_NAME_ATTR: self.host_name, GPU_INDEX_ATTR: self.gpu.index}
        if self.gpu.model is not None:
            attributes[GPU_MODEL_ATTR] = self.gpu.model
        return attributes


@attrs.frozen
class NodeReading:
    """What one host's endpoint gave: its memory (None when it reports none) and its GPUs."""

    memory: MemoryReading | None
    gpus: tuple[GpuReading, ...] = ()


@attrs.frozen
class Snapshot:
    """What one cycle found. ``used``, ``total`` and the ``gpu_*`` tuples are the
    observations the callbacks return, built once per cycle so that a collection costs
    nothing but the lookup. ``host_names`` lists every host the cycle tried, sorted (a host
    that failed keeps its place, so a host's position is stable from cycle to cycle)."""

    hosts: tuple[HostMemory, ...] = ()
    failures: tuple[tuple[str, str], ...] = ()  # (host name, cause) of the hosts left out
    taken_at: float = -math.inf  # time.monotonic() at the end of the cycle
    used: tuple[Observation, ...] = ()
    total: tuple[Observation, ...] = ()
    gpus: tuple[HostGpu, ...] = ()
    host_names: tuple[str, ...] = ()
    gpu_utilization: tuple[Observation, ...] = ()
    gpu_memory_usage: tuple[Observation, ...] = ()
    gpu_memory_limit: tuple[Observation, ...] = ()
    gpu_memory_utilization: tuple[Observation, ...] = ()


def build_snapshot(
    hosts: Sequence[HostMemory],
    taken_at: float,
    failures: Sequence[tuple[str, str]] = (),
    gpus: Sequence[HostGpu] = (),
    host_names: Sequence[str] = (),
) -> Snapshot:
    """A snapshot of ``hosts`` and ``gpus`` with their observations (one per host or GPU and
    value present)."""
    used: list[Observation] = []
    total: list[Observation] = []
    for host in hosts:
        attributes = _attribute_set(host.attributes)
        if host.used is not None:
            used.append((host.used, attributes))
        if host.total is not None:
            total.append((host.total, attributes))
    utilization: list[Observation] = []
    usage: list[Observation] = []
    limit: list[Observation] = []
    memory_utilization: list[Observation] = []
    for host_gpu in gpus:
        attributes, gpu = _attribute_set(host_gpu.attributes), host_gpu.gpu
        if gpu.utilization is not None:
            task = _attribute_set({**host_gpu.attributes, GPU_TASK_ATTR: GPU_TASK_GENERAL})
            utilization.append((gpu.utilization, task))
        for out, value in (
            (usage, gpu.used_bytes),
            (limit, gpu.limit_bytes),
            (memory_utilization, gpu.memory_utilization),
        ):
            if value is not None:
                out.append((value, attributes))
    return Snapshot(
        hosts=tuple(hosts),
        failures=tuple(failures),
        taken_at=taken_at,
        used=tuple(used),
        total=tuple(total),
        gpus=tuple(gpus),
        host_names=tuple(sorted(set(host_names) | {h.host_name for h in hosts})),
        gpu_utilization=tuple(utilization),
        gpu_memory_usage=tuple(usage),
        gpu_memory_limit=tuple(limit),
        gpu_memory_utilization=tuple(memory_utilization),
    )


class _Failure(str):
    """Why a host was left out of a cycle (the warn-once cause)."""


class _ScrapeFailed(Exception):
    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


class HostMemoryMonitor:
    """Scrapes every Ray host's memory on its own thread; see the module docstring.

    :param interval_s: time from the start of one cycle to the start of the next.
    :param timeout_s: bound on each endpoint's whole request (connect, headers, body).
    :param resolver: node → metrics URL (default ``http://<address>:<port>/metrics``).
    :param nodes: returns the entries of ``ray.nodes()`` (default: this driver's cluster).
    :param worker_groups: the registry that labels hosts (default: the process's).
    :param max_concurrency: endpoints scraped at once; more wait for a free slot.
    :param max_age_s: a snapshot older than this is not reported (default: two intervals
        plus one timeout, so one slow cycle does not cost a collection).
    :param gpus: read each host's GPUs from its exposition too.
    :param local_gpus: reads this machine's GPUs (:class:`~rlmetrics_ray.nvml.NvmlGpus`); used
        in a cycle that lists no Ray node, so a process without Ray still reports its GPUs.
    :param on_hosts: called (on the monitor's thread) after each cycle that found a host or
        a GPU: how the families reading the monitor are activated only once there is one.
    :param election: whether this process is the one that reports its host now
        (:class:`~rlmetrics_ray.election.HostElection`), asked at the start of every cycle: a
        cycle it is not elected for scrapes nothing and reports nothing, so the host's series
        are exported by one process per host, and another takes over within one interval of
        the elected one's death. None: always.
    """

    def __init__(
        self,
        *,
        interval_s: float = 10.0,
        timeout_s: float = 5.0,
        resolver: Resolver = metrics_url,
        nodes: NodeSource = ray_nodes,
        worker_groups: WorkerGroups = WORKER_GROUPS,
        max_concurrency: int = 256,
        max_age_s: float | None = None,
        gpus: bool = True,
        local_gpus: Callable[[], Sequence[GpuReading]] | None = None,
        on_hosts: Callable[[], None] | None = None,
        election: Callable[[], bool] | None = None,
    ) -> None:
        for name, value in (("interval_s", interval_s), ("timeout_s", timeout_s)):
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(
                    f"HostMemoryMonitor: {name} must be a positive number of seconds, got {value!r}"
                )
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(
                f"HostMemoryMonitor: max_concurrency must be a positive int, got "
                f"{max_concurrency!r}"
            )
        if not callable(resolver) or not callable(nodes):
            raise TypeError("HostMemoryMonitor: resolver and nodes must be callables")
        self.interval_s = float(interval_s)
        self.timeout_s = float(timeout_s)
        self.resolver = resolver
        self.nodes = nodes
        self.worker_groups = worker_groups
        self.max_concurrency = max_concurrency
        self.max_age_s = (
            float(max_age_s) if max_age_s is not None else 2 * self.interval_s + self.timeout_s
        )
        self.gpus = gpus
        self.local_gpus = local_gpus
        self.on_hosts = on_hosts
        self.election = election
        #: Whether the last cycle was this process's to report (see ``election``).
        self.elected = election is None
        self._gpu_said = False
        self._snapshot = Snapshot()
        self._cycles = 0
        self._cond = threading.Condition()
        # One stop event per start(), so a thread that outlived stop()'s wait never resumes.
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._in_flight: set[tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = set()

    # -- what the callbacks read ------------------------------------------------------------

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def cycles(self) -> int:
        """Cycles completed so far (each replaced the snapshot)."""
        return self._cycles

    def used(self) -> Sequence[Observation]:
        """``rl.host.memory.used`` observations of the latest snapshot, if it is fresh."""
        snapshot = self._snapshot
        return snapshot.used if self._fresh(snapshot) else ()

    def total(self) -> Sequence[Observation]:
        """``rl.host.memory.total`` observations of the latest snapshot, if it is fresh."""
        snapshot = self._snapshot
        return snapshot.total if self._fresh(snapshot) else ()

    def gpu_utilization(self) -> Sequence[Observation]:
        """``hw.gpu.utilization`` observations of the latest snapshot, if it is fresh."""
        snapshot = self._snapshot
        return snapshot.gpu_utilization if self._fresh(snapshot) else ()

    def gpu_memory_usage(self) -> Sequence[Observation]:
        """``hw.gpu.memory.usage`` observations of the latest snapshot, if it is fresh."""
        snapshot = self._snapshot
        return snapshot.gpu_memory_usage if self._fresh(snapshot) else ()

    def gpu_memory_limit(self) -> Sequence[Observation]:
        """``hw.gpu.memory.limit`` observations of the latest snapshot, if it is fresh."""
        snapshot = self._snapshot
        return snapshot.gpu_memory_limit if self._fresh(snapshot) else ()

    def gpu_memory_utilization(self) -> Sequence[Observation]:
        """``hw.gpu.memory.utilization`` observations of the latest snapshot, if it is fresh."""
        snapshot = self._snapshot
        return snapshot.gpu_memory_utilization if self._fresh(snapshot) else ()

    def fresh_snapshot(self) -> Snapshot | None:
        """The latest snapshot while it is fresh, else None."""
        snapshot = self._snapshot
        return snapshot if self._fresh(snapshot) else None

    def _fresh(self, snapshot: Snapshot) -> bool:
        return time.monotonic() - snapshot.taken_at <= self.max_age_s

    # -- one cycle ---------------------------------------------------------------------------

    def refresh(self) -> Snapshot:
        """Run one cycle now, on the calling thread (which must not be running an event
        loop), replace the snapshot and return it. Never raises."""
        return self._cycle(None)

    def _cycle(self, stopping: threading.Event | None) -> Snapshot:
        if not self._elect():
            return self._replace(Snapshot())  # another process on this host reports it
        try:
            hosts = self._hosts()
            by_node = self._worker_groups_by_node()
            targets: list[tuple[Host, str]] = []
            failures: list[tuple[str, str]] = []
            for host in hosts:
                url = self._resolve(host)
                if url is None:
                    failures.append((host.name, "no endpoint"))
                else:
                    targets.append((host, url))
            outcomes = asyncio.run(self._scrape(targets, stopping)) if targets else []
        except asyncio.CancelledError:
            return self._snapshot  # stopped mid-cycle: keep what there was, stop() follows
        except Exception:
            warn_once(
                "ray:host-memory:cycle",
                "rlmetrics-ray: a host memory cycle failed; rl.host.memory.* is left out "
                "until a cycle succeeds",
            )
            hosts, targets, outcomes, failures, by_node = [], [], [], [], {}
        readings: list[HostMemory] = []
        gpus: list[HostGpu] = []
        failed_urls: dict[str, str] = {}
        for (host, url), outcome in zip(targets, outcomes, strict=True):
            if not isinstance(outcome, NodeReading):
                failures.append((host.name, str(outcome)))
                failed_urls[host.name] = url
                continue
            gpus += (HostGpu(host.name, gpu) for gpu in outcome.gpus)
            memory = outcome.memory
            if memory is not None and memory.source in SOURCES:
                groups = {name for node in host.nodes for name in by_node.get(node.node_id, ())}
                readings.append(
                    HostMemory(host.name, memory.used, memory.total, memory.source, label(groups))
                )
            else:
                failures.append((host.name, "no memory series"))
                failed_urls[host.name] = url
        if not hosts and self.gpus and self.local_gpus is not None:
            gpus += self._local_gpus()
        self._report(failures, failed_urls)
        # Said once a host answered: a cycle before Ray's metrics agent is up knows nothing.
        if gpus or any(isinstance(outcome, NodeReading) for outcome in outcomes):
            self._say_gpus(len(gpus))
        snapshot = build_snapshot(
            readings, time.monotonic(), failures, gpus, [host.name for host in hosts]
        )
        if (hosts or gpus) and self.on_hosts is not None:
            try:
                self.on_hosts()  # the first host or GPU: the families that report them start
            except Exception:
                warn_once("ray:monitor:on-hosts", "rlmetrics-ray: the monitor's on_hosts failed")
        return self._replace(snapshot)

    def _replace(self, snapshot: Snapshot) -> Snapshot:
        with self._cond:
            self._snapshot = snapshot
            self._cycles += 1
            self._cond.notify_all()
        return snapshot

    def _elect(self) -> bool:
        """Whether this cycle is this process's to report; said when that changes."""
        if self.election is None:
            return True
        try:
            elected = bool(self.election())
        except Exception:
            warn_once("ray:monitor:election", "rlmetrics-ray: the host election failed")
            elected = False
        if elected and not self.elected:
            logger.info(
                "rlmetrics-ray: this process (pid %d) reports this host's memory and GPUs "
                "for the run (elected)",
                os.getpid(),
            )
        self.elected = elected
        return elected

    def _local_gpus(self) -> list[HostGpu]:
        """This machine's GPUs, from the ``local_gpus`` reader (never raises)."""
        try:
            found = list(self.local_gpus()) if self.local_gpus is not None else []
        except Exception:
            warn_once(
                "ray:gpu:local",
                "rlmetrics-ray: reading this machine's GPUs failed; hw.gpu.* is left out "
                "this cycle",
            )
            return []
        host_name = socket.gethostname()
        return [HostGpu(host_name, gpu) for gpu in found if isinstance(gpu, GpuReading)]

    def _say_gpus(self, count: int) -> None:
        """One INFO line, the first cycle that reached a host: whether any reports a GPU."""
        if self._gpu_said or not self.gpus:
            return
        self._gpu_said = True
        if count:
            logger.info("rlmetrics-ray: %d GPU(s) found; exporting hw.gpu.*", count)
        else:
            logger.info("rlmetrics-ray: no host reports a GPU; no hw.gpu.* series")

    def _hosts(self) -> list[Host]:
        try:
            infos = list(self.nodes())
        except Exception:
            warn_once(
                "ray:host-memory:nodes",
                "rlmetrics-ray: listing the Ray nodes failed; no host is reported this cycle",
            )
            return []
        return group_by_host(alive_nodes(infos))

    def _worker_groups_by_node(self) -> dict[str, frozenset[str]]:
        try:
            return self.worker_groups.by_node()
        except Exception:
            warn_once(
                "ray:host-memory:worker-groups",
                "rlmetrics-ray: resolving worker groups failed; hosts are labelled none this cycle",
            )
            return {}

    def _resolve(self, host: Host) -> str | None:
        try:
            url = self.resolver(host.target)
        except Exception:
            warn_once(
                "ray:host-memory:resolver",
                f"rlmetrics-ray: the address resolver raised for host {host.name!r}; that "
                "host is left out of this cycle",
            )
            return None
        return url if isinstance(url, str) and url else None

    def _report(self, failures: Sequence[tuple[str, str]], urls: dict[str, str]) -> None:
        """One report per cause per cycle (WARNING the first time, DEBUG after)."""
        by_cause: dict[str, list[str]] = {}
        for host_name, cause in failures:
            by_cause.setdefault(cause, []).append(host_name)
        for cause, host_names in by_cause.items():
            first = host_names[0]
            where = f" at {urls[first]}" if first in urls else ""
            others = f" and {len(host_names) - 1} more" if len(host_names) > 1 else ""
            warn_once(
                f"ray:host-memory:scrape:{cause}",
                f"rlmetrics-ray: host {first!r}{where}{others}: {cause}; their "
                "rl.host.memory.* points are left out until a scrape succeeds (a gap, not "
                "the last value). Later failures with this cause are logged at DEBUG.",
            )

    async def _scrape(
        self, targets: Sequence[tuple[Host, str]], stopping: threading.Event | None
    ) -> list[object]:
        task = asyncio.current_task()
        assert task is not None
        key = (asyncio.get_running_loop(), task)
        with self._cond:
            if stopping is not None and stopping.is_set():
                raise asyncio.CancelledError  # stop() came between the cycle's start and here
            self._in_flight.add(key)
        try:
            import aiohttp

            semaphore = asyncio.Semaphore(self.max_concurrency)
            connector = aiohttp.TCPConnector(limit=0, force_close=True)
            # trust_env=False: node endpoints are never reached through an HTTP proxy.
            async with aiohttp.ClientSession(
                connector=connector, headers=_HEADERS, trust_env=False
            ) as session:
                return await asyncio.gather(
                    *(self._scrape_one(session, semaphore, host, url) for host, url in targets)
                )
        finally:
            with self._cond:
                self._in_flight.discard(key)

    async def _scrape_one(
        self,
        session: aiohttp.ClientSession,
        semaphore: asyncio.Semaphore,
        host: Host,
        url: str,
    ) -> object:
        import aiohttp

        async with semaphore:
            try:
                body, charset = await asyncio.wait_for(self._get(session, url), self.timeout_s)
            except asyncio.TimeoutError:
                return _Failure("timeout")
            except _ScrapeFailed as failed:
                return _Failure(failed.cause)
            except (aiohttp.ClientError, OSError, ValueError):
                return _Failure("unreachable")
        try:
            return self._read(body.decode(charset, errors="replace"), host.target.address)
        except Exception:
            return _Failure("unparsable exposition")

    def _read(self, text: str, ip: str) -> NodeReading | _Failure:
        """A host's memory and GPUs from one exposition, parsed in one pass over their lines."""
        families = _SCRAPED_FAMILIES if self.gpus else MEMORY_FAMILIES
        prefixes = _SCRAPED_PREFIXES if self.gpus else _SCRAPED_PREFIXES[:1]
        samples = read_samples(family_lines(text, families, prefixes), families)
        memory = memory_from_samples(samples, ip)
        gpus = gpus_from_samples(samples, ip) if self.gpus else ()
        if memory is None and not gpus:
            return _Failure("no memory series")
        return NodeReading(memory, gpus)

    async def _get(self, session: aiohttp.ClientSession, url: str) -> tuple[bytes, str]:
        async with session.get(url, allow_redirects=False) as response:
            if response.status != 200:
                raise _ScrapeFailed(f"HTTP {response.status}")
            body = bytearray()
            async for chunk in response.content.iter_chunked(_CHUNK):
                body += chunk
                if len(body) > MAX_EXPOSITION_BYTES:
                    raise _ScrapeFailed("exposition too large")
            return bytes(body), response.charset or "utf-8"

    # -- the thread --------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the monitor's thread is alive (after :meth:`stop`, until it has ended)."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self) -> None:
        """Start cycling on a daemon thread (the first cycle runs at once)."""
        with self._cond:
            if self.running and not self._stopping.is_set():
                return
            self._stopping = stopping = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(stopping,), name="rlmetrics-ray-host-memory", daemon=True
            )
            self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop the thread: a cycle in flight is cancelled (its scrapes are abandoned and the
        snapshot is not replaced). Waits at most ``timeout_s``."""
        with self._cond:
            self._stopping.set()
            thread = self._thread
            in_flight = list(self._in_flight)
        for loop, task in in_flight:
            # RuntimeError: that loop already closed, so its cycle is over.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(task.cancel)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        release = getattr(self.election, "release", None)
        if callable(release) and (thread is None or not thread.is_alive()):
            with contextlib.suppress(Exception):
                release()  # stopped: another process on this host takes over at its next try
            self.elected = self.election is None
        close = getattr(self.local_gpus, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()  # NVML's handle: a later cycle opens it again

    def wait_for_cycles(self, count: int, timeout_s: float) -> bool:
        """Wait until at least ``count`` cycles completed; False after ``timeout_s``."""
        with self._cond:
            return self._cond.wait_for(lambda: self._cycles >= count, timeout=timeout_s)

    def _run(self, stopping: threading.Event) -> None:
        while not stopping.is_set():
            started = time.monotonic()
            self._cycle(stopping)
            if self._nothing_to_read():
                return  # no idle thread for the run's life (issue 37)
            stopping.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def _nothing_to_read(self) -> bool:
        """Whether no later cycle can find anything: no Ray nodes to list (:func:`no_nodes`)
        and no GPU of this machine (no reader, or one that gave up: no NVML, no driver)."""
        if self.nodes is not no_nodes:
            return False
        reader = self.local_gpus
        return reader is None or not self.gpus or getattr(reader, "unavailable", None) is not None
