"""Outbound HTTP: requests in flight and the aiohttp connection pool in front of them.

- ``gym.http.client.requests.in_flight``: outbound requests still waiting for their response
  headers, by destination server.
- ``gym.http.connection_pool.connect_total``: every connection acquisition (aiohttp
  ``connect()`` call), including ones that later fail or are abandoned, by destination.
- ``gym.http.connection_pool.queue_duration_ms``: one sample per acquisition that had to queue
  for a pool slot (repeated waiter wake-ups within it combined), by destination, outcome
  (``ok``; ``abandoned`` when the wait ended before a slot came: a timeout or a cancellation)
  and the constraint that made it wait (``total``, ``per_host``, ``unknown``). Acquisitions that
  got a slot at once record nothing, so queued samples / ``connect_total`` is the fraction of
  acquisitions that queued.
- ``gym.http.connection_pool.connect_duration_ms``: opening one new pooled connection (DNS, TCP,
  TLS); reused connections record nothing, failed opens neither.

Recorded through aiohttp's own hooks: a ``TraceConfig`` (:func:`trace_config`) and a
``TCPConnector`` subclass (:func:`pool_connector`) that counts acquisitions and knows which
limit is full. :func:`instrumented_session` builds a ``ClientSession`` with both. The per-request
work is a few integer updates read by observable callbacks at export: no OpenTelemetry call per
request. The destination is ``nemo.gym.http.destination.server.name``: set it around a call with
:func:`http_destination` (a configured server name, ``remote_agent_service``…); unlabelled calls
are ``external``.

aiohttp is an optional dependency (the ``aiohttp`` extra): this module declares its series
without it and imports it only when a trace config or connector is built.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec, hookimpl, resets_process_state
from rlmetrics.spec import SUM

from ._attribute_values import SERVER_NAME
from ._context import reset_context_var
from ._tally import Tally

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "CONNECT_DURATION",
    "CONNECT_TOTAL",
    "CONSTRAINTS",
    "CONSTRAINT_ATTR",
    "DESTINATION_ATTR",
    "EXTERNAL",
    "GROUP",
    "IN_FLIGHT",
    "OVERFLOW",
    "QUEUE_DURATION",
    "QUEUE_OUTCOMES",
    "QUEUE_OUTCOME_ATTR",
    "REMOTE_AGENT_SERVICE",
    "SPECS",
    "current_destination",
    "destination_value",
    "http_destination",
    "instrumented_session",
    "pool_connector",
    "telemetry_started",
    "trace_config",
]

GROUP = "gym.http_client"
IN_FLIGHT: Final = "gym.http.client.requests.in_flight"
QUEUE_DURATION: Final = "gym.http.connection_pool.queue_duration_ms"
CONNECT_DURATION: Final = "gym.http.connection_pool.connect_duration_ms"
CONNECT_TOTAL: Final = "gym.http.connection_pool.connect_total"

DESTINATION_ATTR: Final = "nemo.gym.http.destination.server.name"
QUEUE_OUTCOME_ATTR: Final = "nemo.gym.http.connection_pool.queue.outcome"
CONSTRAINT_ATTR: Final = "nemo.gym.http.connection_pool.constraint"

QUEUE_OUTCOMES: Final = frozenset({"ok", "abandoned"})
CONSTRAINTS: Final = frozenset({"total", "per_host", "unknown"})

#: Unlabelled direct calls.
EXTERNAL: Final = "external"
#: Calls to the remote agent's external service.
REMOTE_AGENT_SERVICE: Final = "remote_agent_service"
#: Destinations beyond :data:`MAX_DESTINATIONS` distinct names are counted under this one.
OVERFLOW: Final = "overflow"
MAX_DESTINATIONS: Final = 64

# A free pool slot costs microseconds; a saturated pool in front of a slow model, seconds.
_QUEUE_BUCKETS = (
    *(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500),
    *(1_000, 2_500, 5_000, 10_000, 30_000, 60_000),
)
# Loopback TCP: ~0.1 ms; a cross-region TLS handshake: hundreds of ms; a dead host: the timeout.
_CONNECT_BUCKETS = (
    *(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500),
    *(1_000, 2_500, 5_000, 10_000, 30_000),
)

_in_flight: Tally[str] = Tally(overflow=OVERFLOW, max_keys=MAX_DESTINATIONS + 1, group=GROUP)
_connects: Tally[str] = Tally(overflow=OVERFLOW, max_keys=MAX_DESTINATIONS + 1, group=GROUP)


def _by_destination(destination: str) -> Mapping[str, str]:
    return {DESTINATION_ATTR: destination}


SPECS: tuple[MetricSpec, ...] = (
    MetricSpec(
        IN_FLIGHT,
        Kind.OBSERVABLE_UP_DOWN_COUNTER,
        unit="{request}",
        description="Outbound HTTP requests still waiting for their response headers.",
        attributes={DESTINATION_ATTR: OPEN},
        max_series=MAX_DESTINATIONS + 1,
        callback=lambda: _in_flight.observations(_by_destination),
        reduce=SUM,
    ),
    MetricSpec(
        QUEUE_DURATION,
        Kind.HISTOGRAM,
        unit="ms",
        description="Time one queued connection acquisition waited for an aiohttp pool slot.",
        attributes={
            DESTINATION_ATTR: OPEN,
            QUEUE_OUTCOME_ATTR: QUEUE_OUTCOMES,
            CONSTRAINT_ATTR: CONSTRAINTS,
        },
        max_series=(MAX_DESTINATIONS + 1) * len(QUEUE_OUTCOMES) * len(CONSTRAINTS),
        buckets=_QUEUE_BUCKETS,
        reduce=SUM,
    ),
    MetricSpec(
        CONNECT_DURATION,
        Kind.HISTOGRAM,
        unit="ms",
        description="Time to open one new pooled connection (DNS, TCP and TLS setup).",
        attributes={DESTINATION_ATTR: OPEN},
        max_series=MAX_DESTINATIONS + 1,
        buckets=_CONNECT_BUCKETS,
        reduce=SUM,
    ),
    MetricSpec(
        CONNECT_TOTAL,
        Kind.OBSERVABLE_COUNTER,
        unit="{connection}",
        description="Outbound aiohttp connection acquisitions (connect() calls), including "
        "ones that later fail or are abandoned.",
        attributes={DESTINATION_ATTR: OPEN},
        max_series=MAX_DESTINATIONS + 1,
        callback=lambda: _connects.observations(_by_destination),
        reduce=SUM,
    ),
)

rlmetrics.declare(GROUP, SPECS, on_use=True)

# -- destinations -------------------------------------------------------------------------------

_destination: contextvars.ContextVar[str] = contextvars.ContextVar(
    "rlmetrics_gym_http_destination", default=EXTERNAL
)
_known: set[str] = {EXTERNAL, REMOTE_AGENT_SERVICE}
_known_lock = threading.Lock()


@resets_process_state
def _forget_destinations() -> None:
    # The names seen count toward MAX_DESTINATIONS: left over, they would push a later test's
    # destinations into "overflow".
    with _known_lock:
        _known.clear()
        _known.update((EXTERNAL, REMOTE_AGENT_SERVICE))
    _in_flight.reset()
    _connects.reset()


def destination_value(name: Any) -> str:
    """The attribute value for a destination: the server name when it is one (template
    ``[A-Za-z0-9][A-Za-z0-9_.-]{0,63}``), ``external`` otherwise; past
    :data:`MAX_DESTINATIONS` distinct names, ``overflow``."""
    if type(name) is str and name in _known:  # the common case: a name seen before
        return name
    if not isinstance(name, str) or not SERVER_NAME.fullmatch(name):
        return EXTERNAL
    with _known_lock:
        if name not in _known and len(_known) >= MAX_DESTINATIONS:
            return OVERFLOW
        _known.add(name)
    return name


def current_destination() -> str:
    """The destination calls made here are labelled with."""
    return _destination.get()


class http_destination:
    """Label the outbound calls made inside the block (in this task or thread) with
    destination server ``name``: ``with http_destination("policy_model"): ...``; the block
    gets the value actually used (see :func:`destination_value`).

    A class rather than a generator-based context manager: it wraps every outbound call, so
    its own cost is part of the request path.
    """

    __slots__ = ("_token", "value")

    def __init__(self, name: str) -> None:
        self.value = destination_value(name)
        self._token: contextvars.Token[str] | None = None

    def __enter__(self) -> str:
        self._token = _destination.set(self.value)
        return self.value

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            reset_context_var(_destination, self._token)
            self._token = None


# -- aiohttp ----------------------------------------------------------------------------------


def trace_config() -> aiohttp.TraceConfig:
    """A new ``aiohttp.TraceConfig`` recording in-flight requests, and — with a
    :func:`pool_connector` — the pool's queue waits and connection opens."""
    from ._client_aiohttp import build_trace_config

    return build_trace_config()


