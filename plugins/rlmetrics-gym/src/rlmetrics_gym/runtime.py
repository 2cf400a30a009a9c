"""How the process itself behaves: event-loop lag, garbage collections and OS process usage.

Three sources, none on a request's path:

- **Event loop.** :func:`start_event_loop_sampler` runs one coroutine per loop that sleeps one
  interval and measures how late it woke (``gym.event_loop.lag_ms``); optionally it also counts
  the loop's tasks (``gym.event_loop.tasks``). It ends with the loop (``asyncio.run`` cancels
  it) or with :meth:`EventLoopSampler.stop`; a loop never has two.
- **Garbage collector.** ``gc.callbacks`` run inside the collector, on whatever thread
  allocated, possibly while that thread holds an OpenTelemetry SDK lock; taking a lock there
  deadlocks (prometheus_client removed its GC pause histogram for this, and the OTel SDK has
  the same report). So the callback only does arithmetic on preallocated arrays: three
  counters per generation and a ring of pause durations. The exporter's thread reads the
  counters and moves the pauses into the ``gym.gc.pause_duration_ms`` histogram when it
  collects.
- **Process.** ``process.*`` under the OpenTelemetry process semantic-convention names, units
  and ``cpu.mode`` attribute, read through psutil when the exporter collects.

The garbage-collector and process series are exported once the process asks for them with
:func:`enable_runtime_metrics` (a Gym server, supervisor or driver does, where it sets up
telemetry); the gc callback is installed only while they are exported.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
import time
import weakref
from array import array
from collections.abc import AsyncIterator, Mapping
from typing import Any

import psutil

import rlmetrics
from rlmetrics import Kind, MetricSpec, hookimpl, resets_process_state, warn_once

__all__ = [
    "CPU_MODE_ATTR",
    "CPU_TIME",
    "EVENT_LOOP_ATTR",
    "EVENT_LOOP_ROLES",
    "FD_COUNT",
    "FD_COUNT_NAMES",
    "FD_COUNT_UNIX",
    "GC_COLLECTED",
    "GC_COLLECTIONS",
    "GC_COUNT",
    "GC_GENERATION_ATTR",
    "GC_PAUSE_MS",
    "GC_UNCOLLECTABLE",
    "GROUP",
    "LAG_MS",
    "MEMORY_USAGE",
    "PAUSE_RING_SIZE",
    "SPECS",
    "TASKS",
    "THREAD_COUNT",
    "EventLoopSampler",
    "enable_runtime_metrics",
    "event_loop_sampler",
    "intact_pauses",
    "report_file_descriptors_as",
    "start_event_loop_sampler",
    "telemetry_started",
    "telemetry_stopping",
    "wake_lag_ms",
]

GROUP = "gym.runtime"

LAG_MS = "gym.event_loop.lag_ms"
TASKS = "gym.event_loop.tasks"
GC_PAUSE_MS = "gym.gc.pause_duration_ms"
GC_COLLECTIONS = "gym.gc.collections_total"
GC_COLLECTED = "gym.gc.collected_total"
GC_UNCOLLECTABLE = "gym.gc.uncollectable_total"
GC_COUNT = "gym.gc.count"
CPU_TIME = "process.cpu.time"
MEMORY_USAGE = "process.memory.usage"
THREAD_COUNT = "process.thread.count"
#: The name the spec (and semconv before v1.39) uses for the open file descriptors.
FD_COUNT = "process.open_file_descriptor.count"
#: Its current semantic-convention name; report it with :func:`report_file_descriptors_as`.
FD_COUNT_UNIX = "process.unix.file_descriptor.count"
FD_COUNT_NAMES: tuple[str, ...] = (FD_COUNT, FD_COUNT_UNIX)

EVENT_LOOP_ATTR = "nemo.gym.event_loop"
#: A server's own loop, the head server's loop inside the supervisor, the rollout driver's.
EVENT_LOOP_ROLES: frozenset[str] = frozenset({"server", "head_server", "driver"})
GC_GENERATION_ATTR = "nemo.gym.gc.generation"
CPU_MODE_ATTR = "cpu.mode"

#: GC pauses kept between two collections by the exporter; older ones are dropped (the
#: counters stay exact). A busy server runs a few hundred generation-0 collections a second.
PAUSE_RING_SIZE = 16384
_GENERATIONS = 3  # CPython's, 3.10 through 3.14

_LAG_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)
_PAUSE_BUCKETS_MS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000)


def _observe_gc_collections() -> list[tuple[float, Mapping[str, str]]]:
    return _gc_totals(0)


def _observe_gc_collected() -> list[tuple[float, Mapping[str, str]]]:
    return _gc_totals(1)


def _observe_gc_uncollectable() -> list[tuple[float, Mapping[str, str]]]:
    return _gc_totals(2)


def _observe_gc_count() -> list[tuple[float, Mapping[str, str]]]:
    if not _enabled():
        return []
    _drain_pauses()
    return [(count, _GENERATION_ATTRS[g]) for g, count in enumerate(gc.get_count()[:3])]


def _observe_cpu_time() -> list[tuple[float, Mapping[str, str]]]:
    if not _enabled():
        return []
    times = _process().cpu_times()
    return [(times.user, _USER), (times.system, _SYSTEM)]


def _observe_memory_usage() -> list[tuple[float, Mapping[str, str]]]:
    return [(_process().memory_info().rss, {})] if _enabled() else []


def _observe_thread_count() -> list[tuple[float, Mapping[str, str]]]:
    return [(_process().num_threads(), {})] if _enabled() else []


def _observe_fd_count() -> list[tuple[float, Mapping[str, str]]]:
    return _fd_count(FD_COUNT)


def _observe_fd_count_unix() -> list[tuple[float, Mapping[str, str]]]:
    return _fd_count(FD_COUNT_UNIX)


_GENERATION = {GC_GENERATION_ATTR: frozenset(str(g) for g in range(_GENERATIONS))}

SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        LAG_MS,
        Kind.HISTOGRAM,
        unit="ms",
        description="How late a sleeping coroutine wakes up, sampled once per interval: the "
        "time the event loop was busy with other work when it should have run.",
        attributes={EVENT_LOOP_ATTR: EVENT_LOOP_ROLES},
        buckets=_LAG_BUCKETS_MS,
    ),
    MetricSpec(
        TASKS,
        Kind.GAUGE,
        unit="{task}",
        description="Asyncio tasks that exist on the loop (resident work, not a queue), when "
        "the sampler was started with task_count=True.",
        attributes={EVENT_LOOP_ATTR: EVENT_LOOP_ROLES},
    ),
    MetricSpec(
        GC_PAUSE_MS,
        Kind.HISTOGRAM,
        unit="ms",
        description="Duration of one garbage collection.",
        attributes=_GENERATION,
        buckets=_PAUSE_BUCKETS_MS,
    ),
    MetricSpec(
        GC_COLLECTIONS,
        Kind.OBSERVABLE_COUNTER,
        unit="{collection}",
        description="Garbage collections since enable_runtime_metrics().",
        attributes=_GENERATION,
        callback=_observe_gc_collections,
    ),
    MetricSpec(
        GC_COLLECTED,
        Kind.OBSERVABLE_COUNTER,
        unit="{object}",
        description="Objects the garbage collector freed since enable_runtime_metrics().",
        attributes=_GENERATION,
        callback=_observe_gc_collected,
    ),
    MetricSpec(
        GC_UNCOLLECTABLE,
        Kind.OBSERVABLE_COUNTER,
        unit="{object}",
        description="Objects the garbage collector found but could not free, since "
        "enable_runtime_metrics().",
        attributes=_GENERATION,
        callback=_observe_gc_uncollectable,
    ),
    MetricSpec(
        GC_COUNT,
        Kind.OBSERVABLE_GAUGE,
        unit="{object}",
        description="Allocations counted toward the next collection of the generation "
        "(gc.get_count()).",
        attributes=_GENERATION,
        callback=_observe_gc_count,
    ),
    # The process.* series keep the OpenTelemetry process semantic conventions (name, unit,
    # cpu.mode, and the up-down counter kind semconv gives memory, threads and descriptors)
    # so standard dashboards recognise them.
    MetricSpec(
        CPU_TIME,
        Kind.OBSERVABLE_COUNTER,
        unit="s",
        description="Total CPU seconds of this process, by cpu.mode.",
        attributes={CPU_MODE_ATTR: {"user", "system"}},
        callback=_observe_cpu_time,
    ),
    MetricSpec(
        MEMORY_USAGE,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="By",
        description="The amount of physical memory in use by this process (RSS).",
        callback=_observe_memory_usage,
    ),
    MetricSpec(
        THREAD_COUNT,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="{thread}",
        description="Threads in this process.",
        callback=_observe_thread_count,
    ),
    MetricSpec(
        FD_COUNT,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="{file_descriptor}",
        description="Open file descriptors of this process, where the platform reports them "
        "(deprecated semconv name of process.unix.file_descriptor.count).",
        callback=_observe_fd_count,
    ),
    MetricSpec(
        FD_COUNT_UNIX,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="{file_descriptor}",
        description="Open file descriptors of this process, where the platform reports them; "
        "exported only after report_file_descriptors_as() selects this name.",
        callback=_observe_fd_count_unix,
    ),
)

rlmetrics.declare(GROUP, SPECS)

_EVENT_LOOP_ATTRS: dict[str, dict[str, str]] = {
    role: {EVENT_LOOP_ATTR: role} for role in EVENT_LOOP_ROLES
}
_GENERATION_ATTRS: tuple[dict[str, str], ...] = tuple(
    {GC_GENERATION_ATTR: str(g)} for g in range(_GENERATIONS)
)
_USER = {CPU_MODE_ATTR: "user"}
_SYSTEM = {CPU_MODE_ATTR: "system"}


# -- event loop ---------------------------------------------------------------------------------


def wake_lag_ms(expected: float, woke: float) -> float:
    """How late a timer due at ``expected`` ran at ``woke`` (loop clock, seconds), in ms.

    Never negative: asyncio may run a timer up to its clock resolution early.
    """
    return max(0.0, (woke - expected) * 1000.0)


class EventLoopSampler:
    """The one lag sampler of an event loop (see :func:`start_event_loop_sampler`)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        role: str,
        interval_s: float,
        task_count: bool,
    ) -> None:
        self.loop = loop
        self.role = role
        self.interval_s = interval_s
        self.task_count = task_count
        self._attributes = _EVENT_LOOP_ATTRS[role]
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def stop(self) -> None:
        """Stop sampling (from the loop's thread); the sampler ends at the loop's next turn.
        Idempotent."""
        task = self._task
        if task is not None and not task.done():
            task.cancel()

    async def aclose(self) -> None:
        """Stop sampling and wait until the sampler has ended."""
        self.stop()
        task = self._task
        if task is not None:
            await asyncio.wait([task])  # never raises the sampler's cancellation into us

    async def _run(self) -> None:
        loop, interval, attributes = self.loop, self.interval_s, self._attributes
        try:
            while True:
                # The drift form: the lag is measured against when the timer was due, so a
                # stall anywhere in the sleep shows up in the sample that spans it.
                expected = loop.time() + interval
                await asyncio.sleep(interval)
                if not rlmetrics.is_exporting():
                    continue
                rlmetrics.record(GROUP, {LAG_MS: wake_lag_ms(expected, loop.time())}, attributes)
                if self.task_count:
                    try:
                        tasks = len(asyncio.all_tasks(loop))
                    except RuntimeError:  # the task set kept changing under all_tasks()
                        warn_once(
                            "gym:event_loop:tasks",
                            "rlmetrics-gym: counting the loop's tasks failed; "
                            "gym.event_loop.tasks skips this sample",
                        )
                        continue
                    rlmetrics.record(GROUP, {TASKS: tasks}, attributes)
        finally:
            with _samplers_lock:
                if _samplers.get(loop) is self:
                    del _samplers[loop]
            if self.task_count:
                rlmetrics.retract(GROUP, TASKS, attributes)


