"""This process as the OS sees it: ``process.*`` under the OpenTelemetry process semantic
conventions' names, units and ``cpu.mode`` attribute, read through psutil when the exporter
collects (only once :func:`~rlmetrics_gym.runtime.enable_runtime_metrics` asks for them)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import psutil

import rlmetrics
from rlmetrics import Kind, MetricSpec
from rlmetrics.spec import SUM

from ._switch import GROUP, enabled

__all__ = [
    "CPU_MODE_ATTR",
    "CPU_TIME",
    "FD_COUNT",
    "FD_COUNT_NAMES",
    "FD_COUNT_UNIX",
    "MEMORY_USAGE",
    "SPECS",
    "THREAD_COUNT",
    "report_file_descriptors_as",
]

CPU_TIME = "process.cpu.time"
MEMORY_USAGE = "process.memory.usage"
THREAD_COUNT = "process.thread.count"
#: The name the spec (and semconv before v1.39) uses for the open file descriptors.
FD_COUNT = "process.open_file_descriptor.count"
#: Its current semantic-convention name; report it with :func:`report_file_descriptors_as`.
FD_COUNT_UNIX = "process.unix.file_descriptor.count"
FD_COUNT_NAMES: tuple[str, ...] = (FD_COUNT, FD_COUNT_UNIX)
CPU_MODE_ATTR = "cpu.mode"

_USER = {CPU_MODE_ATTR: "user"}
_SYSTEM = {CPU_MODE_ATTR: "system"}


def _observe_cpu_time() -> list[tuple[float, Mapping[str, str]]]:
    if not enabled():
        return []
    times = _process().cpu_times()
    return [(times.user, _USER), (times.system, _SYSTEM)]


def _observe_memory_usage() -> list[tuple[float, Mapping[str, str]]]:
    return [(_process().memory_info().rss, {})] if enabled() else []


def _observe_thread_count() -> list[tuple[float, Mapping[str, str]]]:
    return [(_process().num_threads(), {})] if enabled() else []


def _observe_fd_count() -> list[tuple[float, Mapping[str, str]]]:
    return _fd_count(FD_COUNT)


def _observe_fd_count_unix() -> list[tuple[float, Mapping[str, str]]]:
    return _fd_count(FD_COUNT_UNIX)


SPECS: tuple[MetricSpec, ...] = (
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
        reduce=SUM,
    ),
    MetricSpec(
        MEMORY_USAGE,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="By",
        description="The amount of physical memory in use by this process (RSS).",
        callback=_observe_memory_usage,
        reduce=SUM,
    ),
    MetricSpec(
        THREAD_COUNT,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="{thread}",
        description="Threads in this process.",
        callback=_observe_thread_count,
        reduce=SUM,
    ),
    MetricSpec(
        FD_COUNT,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="{file_descriptor}",
        description="Open file descriptors of this process, where the platform reports them "
        "(deprecated semconv name of process.unix.file_descriptor.count).",
        callback=_observe_fd_count,
        reduce=SUM,
    ),
    MetricSpec(
        FD_COUNT_UNIX,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="{file_descriptor}",
        description="Open file descriptors of this process, where the platform reports them; "
        "exported only after report_file_descriptors_as() selects this name.",
        callback=_observe_fd_count_unix,
        reduce=SUM,
    ),
)

rlmetrics.declare(GROUP, SPECS, on_use=True)

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
    if name not in _fd_names or not enabled():
        return []
    num_fds = getattr(_process(), "num_fds", None)  # POSIX only
    return [] if num_fds is None else [(num_fds(), {})]


def _forget_names() -> None:
    global _fd_names
    _fd_names = frozenset({FD_COUNT})
