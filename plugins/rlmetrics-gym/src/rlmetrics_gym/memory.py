"""Memory of the Gym servers' process trees and of the host, sampled on a background thread.

Opt-in (``telemetry.memory_profiling.enabled`` in Gym): nothing is sampled until
:func:`start_memory_sampler` runs. Each sample walks every tracked server's Linux process tree
(the root process and its descendants, ``Process.children(recursive=True)``) and reads:

- RSS (``memory_info().rss``, cheap) for every process; it counts pages shared between
  processes (Uvicorn workers, forked children) once per process;
- PSS (``memory_full_info().pss``, opt-in with ``pss=True``) divides each shared page among
  the processes mapping it, so PSS summed over servers estimates their combined footprint. It
  reads ``/proc/<pid>/smaps_rollup``: about 15 ms per GB of RSS here, which is why it runs on
  this thread, never on the exporter's thread or a request;
- the host's ``virtual_memory()``: usage is total minus available.

Peaks are the largest values the sampler saw, not the kernel's lifetime peak: an allocation
that comes and goes between two samples is missed. A process that leaves the tree (detached,
reparented) stops being attributed; a process that vanishes mid-walk is skipped.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import psutil

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec, hookimpl, resets_process_state, warn_once
from rlmetrics.spec import MAX, MIN, SUM

from ._attribute_values import SERVER_NAME, bounded, member
from ._intervals import checked_interval
from .startup import SERVER_TYPES, UNKNOWN_SERVER

__all__ = [
    "GROUP",
    "HOST_AVAILABLE",
    "HOST_PEAK",
    "HOST_TOTAL",
    "HOST_USAGE",
    "MEMORY_TYPES",
    "MEMORY_TYPE_ATTR",
    "PID_ATTR",
    "SERVER_NAME_ATTR",
    "SERVER_TYPE_ATTR",
    "SERVER_PEAK",
    "SERVER_PROCESSES",
    "SERVER_USAGE",
    "SPECS",
    "HostReading",
    "MemorySampler",
    "TreeReading",
    "current_sampler",
    "host_values",
    "read_host",
    "read_tree",
    "start_memory_sampler",
    "stop_memory_sampler",
    "telemetry_stopping",
]

GROUP = "gym.memory"

SERVER_USAGE = "gym.server.memory.usage"
SERVER_PEAK = "gym.server.memory.sampled_peak"
SERVER_PROCESSES = "gym.server.processes"
HOST_USAGE = "gym.host.memory.usage"
HOST_AVAILABLE = "gym.host.memory.available"
HOST_TOTAL = "gym.host.memory.total"
HOST_PEAK = "gym.host.memory.sampled_peak"

SERVER_NAME_ATTR = "nemo.gym.server.name"
SERVER_TYPE_ATTR = "nemo.gym.server.type"
PID_ATTR = "process.pid"  # the tree's root
MEMORY_TYPE_ATTR = "memory.type"
RSS = "rss"
PSS = "pss"
MEMORY_TYPES: frozenset[str] = frozenset({RSS, PSS})

#: Servers one supervisor manages; one attribute set per server (and memory type).
_MAX_SERVERS = 256
# The name and type as the startup stages bound them (the same attributes of the same servers).
_SERVER = {SERVER_NAME_ATTR: OPEN, SERVER_TYPE_ATTR: SERVER_TYPES, PID_ATTR: OPEN}

SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        SERVER_USAGE,
        Kind.GAUGE,
        unit="By",
        description="Current RSS or PSS (memory.type) of one managed server and its descendants.",
        attributes={**_SERVER, MEMORY_TYPE_ATTR: MEMORY_TYPES},
        max_series=2 * _MAX_SERVERS,
        reduce=SUM,
    ),
    MetricSpec(
        SERVER_PEAK,
        Kind.GAUGE,
        unit="By",
        description="Largest RSS or PSS (memory.type) the sampler observed for one managed "
        "server and its descendants.",
        attributes={**_SERVER, MEMORY_TYPE_ATTR: MEMORY_TYPES},
        max_series=2 * _MAX_SERVERS,
        reduce=MAX,
    ),
    MetricSpec(
        SERVER_PROCESSES,
        Kind.GAUGE,
        unit="{process}",
        description="Processes currently attributed to one managed server (its root process "
        "and descendants).",
        attributes=_SERVER,
        max_series=_MAX_SERVERS,
        reduce=SUM,
    ),
    MetricSpec(
        HOST_USAGE,
        Kind.GAUGE,
        unit="By",
        description="Host memory in use: total minus available.",
        reduce=MAX,
    ),
    MetricSpec(
        HOST_AVAILABLE,
        Kind.GAUGE,
        unit="By",
        description="Host memory available without swapping.",
        reduce=MIN,
    ),
    MetricSpec(HOST_TOTAL, Kind.GAUGE, unit="By", description="Total host memory.", reduce=MAX),
    MetricSpec(
        HOST_PEAK,
        Kind.GAUGE,
        unit="By",
        description="Largest host memory usage the sampler observed.",
        reduce=MAX,
    ),
)

rlmetrics.declare(GROUP, SPECS)


# -- readings (pure psutil, no rlmetrics) -------------------------------------------------------


@dataclass(frozen=True)
class TreeReading:
    """One walk of a process tree: summed bytes per memory type and the processes counted."""

    usage: Mapping[str, int]
    processes: int


@dataclass(frozen=True)
class HostReading:
    total: int
    available: int


def read_tree(root: psutil.Process, memory_types: Iterable[str]) -> TreeReading | None:
    """Sum ``memory_types`` (``rss``, ``pss``) over ``root`` and its descendants.

    None when the root itself is gone (or a zombie). A descendant that exits, is a zombie or
    cannot be read during the walk is skipped (it is not counted in ``processes`` either). PSS
    is left out when the platform does not report it.
    """
    wanted = tuple(memory_types)
    try:
        members = [root, *root.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except psutil.AccessDenied:
        members = [root]
    usage = dict.fromkeys(wanted, 0)
    counted = 0
    pss_missing = False
    for process in members:
        try:
            with process.oneshot():
                if process.status() == psutil.STATUS_ZOMBIE:
                    if process is root:
                        return None  # the server exited; its parent has not reaped it yet
                    continue  # exited, not yet reaped: it holds no memory
                readings: dict[str, int] = {}
                if RSS in usage:
                    readings[RSS] = process.memory_info().rss
                if PSS in usage:
                    pss = getattr(process.memory_full_info(), "pss", None)
                    if pss is None:
                        pss_missing = True
                    else:
                        readings[PSS] = pss
        except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            if process is root and not root.is_running():
                return None
            continue
        counted += 1
        for memory_type, value in readings.items():
            usage[memory_type] += value
    if pss_missing:
        usage.pop(PSS, None)
    return TreeReading(usage, counted)


def read_host() -> HostReading:
    memory = psutil.virtual_memory()
    return HostReading(total=int(memory.total), available=int(memory.available))


def host_values(reading: HostReading, peak: int) -> dict[str, int]:
    """The host series of one reading, given the peak usage so far (including this one)."""
    return {
        HOST_USAGE: reading.total - reading.available,
        HOST_AVAILABLE: reading.available,
        HOST_TOTAL: reading.total,
        HOST_PEAK: peak,
    }


# -- the sampler --------------------------------------------------------------------------------


@dataclass
class _Server:
    name: str
    server_type: str
    process: psutil.Process
    attributes: dict[str, str | int]
    peaks: dict[str, int]

    def typed(self, memory_type: str) -> dict[str, str | int]:
        return {**self.attributes, MEMORY_TYPE_ATTR: memory_type}


class MemorySampler:
    """Samples tracked servers' process trees and the host every ``interval_s`` on a daemon
    thread, recording the ``gym.server.memory.*``, ``gym.server.processes`` and
    ``gym.host.memory.*`` gauges. Start it with :func:`start_memory_sampler`."""

    def __init__(self, *, interval_s: float = 5.0, pss: bool = False, host: bool = True) -> None:
        self.interval_s = checked_interval("MemorySampler", interval_s)
        self.memory_types: tuple[str, ...] = (RSS, PSS) if pss else (RSS,)
        self.host = host
        self._servers: dict[str, _Server] = {}
        self._lock = threading.Lock()  # guards _servers; never held while reading /proc
        self._host_peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what is sampled

    def track(self, name: str, server_type: str, pid: int) -> None:
        """Attribute the process tree rooted at ``pid`` to server ``name`` from the next
        sample on. Tracking a name again replaces its root (its peaks start over). A name
        outside the server-name template is exported as ``unknown``, a type outside Gym's
        server types as ``other``, as the startup stages export them. A ``pid`` that is no
        process id (None, which psutil takes for this process; text; a float) is refused."""
        is_int = isinstance(pid, int) and not isinstance(pid, bool)
        if not is_int or pid <= 0:
            raise (ValueError if is_int else TypeError)(
                f"MemorySampler.track: pid must be the server's root process id (an int above "
                f"0, e.g. its subprocess's .pid), got {pid!r:.40}"
            )
        try:
            process = psutil.Process(pid)
        except psutil.Error:
            # A server that died (or was never started) before it was tracked: a condition to
            # report in one line, not a bug to show a traceback for.
            warn_once(
                "gym:memory:track",
                f"rlmetrics-gym: the root process of server {str(name)[:64]!r} (pid "
                f"{str(pid)[:20]}) could not be found (or read) when it was tracked; its "
                "memory is not sampled. Later servers not found are reported at DEBUG",
                expected=True,
            )
            return
        exported_name = bounded(name, SERVER_NAME, UNKNOWN_SERVER)
        if exported_name != name:
            warn_once(
                "gym:memory:name",
                f"rlmetrics-gym: a server name to sample memory of must match "
                f"{SERVER_NAME.pattern}; a {type(name).__name__} that does not is exported as "
                f"{UNKNOWN_SERVER!r}",
            )
        server = _Server(
            name,
            server_type,
            process,
            {
                SERVER_NAME_ATTR: exported_name,
                SERVER_TYPE_ATTR: server_type if member(server_type, SERVER_TYPES) else "other",
                PID_ATTR: pid,  # an int, as the semantic conventions type it
            },
            {},
        )
        with self._lock:
            previous = self._servers.get(name)
            self._servers[name] = server
        if previous is not None:
            self._retract(previous)

    def untrack(self, name: str) -> None:
        """Stop sampling server ``name``; its series end at the next export."""
        with self._lock:
            server = self._servers.pop(name, None)
        if server is not None:
            self._retract(server)

    def tracked(self) -> list[str]:
        with self._lock:
            return list(self._servers)

    # -- the thread

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="rlmetrics-gym-memory", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread (waiting at most ``timeout_s`` for a sample in progress) and end
        every series this sampler reported."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        with self._lock:
            servers = list(self._servers.values())
        for server in servers:
            self._retract(server)
        if self.host:
            for key in (HOST_USAGE, HOST_AVAILABLE, HOST_TOTAL, HOST_PEAK):
                rlmetrics.retract(GROUP, key)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            if self._stop.wait(self.interval_s):
                break

    def sample(self) -> None:
        """Take one sample now and record it (the thread does this every interval). Never
        raises."""
        try:
            self._sample()
        except Exception:
            warn_once(
                "gym:memory:sample",
                "rlmetrics-gym: a memory sample failed; the gym.server.memory.* and "
                "gym.host.memory.* gauges keep their previous values until the next one",
            )

    def _sample(self) -> None:
        with self._lock:
            servers = list(self._servers.values())
        for server in servers:
            reading = read_tree(server.process, self.memory_types)
            if reading is None:
                # The root exited: the server is gone, and so are its series.
                with self._lock:
                    if self._servers.get(server.name) is server:
                        del self._servers[server.name]
                self._retract(server)
                continue
            for memory_type, value in reading.usage.items():
                peak = max(server.peaks.get(memory_type, 0), value)
                server.peaks[memory_type] = peak
                attributes = server.typed(memory_type)
                rlmetrics.record(GROUP, {SERVER_USAGE: value, SERVER_PEAK: peak}, attributes)
            rlmetrics.record(GROUP, {SERVER_PROCESSES: reading.processes}, server.attributes)
        if self.host:
            host = read_host()
            self._host_peak = max(self._host_peak, host.total - host.available)
            rlmetrics.record(GROUP, host_values(host, self._host_peak))

    def _retract(self, server: _Server) -> None:
        for memory_type in MEMORY_TYPES:
            for key in (SERVER_USAGE, SERVER_PEAK):
                rlmetrics.retract(GROUP, key, server.typed(memory_type))
        rlmetrics.retract(GROUP, SERVER_PROCESSES, server.attributes)


_sampler: list[MemorySampler] = []
_sampler_lock = threading.Lock()


def start_memory_sampler(
    servers: Sequence[tuple[str, str, int]] = (),
    *,
    interval_s: float = 5.0,
    pss: bool = False,
    host: bool = True,
) -> MemorySampler:
    """Start the process's memory sampler (one per process: a running one is stopped and
    replaced) with ``servers`` as ``(name, server_type, root_pid)`` triples; more can be
    tracked later with :meth:`MemorySampler.track`. It stops with telemetry."""
    sampler = MemorySampler(interval_s=interval_s, pss=pss, host=host)
    for name, server_type, pid in servers:
        sampler.track(name, server_type, pid)
    with _sampler_lock:
        previous = _sampler[:]
        _sampler[:] = [sampler]
    for old in previous:
        old.stop()
    sampler.start()
    return sampler


def current_sampler() -> MemorySampler | None:
    with _sampler_lock:
        return _sampler[0] if _sampler else None


def stop_memory_sampler(timeout_s: float = 5.0) -> None:
    """Stop the process's memory sampler, if one runs."""
    with _sampler_lock:
        previous = _sampler[:]
        _sampler.clear()
    for sampler in previous:
        sampler.stop(timeout_s)


@hookimpl
def telemetry_stopping() -> None:
    stop_memory_sampler()


resets_process_state(stop_memory_sampler)
