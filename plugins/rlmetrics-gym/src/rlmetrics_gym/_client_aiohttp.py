"""The aiohttp side of :mod:`rlmetrics_gym.http_client`: a trace config and a connector
subclass. Imported only when one is built, so aiohttp stays an optional dependency.

How one acquisition is followed: :meth:`PoolMetricsConnector.connect` (aiohttp's documented
``BaseConnector.connect``) opens an :class:`_Acquisition` and puts it in a context variable for
the duration of the call. aiohttp awaits the trace signals of that acquisition inline, in the
same task, so the trace callbacks find it there: ``queued_start``/``queued_end`` bracket each
wait for a pool slot (a wait can be woken and re-queued: the first start and the last wake
bound the sample), ``create_start``/``create_end`` bracket opening a new connection. When
``connect()`` returns or raises the acquisition is settled: ``ok`` if the wait ended with a
slot, ``abandoned`` if ``connect()`` left while still waiting (a connect timeout or a
cancellation).

Which limit made it wait is read from the connector's own held-connection count, kept from
aiohttp's public pieces only: +1 when a connection is being opened (aiohttp counts a
connection being opened against its limits) or handed out reused, -1 when the handed-out
``Connection`` is released or closed (its ``add_callback``) or an open fails. No private
aiohttp attribute is read.

Every callback is guarded: a telemetry failure never reaches the request.
"""

from __future__ import annotations

import contextvars
import time
from types import SimpleNamespace
from typing import Any

import aiohttp
from aiohttp.client_reqrep import ConnectionKey
from aiohttp.connector import Connection
from aiohttp.tracing import Trace

from rlmetrics import record, warn_once

from .http_client import (
    CONNECT_DURATION,
    CONSTRAINT_ATTR,
    DESTINATION_ATTR,
    GROUP,
    QUEUE_DURATION,
    QUEUE_OUTCOME_ATTR,
    _connects,
    _in_flight,
    current_destination,
)

__all__ = ["PoolMetricsConnector", "build_trace_config"]


class _Acquisition:
    """One ``connect()`` call's progress through the pool."""

    __slots__ = (
        "connector",
        "constraint",
        "create_started",
        "creating",
        "destination",
        "key",
        "queued_at",
        "waiting",
        "woken_at",
    )

    def __init__(self, connector: PoolMetricsConnector, key: ConnectionKey, destination: str):
        self.connector = connector
        self.key = key
        self.destination = destination
        self.queued_at: float | None = None
        self.woken_at = 0.0
        self.waiting = False
        self.constraint = "unknown"
        self.create_started: float | None = None
        self.creating = False

    def queue_started(self) -> None:
        if self.queued_at is None:  # the first wait decides the constraint and the start
            self.queued_at = time.perf_counter()
            self.constraint = self.connector._rlmetrics_constraint(self.key)
        self.waiting = True

    def queue_ended(self) -> None:
        self.waiting = False
        self.woken_at = time.perf_counter()

    def create_started_now(self) -> None:
        self.creating = True
        self.connector._rlmetrics_hold(self.key, 1)
        self.create_started = time.perf_counter()

    def create_ended(self) -> None:
        if self.create_started is not None:
            elapsed_ms = (time.perf_counter() - self.create_started) * 1000.0
            record(GROUP, {CONNECT_DURATION: elapsed_ms}, {DESTINATION_ATTR: self.destination})

    def settle(self) -> None:
        """``connect()`` returned or raised: record the queue sample, if it queued."""
        if self.queued_at is None:
            return
        if self.waiting:  # left while still waiting for a slot
            outcome, ended = "abandoned", time.perf_counter()
        else:
            outcome, ended = "ok", self.woken_at
        record(
            GROUP,
            {QUEUE_DURATION: (ended - self.queued_at) * 1000.0},
            {
                DESTINATION_ATTR: self.destination,
                QUEUE_OUTCOME_ATTR: outcome,
                CONSTRAINT_ATTR: self.constraint,
            },
        )


_current: contextvars.ContextVar[_Acquisition | None] = contextvars.ContextVar(
    "rlmetrics_gym_pool_acquisition", default=None
)