_samplers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, EventLoopSampler] = (
    weakref.WeakKeyDictionary()
)
_samplers_lock = threading.Lock()


def start_event_loop_sampler(
    role: str = "server", *, interval_s: float = 0.1, task_count: bool = False
) -> EventLoopSampler:
    """Start sampling the running loop's lag (call it on the loop: in a lifespan or startup
    hook). A loop has at most one sampler: a second call returns the running one unchanged.

    :param role: ``nemo.gym.event_loop``: ``server``, ``head_server`` or ``driver``.
    :param interval_s: how long the sampler sleeps between samples; a stall shorter than this
        can be seen only in part (a stall of ``interval_s + x`` is always seen as ``>= x``).
    :param task_count: also report ``gym.event_loop.tasks`` (``len(asyncio.all_tasks())`` once
        per interval: cheap, but proportional to the number of tasks).

    Raises ``ValueError`` for an unknown role or a non-positive interval, ``RuntimeError`` when
    no loop is running in this thread.
    """
    if role not in EVENT_LOOP_ROLES:
        raise ValueError(
            f"start_event_loop_sampler: role {role!r} is not one of {sorted(EVENT_LOOP_ROLES)}"
        )
    if not interval_s > 0:
        raise ValueError(f"start_event_loop_sampler: interval_s must be positive, not {interval_s}")
    loop = asyncio.get_running_loop()
    with _samplers_lock:
        sampler = _samplers.get(loop)
        if sampler is not None and sampler.running:
            if (sampler.role, sampler.interval_s, sampler.task_count) != (
                role,
                interval_s,
                task_count,
            ):
                warn_once(
                    "gym:event_loop:second_sampler",
                    "rlmetrics-gym: this event loop is already sampled "
                    f"(role={sampler.role!r}, interval_s={sampler.interval_s}); a loop has one "
                    "sampler, so the new settings are ignored",
                )
            return sampler
        sampler = EventLoopSampler(loop, role, interval_s, task_count)
        _samplers[loop] = sampler
        sampler._task = loop.create_task(sampler._run(), name=f"rlmetrics-gym-lag-{role}")
    return sampler


