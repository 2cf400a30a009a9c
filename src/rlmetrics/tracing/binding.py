"""The OpenTelemetry side of tracing: the tracer ``telemetry.start`` binds, and the API calls a
scope makes while it is bound.

Imported by every process that times a phase, this module imports no OpenTelemetry module
itself: :class:`Binding` does, when tracing starts, so a process that never traces never
imports OpenTelemetry for it.
"""

from __future__ import annotations

import os
from typing import Any

from .._warn import describe_value, warn_once
from ._state import state
from .propagation import TRACEPARENT_ENV, TRACESTATE_ENV
from .scopes import close_open_scopes, step_here

__all__ = ["Binding", "bind", "tracing", "unbind"]


class Binding:
    """The tracer and the API calls a scope makes, imported when tracing starts."""

    def __init__(self, tracer: Any) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.tracer = tracer
        self.get_current = context.get_current
        self.attach = context.attach
        self.detach = context.detach
        self.get_current_span = trace.get_current_span
        self.set_span_in_context = trace.set_span_in_context
        self.error = StatusCode.ERROR
        self.status = Status
        self.propagator = TraceContextTextMapPropagator()
        self.process_parent = self._from_environment()

    def _from_environment(self) -> Any:
        """The context ``TRACEPARENT`` (and ``TRACESTATE``) name, or None."""
        parent = os.environ.get(TRACEPARENT_ENV, "").strip()
        if not parent:
            return None
        carrier = {"traceparent": parent}
        trace_state = os.environ.get(TRACESTATE_ENV, "").strip()
        if trace_state:
            carrier["tracestate"] = trace_state
        context = self.propagator.extract(carrier)
        if not self.get_current_span(context).get_span_context().is_valid:
            warn_once(
                "tracing:traceparent",
                f"rlmetrics: {TRACEPARENT_ENV} is not a W3C traceparent "
                f"({describe_value(parent)}); this process's spans start their own traces",
            )
            return None
        return context

    def parent(self, joins_open_step: bool = True) -> Any:
        """The context a new span starts in: the current one if it holds a span; else (with
        ``joins_open_step``: not for a step) the innermost open step's (a phase on another
        thread belongs to the step the loop is in); else the one this process was started
        in (``TRACEPARENT``); else a new trace. A current span that has ended is no parent:
        this context's step is."""
        current = self.get_current()
        span = self.get_current_span(current)
        if span.get_span_context().is_valid:
            if getattr(span, "end_time", None) is None:
                return current
            # The current span has ended (a phase ended in another context, such as an
            # async generator's closed by the event loop): the span goes under this
            # context's step instead, as a thread's does, not under an ended span.
            step = step_here()
            if step is not None and step._span is not None:
                return self.set_span_in_context(step._span, current)
        steps = state.steps
        if steps and joins_open_step:
            span = steps[-1]._span
            if span is not None:
                return self.set_span_in_context(span, current)
        if self.process_parent is not None:
            return self.process_parent
        return current

    def start(
        self, name: str, attributes: dict[str, Any], start_ns: int, joins_open_step: bool = True
    ) -> tuple[Any, Any]:
        parent = self.parent(joins_open_step)
        span = self.tracer.start_span(name, parent, attributes=attributes, start_time=start_ns)
        return span, self.attach(self.set_span_in_context(span, parent))

    def leave(self, token: Any, span: Any) -> None:
        """Leave the context that made ``span`` current. Left after the scope around it (a
        generator closed after its step ended), that puts back a context whose span has
        ended: the context current before is kept instead, so no later span starts under
        an ended one."""
        before = self.get_current()
        self.detach(token)
        if self.get_current_span(before) is span:  # it was the current one: in order
            return
        if getattr(self.get_current_span(), "end_time", None) is not None:
            self.attach(before)

    def fail(self, span: Any, error: BaseException) -> None:
        span.set_status(self.status(self.error, type(error).__name__))
        span.record_exception(error)

    def carrier(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        self.propagator.inject(carrier, self.parent())
        return carrier


def bind(tracer: Any) -> None:
    """Start recording phases and steps as spans on ``tracer`` (``telemetry.start`` does)."""
    state.binding = Binding(tracer)


def unbind() -> None:
    """Stop recording spans; open scopes are closed first (``telemetry.shutdown`` does)."""
    close_open_scopes("still open at telemetry shutdown")
    state.binding = None


def tracing() -> bool:
    """Whether phases and steps are recorded as spans now (telemetry started with a span
    exporter)."""
    return state.binding is not None