class PoolMetricsConnector(aiohttp.TCPConnector):
    """A ``TCPConnector`` that counts and follows each connection acquisition."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._rlmetrics_held_total = 0
        self._rlmetrics_held: dict[ConnectionKey, int] = {}

    def _rlmetrics_hold(self, key: ConnectionKey, delta: int) -> None:
        # Only ever called on the event loop thread that owns this connector.
        self._rlmetrics_held_total += delta
        held = self._rlmetrics_held.get(key, 0) + delta
        if held > 0:
            self._rlmetrics_held[key] = held
        else:
            self._rlmetrics_held.pop(key, None)

    def _rlmetrics_constraint(self, key: ConnectionKey) -> str:
        """Which limit is full, as aiohttp checks them: the total first, then per host."""
        if self.limit and self._rlmetrics_held_total >= self.limit:
            return "total"
        if self.limit_per_host and self._rlmetrics_held.get(key, 0) >= self.limit_per_host:
            return "per_host"
        return "unknown"

    async def connect(
        self, req: aiohttp.ClientRequest, traces: list[Trace], timeout: aiohttp.ClientTimeout
    ) -> Connection:
        acquisition = None
        token = None
        try:
            acquisition = _Acquisition(self, req.connection_key, current_destination())
            _connects.add(acquisition.destination)
            token = _current.set(acquisition)
        except Exception:
            warn_once("gym:http:connect", "rlmetrics-gym: following a pool acquisition failed")
        try:
            connection = await super().connect(req, traces, timeout)
        except BaseException:
            if acquisition is not None:
                self._settle(acquisition, None)
            raise
        finally:
            if token is not None:
                _current.reset(token)
        if acquisition is not None:
            self._settle(acquisition, connection)
        return connection

    def _settle(self, acquisition: _Acquisition, connection: Connection | None) -> None:
        try:
            key = acquisition.key
            if connection is None:
                if acquisition.creating:
                    self._rlmetrics_hold(key, -1)  # the open failed: aiohttp freed its slot
            else:
                if not acquisition.creating:
                    self._rlmetrics_hold(key, 1)  # a reused connection handed out
                connection.add_callback(lambda: self._rlmetrics_hold(key, -1))
            acquisition.settle()
        except Exception:
            warn_once("gym:http:settle", "rlmetrics-gym: recording a pool acquisition failed")


# -- trace callbacks --------------------------------------------------------------------------


def _guarded(where: str) -> None:
    warn_once(f"gym:http:trace:{where}", f"rlmetrics-gym: the {where} trace callback failed")


async def _on_request_start(_session: Any, context: SimpleNamespace, _params: Any) -> None:
    try:
        context.rlmetrics_destination = _in_flight.add(current_destination())
    except Exception:
        _guarded("request_start")


async def _on_request_done(_session: Any, context: SimpleNamespace, _params: Any) -> None:
    try:
        destination = getattr(context, "rlmetrics_destination", None)
        if destination is not None:
            context.rlmetrics_destination = None
            _in_flight.add(destination, -1)
    except Exception:
        _guarded("request_done")


async def _on_queued_start(_session: Any, _context: Any, _params: Any) -> None:
    try:
        acquisition = _current.get()
        if acquisition is not None:
            acquisition.queue_started()
    except Exception:
        _guarded("queued_start")


async def _on_queued_end(_session: Any, _context: Any, _params: Any) -> None:
    try:
        acquisition = _current.get()
        if acquisition is not None:
            acquisition.queue_ended()
    except Exception:
        _guarded("queued_end")


async def _on_create_start(_session: Any, _context: Any, _params: Any) -> None:
    try:
        acquisition = _current.get()
        if acquisition is not None:
            acquisition.create_started_now()
    except Exception:
        _guarded("create_start")


async def _on_create_end(_session: Any, _context: Any, _params: Any) -> None:
    try:
        acquisition = _current.get()
        if acquisition is not None:
            acquisition.create_ended()
    except Exception:
        _guarded("create_end")


def build_trace_config() -> aiohttp.TraceConfig:
    config = aiohttp.TraceConfig()
    config.on_request_start.append(_on_request_start)
    config.on_request_end.append(_on_request_done)
    config.on_request_exception.append(_on_request_done)
    config.on_connection_queued_start.append(_on_queued_start)
    config.on_connection_queued_end.append(_on_queued_end)
    config.on_connection_create_start.append(_on_create_start)
    config.on_connection_create_end.append(_on_create_end)
    return config
