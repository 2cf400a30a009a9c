"""Startup stages: ``gym.server.startup_stage_duration_ms``, one point per stage of one server
process's own startup, recorded by that process.

Stages are contiguous: a :class:`StartupTimeline` starts when the process started and each
:meth:`~StartupTimeline.mark` ends the named stage at that instant, so one process's stages add
up to the time from its start to the moment it accepts connections. Stages that end before
telemetry is started (``interpreter_start``, ``load_config``…) are kept and recorded by the
first mark made while exporting — ``init_telemetry`` itself — so nothing is lost to the order
of startup.

Points carry ``nemo.gym.server.name``, ``nemo.gym.server.type``, ``nemo.gym.startup.stage``
(the closed list in :data:`STAGES`) and ``nemo.gym.server.worker`` (``true`` in a Uvicorn worker
of a multi-worker server, which reports its own stages from ``worker_start``; ``false`` in the
main process, which reports the stages up to the hand-off to Uvicorn).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Final

import psutil

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec, is_exporting, record, warn_once
from rlmetrics.spec import SUM

from ._attribute_values import SERVER_NAME, bounded, flag, member

__all__ = [
    "GROUP",
    "SERVER_NAME_ATTR",
    "SERVER_TYPES",
    "SERVER_TYPE_ATTR",
    "SPECS",
    "STAGES",
    "STAGE_ATTR",
    "STAGE_DURATION",
    "StartupTimeline",
    "WORKER_ATTR",
    "process_start_ns",
    "record_stage",
    "stage_attributes",
]

GROUP = "gym.startup"
STAGE_DURATION: Final = "gym.server.startup_stage_duration_ms"
SERVER_NAME_ATTR: Final = "nemo.gym.server.name"
SERVER_TYPE_ATTR: Final = "nemo.gym.server.type"
STAGE_ATTR: Final = "nemo.gym.startup.stage"
WORKER_ATTR: Final = "nemo.gym.server.worker"

#: The stages of a server's startup, in order.
STAGES: Final = (
    "venv_setup",
    "interpreter_start",
    "worker_start",
    "load_config",
    "init_ray",
    "init_server",
    "init_telemetry",
    "setup_webserver",
    "expose_tools_over_mcp",
    "configure_app",
    "uvicorn_startup",
)
#: Gym's server types; anything else is reported as ``other``.
SERVER_TYPES: Final = frozenset(
    {"resources_servers", "responses_api_agents", "responses_api_models", "orchestrator", "other"}
)
UNKNOWN_SERVER: Final = "unknown"

# From a reused venv (~0) to a cold dependency install or a model load (tens of minutes).
_BUCKETS = (
    *(1, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000),
    *(30_000, 60_000, 120_000, 300_000, 600_000, 1_800_000),
)

SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        STAGE_DURATION,
        Kind.HISTOGRAM,
        unit="ms",
        description="One stage of one server's own startup, recorded by that server.",
        attributes={
            SERVER_NAME_ATTR: OPEN,
            SERVER_TYPE_ATTR: SERVER_TYPES,
            STAGE_ATTR: frozenset(STAGES),
            WORKER_ATTR: {"true", "false"},
        },
        max_series=1000,
        buckets=_BUCKETS,
        reduce=SUM,
    ),
)

rlmetrics.declare(GROUP, SPECS)


def stage_attributes(
    stage: Any, server_name: Any, server_type: Any, worker: Any
) -> dict[str, str] | None:
    """The attributes of one stage point, or None for a stage outside :data:`STAGES` (it
    cannot be mapped to a stage without guessing, so it is not recorded)."""
    if not member(stage, STAGES):
        return None
    return {
        SERVER_NAME_ATTR: bounded(server_name, SERVER_NAME, UNKNOWN_SERVER),
        SERVER_TYPE_ATTR: server_type if member(server_type, SERVER_TYPES) else "other",
        STAGE_ATTR: stage,
        WORKER_ATTR: flag(worker),
    }


def record_stage(
    stage: str,
    duration_ms: float,
    *,
    server_name: str,
    server_type: str,
    worker: bool = False,
) -> bool:
    """Record one stage measured elsewhere (``venv_setup`` from the launch shell's timestamps).
    Returns whether it was recorded (False when not exporting or the stage is unknown).
    Never raises."""
    if not is_exporting():
        return False
    attributes = stage_attributes(stage, server_name, server_type, worker)
    if attributes is None:
        warn_once(
            "gym:startup:stage",
            f"rlmetrics-gym: startup stages are {', '.join(STAGES)}; a "
            f"{type(stage).__name__} stage outside them is not recorded",
        )
        return False
    record(GROUP, {STAGE_DURATION: duration_ms}, attributes)
    return True


def process_start_ns() -> int:
    """This process's start as Unix time in ns (what ``interpreter_start`` is timed from), to
    one clock tick (10 ms) on Linux."""
    started = _linux_start_ns()
    if started is not None:
        return started
    try:
        return int(psutil.Process().create_time() * 1e9)
    except Exception:
        return time.time_ns()


def _linux_start_ns() -> int | None:
    """The start from the kernel's own numbers, or None off Linux.

    psutil's ``create_time`` adds the start's ticks since boot to ``/proc/stat``'s ``btime``,
    which is whole seconds: the start it gives is up to a second early, all of which would be
    counted as ``interpreter_start``. The boot instant taken from the clocks is exact.
    """
    if not hasattr(time, "CLOCK_BOOTTIME"):
        return None
    try:
        with open("/proc/self/stat", "rb") as stat:
            # Fields after the ``(comm)``, which may hold spaces, start at field 3 (state);
            # field 22 is the start in clock ticks since boot.
            ticks = int(stat.read().rpartition(b")")[2].split()[19])
        booted_ns = time.time_ns() - time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        return booted_ns + ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _is_ns(value: object) -> bool:
    """An int count of nanoseconds from 0 (a float is seconds from ``time.time()``, a likely
    mistake: 1e9 times too small, it would make every stage decades long)."""
    return type(value) is int and value >= 0


class StartupTimeline:
    """One server process's contiguous startup stages.

    ``started_ns`` (Unix ns) is when the first stage began: by default this process's start,
    so the first mark (``interpreter_start``) covers interpreter start-up and imports; a worker
    passes the instant the main process handed off to Uvicorn. Wall-clock time, so a timestamp
    taken in another process (the supervisor, the launch shell) can start a timeline.
    """

    def __init__(
        self,
        server_name: str,
        server_type: str,
        *,
        worker: bool = False,
        started_ns: int | None = None,
    ) -> None:
        if started_ns is not None and not _is_ns(started_ns):
            raise ValueError(
                f"StartupTimeline(started_ns=...) takes Unix nanoseconds as an int "
                f"(time.time_ns()), got a {type(started_ns).__name__} {started_ns!r}"
            )
        self.server_name = server_name
        self.server_type = server_type
        self.worker = worker
        self._lock = threading.Lock()
        self._last_ns = process_start_ns() if started_ns is None else started_ns
        self._seen: set[str] = set()
        #: Stages ended but not yet recorded (telemetry was not exporting yet).
        self._pending: list[tuple[str, float]] = []
        #: Every stage ended so far, ``(stage, duration_ms)`` in order.
        self.stages: list[tuple[str, float]] = []

    def mark(self, stage: str, now_ns: int | None = None) -> float | None:
        """End ``stage`` now (or at ``now_ns``): its duration runs from the previous mark (or
        the timeline's start). Returns the duration in ms, or None when the stage is not in
        :data:`STAGES`, was already marked, or ends before the previous one (the clock stepped
        back). Records every stage still pending when telemetry is exporting. Never raises.
        """
        if now_ns is not None and not _is_ns(now_ns):
            warn_once(
                "gym:startup:mark:ns",
                f"rlmetrics-gym: StartupTimeline.mark(now_ns=...) takes Unix nanoseconds as an "
                f"int (time.time_ns()), got a {type(now_ns).__name__}; the stage is not recorded",
            )
            return None
        now = time.time_ns() if now_ns is None else now_ns
        with self._lock:
            problem = (
                "outside the stage list"
                if not member(stage, STAGES)
                else "marked twice"
                if stage in self._seen
                else "ending before the previous stage"
                if now < self._last_ns
                else None
            )
            if problem is not None:
                warn_once(
                    f"gym:startup:mark:{problem}",
                    f"rlmetrics-gym: a startup stage {problem} is not recorded",
                )
                return None
            duration_ms = (now - self._last_ns) / 1e6
            self._last_ns = now
            self._seen.add(stage)
            self.stages.append((stage, duration_ms))
            self._pending.append((stage, duration_ms))
        self.flush()
        return duration_ms

    def flush(self) -> int:
        """Record the stages still pending, if telemetry is exporting; returns how many."""
        if not is_exporting():
            return 0
        with self._lock:
            pending, self._pending = self._pending, []
        for stage, duration_ms in pending:
            record_stage(
                stage,
                duration_ms,
                server_name=self.server_name,
                server_type=self.server_type,
                worker=self.worker,
            )
        return len(pending)