@contextlib.asynccontextmanager
async def event_loop_sampler(
    role: str = "server", *, interval_s: float = 0.1, task_count: bool = False
) -> AsyncIterator[EventLoopSampler]:
    """``async with event_loop_sampler("server"): ...`` samples the loop for the block (an
    ASGI lifespan, a driver's main coroutine). A sampler that was already running on the loop
    is used and left running."""
    running = _samplers.get(asyncio.get_running_loop())
    already = running is not None and running.running
    sampler = start_event_loop_sampler(role, interval_s=interval_s, task_count=task_count)
    try:
        yield sampler
    finally:
        if not already:
            await sampler.aclose()


# -- garbage collector --------------------------------------------------------------------------
# Everything the gc callback touches is allocated here, once. Writer: the callback only (the
# collector never runs two collections at once). Readers: exporter threads, which take
# _drain_lock among themselves and never make the callback wait.

_RING_MASK = PAUSE_RING_SIZE - 1
assert PAUSE_RING_SIZE & _RING_MASK == 0, "PAUSE_RING_SIZE must be a power of two"
_pause_ms = array("d", bytes(8 * PAUSE_RING_SIZE))
_pause_generation = array("b", bytes(PAUSE_RING_SIZE))
_pause_written = array("q", [0])  # pauses written so far; slot = index & _RING_MASK
_pause_read = array("q", [0])  # pauses drained so far (drainers only)
_collection_started = array("d", [0.0])
# collections, collected, uncollectable per generation: _totals[3 * generation + field]
_totals = array("q", bytes(8 * 3 * _GENERATIONS))
# _totals when the callback was installed (exporter side only: the counters start from zero at
# telemetry start without the callback's arrays ever being written by another thread)
_baseline = array("q", bytes(8 * 3 * _GENERATIONS))
_drain_lock = threading.Lock()


