"""The health of a run, as the Prometheus endpoint's health path answers it.

``GET /health`` on the endpoint (``http://127.0.0.1:9464/health`` by default) returns JSON: the
newest step, when it was logged and how long ago, the stall bound, each exporter's state and
each backend's lost rows. The status is

- ``ok`` (HTTP 200): a step arrived within the stall limit;
- ``starting`` (200): no step yet, and telemetry started within the limit;
- ``stalled`` (503): nothing for longer than the limit (counted from the newest step, or from
  telemetry's start when there is none).

The limit is :class:`~rlmetrics.liveness.StallRule`'s, the rule the ``RLStepStalled`` alert
applies too: ``stall_factor`` times the median step interval, at least ``stall_min_s``;
before 20 intervals are known, ``stall_after_s``. Each is a Prometheus exporter option
(``start(exporters={"prometheus": {"stall_after_s": 900}})``); ``stall_after_s`` also comes
from ``RLMETRICS_STALL_AFTER_S``. A load balancer, a Kubernetes probe or a cron job can read the
status code alone; the body says why.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

from . import liveness
from .backends.worker import live_backends
from .exporters import push_exporter
from .exporters.tally import ExportTally
from .liveness import DEFAULT_STALL_BOUND_S, StallRule
from .telemetry import TelemetryError, current

__all__ = [
    "DEFAULT_STALL_AFTER_S",
    "HEALTH_PATH",
    "STALL_AFTER_ENV",
    "backend_rows",
    "export_tallies",
    "health",
    "stall_after_s",
    "stall_rule",
]

#: The path the Prometheus endpoint answers the health check on.
HEALTH_PATH = "/health"
#: Seconds without a new step after which the run is reported stalled before its median step
#: interval is known. Raise it for runs whose setup or first steps take longer.
DEFAULT_STALL_AFTER_S = DEFAULT_STALL_BOUND_S
STALL_AFTER_ENV = "RLMETRICS_STALL_AFTER_S"


def _positive(source: str, value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TelemetryError(f"{source}: {what} must be a number")
    if not (math.isfinite(value) and value > 0):
        raise TelemetryError(f"{source}: {what} must be a positive number")
    return float(value)


def stall_after_s(option: float | None = None) -> float:
    """The stall bound before the median step interval is known: ``option`` when given, else
    ``RLMETRICS_STALL_AFTER_S``, else the default. A bound that is not a positive number of
    seconds raises :class:`TelemetryError` naming where it came from."""
    source, value = "stall_after_s", option
    if value is None:
        text = os.environ.get(STALL_AFTER_ENV, "").strip()
        if not text:
            return DEFAULT_STALL_AFTER_S
        source = f"{STALL_AFTER_ENV}={text!r}"
        try:
            value = float(text)
        except ValueError:
            value = math.nan
    return _positive(source, value, "the stall bound (seconds)")


def stall_rule(
    bound_s: float | None = None, factor: float | None = None, min_s: float | None = None
) -> StallRule:
    """The stall rule of the Prometheus exporter's options ``stall_after_s``, ``stall_factor``
    and ``stall_min_s`` (each None for its default); a value that is not a positive number
    raises :class:`TelemetryError` naming the option."""
    defaults = StallRule()
    return StallRule(
        factor=defaults.factor
        if factor is None
        else _positive("stall_factor", factor, "the stall factor (median step intervals)"),
        min_s=defaults.min_s
        if min_s is None
        else _positive("stall_min_s", min_s, "the shortest stall (seconds)"),
        bound_s=stall_after_s(bound_s),
    )


def export_tallies() -> Iterator[tuple[str, ExportTally]]:
    """``(exporter name, tally)`` of each push exporter of the running telemetry (the pull
    ones, such as Prometheus', export nothing to count)."""
    handle = current()
    if handle is None:
        return
    for name, exporter in handle.exporters.items():
        tally = getattr(push_exporter(exporter.reader), "rlmetrics_tally", None)
        if isinstance(tally, ExportTally):
            yield name, tally


def backend_rows(field: str) -> Mapping[str, int]:
    """``{backend name: rows}`` of one count (``dropped``, ``failed``) summed over the
    backends of every live Logger."""
    rows: dict[str, int] = {}
    for backend in live_backends():
        count = getattr(backend, field, None)
        if isinstance(count, int):
            rows[backend.name] = rows.get(backend.name, 0) + count
    return rows


def _exporters() -> dict[str, dict[str, Any]]:
    handle = current()
    if handle is None:
        return {}
    tallies = dict(export_tallies())
    states: dict[str, dict[str, Any]] = {}
    for name, exporter in handle.exporters.items():
        state: dict[str, Any] = {}
        if exporter.address is not None:
            state["address"] = f"{exporter.address[0]}:{exporter.address[1]}"
        tally = tallies.get(name)
        if tally is not None:
            last = tally.last_succeeded
            state.update(
                exports=tally.exports,
                failures=tally.failures,
                last_export=None if last is None else ("success" if last else "failure"),
                last_export_time=tally.last_time,
            )
        states[name] = state
    return states


def _backends() -> dict[str, dict[str, int]]:
    states: dict[str, dict[str, int]] = {}
    for backend in live_backends():
        state = states.setdefault(backend.name, {})
        for field in ("dropped", "failed"):
            count = getattr(backend, field, None)
            if isinstance(count, int):
                state[field] = state.get(field, 0) + count
        queued = getattr(backend, "qsize", None)
        if callable(queued):
            state["queued"] = state.get("queued", 0) + int(queued())
    return states


def health(rule: StallRule) -> tuple[int, dict[str, Any]]:
    """``(HTTP status, JSON body)`` of the health path, now, under stall rule ``rule``."""
    snapshot = liveness.liveness.snapshot()
    now = liveness.clock()
    since = snapshot.last_step_time
    silent, stall_after = liveness.silence(snapshot, rule, now)
    if silent is not None and silent > stall_after:
        status = "stalled"
    elif snapshot.step is None:
        status = "starting"
    else:
        status = "ok"
    handle = current()
    body: dict[str, Any] = {
        "status": status,
        "run_id": handle.run_id if handle is not None else None,
        "step": snapshot.step,
        "last_step_time": snapshot.last_step_time,
        "seconds_since_last_step": None if since is None else max(0.0, now - since),
        "seconds_silent": silent,
        "stall_after_s": stall_after,
        "stall_rule": {"factor": rule.factor, "min_s": rule.min_s, "bound_s": rule.bound_s},
        "step_interval_median_s": snapshot.interval_median_s,
        "exporters": _exporters(),
        "backends": _backends(),
    }
    return (503 if status == "stalled" else 200), body
