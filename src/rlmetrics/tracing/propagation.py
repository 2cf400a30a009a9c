"""A step's W3C trace context across processes.

As a carrier (:func:`trace_carrier`, entered on the other side with :func:`trace_context`:
a Ray task's argument) or in a child's environment (:func:`trace_env`, ``TRACEPARENT``): a
process started with ``TRACEPARENT`` parents every span that has no other parent on it, so a
worker's phases are children of the driver's step. Each is a no-op while not tracing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from .._warn import describe_value, warn_once
from ._state import state

__all__ = ["TRACEPARENT_ENV", "TRACESTATE_ENV", "trace_carrier", "trace_context", "trace_env"]

#: The environment carrier of W3C trace context (the OpenTelemetry convention for processes).
TRACEPARENT_ENV = "TRACEPARENT"
TRACESTATE_ENV = "TRACESTATE"


def trace_carrier() -> dict[str, str]:
    """The current span's W3C trace context (``traceparent``, ``tracestate``) as a dict to hand
    to another process (a Ray task's argument); ``{}`` when not tracing. On a thread with no
    span of its own, the innermost open step's."""
    binding = state.binding
    if binding is None:
        return {}
    try:
        return binding.carrier()
    except Exception:
        warn_once("tracing:carrier", "rlmetrics.trace_carrier failed; no context carried")
        return {}


def trace_env() -> dict[str, str]:
    """:func:`trace_carrier` as the environment variables a child process reads
    (``TRACEPARENT``, ``TRACESTATE``): its ``rlmetrics.start()`` then parents every span that
    has no other parent in that process on the current span."""
    carrier = trace_carrier()
    env = {}
    if carrier.get("traceparent"):
        env[TRACEPARENT_ENV] = carrier["traceparent"]
        if carrier.get("tracestate"):
            env[TRACESTATE_ENV] = carrier["tracestate"]
    return env


@contextlib.contextmanager
def trace_context(carrier: Mapping[str, str] | None) -> Iterator[None]:
    """Make the context a :func:`trace_carrier` holds current for the block, so spans begun
    inside are children of the span it came from (a worker's side of a Ray call). A no-op when
    not tracing or when the carrier holds no valid context (reported once)."""
    binding = state.binding
    token = None
    if binding is not None and carrier and not isinstance(carrier, Mapping):
        warn_once(
            "tracing:carrier-type",
            f"rlmetrics.trace_context takes the dict rlmetrics.trace_carrier() returns, got "
            f"{describe_value(carrier)}; no context entered (spans start their own traces)",
        )
    elif binding is not None and carrier:
        try:
            context = binding.propagator.extract(dict(carrier))
            if binding.get_current_span(context).get_span_context().is_valid:
                token = binding.attach(context)
            else:
                warn_once(
                    "tracing:carrier-invalid",
                    "rlmetrics.trace_context: the carrier holds no W3C traceparent; spans start "
                    "their own traces",
                )
        except Exception:
            warn_once("tracing:context", "rlmetrics.trace_context failed; no context entered")
    try:
        yield
    finally:
        if token is not None:
            with contextlib.suppress(Exception):
                binding.detach(token)  # type: ignore[union-attr]