def _on_gc(phase: str, info: dict[str, int]) -> None:
    """The gc.callbacks hook: arithmetic on the arrays above, nothing else (no lock, no call
    into OpenTelemetry or rlmetrics, no logging)."""
    if phase == "start":
        _collection_started[0] = time.perf_counter()
        return
    elapsed_ms = (time.perf_counter() - _collection_started[0]) * 1000.0
    generation = info.get("generation", -1)
    if not 0 <= generation < _GENERATIONS:
        return
    base = 3 * generation
    _totals[base] += 1
    _totals[base + 1] += info.get("collected", 0)
    _totals[base + 2] += info.get("uncollectable", 0)
    written = _pause_written[0]
    slot = written & _RING_MASK
    _pause_ms[slot] = elapsed_ms
    _pause_generation[slot] = generation
    _pause_written[0] = written + 1  # published last: a reader never sees a half-written slot


def intact_pauses(
    written: int, read: int, copied: list[tuple[int, float]], after: int
) -> list[tuple[int, float]]:
    """The pauses of ``copied`` (indices ``read``…``written - 1`` of the ring, in order) that
    the collector cannot have overwritten: it had written ``after`` pauses once the copy ended,
    so the slots of every index below ``after - PAUSE_RING_SIZE`` may hold newer pauses."""
    first_intact = max(read, after - PAUSE_RING_SIZE)
    return copied[max(0, first_intact - read) :] if first_intact < written else []


