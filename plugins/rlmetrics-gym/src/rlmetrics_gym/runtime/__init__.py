"""How the process itself behaves: event-loop lag, garbage collections and OS process usage.

One module per source, none on a request's path:

- :mod:`~rlmetrics_gym.runtime.event_loop`: the event-loop lag sampler
  (:func:`start_event_loop_sampler`, one per loop);
- :mod:`~rlmetrics_gym.runtime.garbage_collector`: ``gym.gc.*`` from ``gc.callbacks`` (the
  callback does arithmetic on preallocated arrays only; the exporter's thread reads them);
- :mod:`~rlmetrics_gym.runtime.process`: ``process.*`` through psutil, at collection.

The garbage-collector and process series are exported once the process asks for them with
:func:`enable_runtime_metrics` (a Gym server, supervisor or driver does, where it sets up
telemetry): only then are their observable instruments created, and the gc callback is
installed only while they are exported. A trainer that merely has this distribution installed
pays nothing for them at collection. Every public name of the three modules is importable from
here, as it was when they were one module.
"""

from __future__ import annotations

from typing import Any

import rlmetrics
from rlmetrics import hookimpl, resets_process_state

from . import _switch, garbage_collector, process
from ._switch import GROUP
from .event_loop import (
    EVENT_LOOP_ATTR,
    EVENT_LOOP_ROLES,
    LAG_MS,
    TASKS,
    EventLoopSampler,
    event_loop_sampler,
    start_event_loop_sampler,
    wake_lag_ms,
)
from .event_loop import SPECS as _EVENT_LOOP_SPECS
from .garbage_collector import (
    GC_COLLECTED,
    GC_COLLECTIONS,
    GC_COUNT,
    GC_GENERATION_ATTR,
    GC_PAUSE_MS,
    GC_UNCOLLECTABLE,
    PAUSE_RING_SIZE,
    intact_pauses,
)
from .process import (
    CPU_MODE_ATTR,
    CPU_TIME,
    FD_COUNT,
    FD_COUNT_NAMES,
    FD_COUNT_UNIX,
    MEMORY_USAGE,
    THREAD_COUNT,
    report_file_descriptors_as,
)

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

#: Every runtime series, in the order the three modules declare them.
SPECS = (*_EVENT_LOOP_SPECS, *garbage_collector.SPECS, *process.SPECS)


def enable_runtime_metrics() -> None:
    """Export the ``gym.gc.*`` and ``process.*`` series (and time GC pauses) for the running
    telemetry session, or for the next one when none runs yet. Call it where a Gym process
    sets up its telemetry; it is idempotent. The event-loop series have their own switch,
    :func:`start_event_loop_sampler`."""
    rlmetrics.activate(GROUP)
    handle = rlmetrics.current()
    if handle is not None and handle.exporting:
        _switch.enabled_for[0] = handle
        garbage_collector._install_gc_callback()
    else:
        _switch.enabled_for[0] = _switch.PENDING


# The garbage-collector and process series belong to the processes that ask for them (a Gym
# server, supervisor or driver): a process that merely has this distribution installed, such as
# a trainer exporting only its own families, exports none of them.


@hookimpl
def telemetry_started(telemetry: Any) -> None:
    pending = _switch.enabled_for[0] is _switch.PENDING
    _switch.enabled_for[0] = None  # an earlier session's choice does not carry over
    if pending and telemetry.exporting:
        _switch.enabled_for[0] = telemetry
        garbage_collector._install_gc_callback()


@resets_process_state
def _forget_choices() -> None:
    # enable_runtime_metrics() and report_file_descriptors_as() choose for the process.
    process._forget_names()
    _switch.enabled_for[0] = None
    garbage_collector._remove_gc_callback()


@hookimpl
def telemetry_stopping() -> None:
    # The series stay on for the final export (which drains the last pauses); the handle
    # they are enabled for is closed, so a later session starts with them off.
    garbage_collector._remove_gc_callback()
