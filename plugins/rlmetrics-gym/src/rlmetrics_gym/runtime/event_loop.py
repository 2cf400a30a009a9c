"""How late the event loop runs what it was asked to: ``gym.event_loop.lag_ms`` (and
optionally ``gym.event_loop.tasks``).

:func:`start_event_loop_sampler` runs one coroutine per loop that sleeps one interval and
measures how late it woke; optionally it also counts the loop's tasks. It ends with the loop
(``asyncio.run`` cancels it) or with :meth:`EventLoopSampler.stop`; a loop never has two. Both
series are recorded, so a process that never samples has no instrument for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator

import rlmetrics
from rlmetrics import Kind, MetricSpec, warn_once
from rlmetrics.spec import SUM

from .._intervals import checked_interval
from ._switch import GROUP

__all__ = [
    "EVENT_LOOP_ATTR",
    "EVENT_LOOP_ROLES",
    "LAG_MS",
    "SPECS",
    "TASKS",
    "EventLoopSampler",
    "event_loop_sampler",
    "start_event_loop_sampler",
    "wake_lag_ms",
]

LAG_MS = "gym.event_loop.lag_ms"
TASKS = "gym.event_loop.tasks"

EVENT_LOOP_ATTR = "nemo.gym.event_loop"
#: A server's own loop, the head server's loop inside the supervisor, the rollout driver's.
EVENT_LOOP_ROLES: frozenset[str] = frozenset({"server", "head_server", "driver"})

_LAG_BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)

SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        LAG_MS,
        Kind.HISTOGRAM,
        unit="ms",
        description="How late a sleeping coroutine wakes up, sampled once per interval: the "
        "time the event loop was busy with other work when it should have run.",
        attributes={EVENT_LOOP_ATTR: EVENT_LOOP_ROLES},
        buckets=_LAG_BUCKETS_MS,
        reduce=SUM,
    ),
    MetricSpec(
        TASKS,
        Kind.GAUGE,
        unit="{task}",
        description="Asyncio tasks that exist on the loop (resident work, not a queue), when "
        "the sampler was started with task_count=True.",
        attributes={EVENT_LOOP_ATTR: EVENT_LOOP_ROLES},
        reduce=SUM,
    ),
)

rlmetrics.declare(GROUP, SPECS, on_use=True)

_EVENT_LOOP_ATTRS: dict[str, dict[str, str]] = {
    role: {EVENT_LOOP_ATTR: role} for role in EVENT_LOOP_ROLES
}


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
    interval_s = checked_interval("start_event_loop_sampler", interval_s)
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