def pool_connector(**connector_kwargs: Any) -> aiohttp.TCPConnector:
    """An ``aiohttp.TCPConnector`` (same arguments: ``limit``, ``limit_per_host``…) that counts
    connection acquisitions and times queue waits and connection opens."""
    from ._client_aiohttp import PoolMetricsConnector

    return PoolMetricsConnector(**connector_kwargs)


def instrumented_session(
    *, connector_kwargs: Mapping[str, Any] | None = None, **session_kwargs: Any
) -> aiohttp.ClientSession:
    """An ``aiohttp.ClientSession`` with a :func:`pool_connector` and :func:`trace_config`
    (added to any ``trace_configs`` given). Call it inside the event loop that will use it."""
    import aiohttp

    if "connector" in session_kwargs:
        raise TypeError(
            "instrumented_session builds its own connector; pass its arguments as "
            "connector_kwargs={...}"
        )
    traces = [*(session_kwargs.pop("trace_configs", None) or ()), trace_config()]
    return aiohttp.ClientSession(
        connector=pool_connector(**(connector_kwargs or {})), trace_configs=traces, **session_kwargs
    )


@hookimpl
def telemetry_started() -> None:
    # connect_total is a cumulative count since telemetry started, like a synchronous counter
    # would be; in_flight is a level and must keep counting what is already in flight.
    _connects.reset()