def _drain_pauses() -> None:
    """Move the ring's new pauses into the histogram (exporter's thread)."""
    if not _drain_lock.acquire(blocking=False):
        return  # another exporter thread is draining; it takes everything written so far
    try:
        written = _pause_written[0]
        read = max(_pause_read[0], written - PAUSE_RING_SIZE)
        lost = read - _pause_read[0]
        copied = [
            (_pause_generation[i & _RING_MASK], _pause_ms[i & _RING_MASK])
            for i in range(read, written)
        ]
        pauses = intact_pauses(written, read, copied, _pause_written[0])
        lost += len(copied) - len(pauses)
        _pause_read[0] = written
    finally:
        _drain_lock.release()
    if lost:
        warn_once(
            "gym:gc:ring_overflow",
            f"rlmetrics-gym: more than {PAUSE_RING_SIZE} garbage collections between two "
            "exports; the oldest pauses were not recorded in gym.gc.pause_duration_ms (the "
            "gym.gc.*_total counters stay exact). Export more often.",
        )
    for generation, ms in pauses:
        rlmetrics.record(GROUP, {GC_PAUSE_MS: ms}, _GENERATION_ATTRS[generation])


def _gc_totals(field: int) -> list[tuple[float, Mapping[str, str]]]:
    if not _enabled():
        return []
    _drain_pauses()
    return [
        (_totals[3 * g + field] - _baseline[3 * g + field], _GENERATION_ATTRS[g])
        for g in range(_GENERATIONS)
    ]


def _install_gc_callback() -> None:
    with _drain_lock:
        _baseline[:] = array("q", _totals)
        _pause_read[0] = _pause_written[0]
    if _on_gc not in gc.callbacks:
        gc.callbacks.append(_on_gc)


def _remove_gc_callback() -> None:
    with contextlib.suppress(ValueError):
        gc.callbacks.remove(_on_gc)


# -- process ------------------------------------------------------------------------------------

_fd_names: frozenset[str] = frozenset({FD_COUNT})
_current: list[psutil.Process] = []


def report_file_descriptors_as(*names: str) -> None:
    """Choose the name(s) the open-file-descriptor count is exported under.

    Semantic conventions v1.39 renamed ``process.open_file_descriptor.count`` (the spec's name,
    the default) to ``process.unix.file_descriptor.count``. Pass the new name to switch, or
    both to export both during a dashboard migration. Takes effect at the next collection.
    """
    global _fd_names
    unknown = [name for name in names if name not in FD_COUNT_NAMES]
    if unknown or not names:
        raise ValueError(
            f"report_file_descriptors_as: choose one or both of {list(FD_COUNT_NAMES)}, "
            f"got {list(names)}"
        )
    _fd_names = frozenset(names)


def _process() -> psutil.Process:
    """This process (a fresh handle after a fork, so a child never reports its parent)."""
    if not _current or _current[0].pid != os.getpid():
        _current[:] = [psutil.Process()]
    return _current[0]


def _fd_count(name: str) -> list[tuple[float, Mapping[str, str]]]:
    if name not in _fd_names or not _enabled():
        return []
    num_fds = getattr(_process(), "num_fds", None)  # POSIX only
    return [] if num_fds is None else [(num_fds(), {})]


# -- lifecycle ----------------------------------------------------------------------------------
# The garbage-collector and process series belong to the processes that ask for them (a Gym
# server, supervisor or driver): a process that merely has this distribution installed, such as
# a trainer exporting only its own families, exports none of them.

_PENDING = object()  # enabled before start(): applies to the next telemetry session
_enabled_for: list[object] = [None]  # the Telemetry handle the series are enabled for


def enable_runtime_metrics() -> None:
    """Export the ``gym.gc.*`` and ``process.*`` series (and time GC pauses) for the running
    telemetry session, or for the next one when none runs yet. Call it where a Gym process
    sets up its telemetry; it is idempotent. The event-loop series have their own switch,
    :func:`start_event_loop_sampler`."""
    handle = rlmetrics.current()
    if handle is not None and handle.exporting:
        _enabled_for[0] = handle
        _install_gc_callback()
    else:
        _enabled_for[0] = _PENDING


def _enabled() -> bool:
    session = _enabled_for[0]
    return session is not None and session is rlmetrics.current()


@hookimpl
def telemetry_started(telemetry: Any) -> None:
    pending = _enabled_for[0] is _PENDING
    _enabled_for[0] = None  # an earlier session's choice does not carry over
    if pending and telemetry.exporting:
        _enabled_for[0] = telemetry
        _install_gc_callback()


@resets_process_state
def _forget_choices() -> None:
    # enable_runtime_metrics() and report_file_descriptors_as() choose for the process.
    global _fd_names
    _fd_names = frozenset({FD_COUNT})
    _enabled_for[0] = None
    _remove_gc_callback()


@hookimpl
def telemetry_stopping() -> None:
    # The series stay on for the final export (which drains the last pauses); the handle
    # they are enabled for is closed, so a later session starts with them off.
    _remove_gc_callback()
