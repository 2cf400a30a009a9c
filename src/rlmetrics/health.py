"""The health of a run, as the Prometheus endpoint's health path answers it.

``GET /health`` on the endpoint (``http://127.0.0.1:9464/health`` by default) returns JSON: the
newest step, when it was logged and how long ago, the stall bound, each exporter's state and
each backend's lost rows. The status is

- ``ok`` (HTTP 200): a step arrived within the bound;
- ``starting`` (200): no step yet, and telemetry started within the bound;
- ``stalled`` (503): nothing for longer than the bound (counted from the newest step, or from
  telemetry's start when there is none).

A load balancer, a Kubernetes probe or a cron job can read the status code alone; the body says
why. The bound is the Prometheus exporter's ``stall_after_s`` option
(``start(exporters={"prometheus": {"stall_after_s": 900}})``), else ``RLMETRICS_STALL_AFTER_S``,
else :data:`DEFAULT_STALL_AFTER_S`.
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
from .telemetry import TelemetryError, current

__all__ = [
    "DEFAULT_STALL_AFTER_S",
    "HEALTH_PATH",
    "STALL_AFTER_ENV",
    "backend_rows",
    "export_tallies",
    "health",
    "stall_after_s",
]

#: The path the Prometheus endpoint answers the health check on.
HEALTH_PATH = "/health"
#: Seconds without a new step after which the run is reported stalled (prime-rl's alert uses
#: the same ten minutes). Raise it for runs whose steps or setup take longer.
DEFAULT_STALL_AFTER_S = 600.0
STALL_AFTER_ENV = "RLMETRICS_STALL_AFTER_S"


def stall_after_s(option: float | None = None) -> float:
    """The stall bound: ``option`` when given, else ``RLMETRICS_STALL_AFTER_S``, else the
    default. A bound that is not a positive number of seconds raises :class:`TelemetryError`
    naming where it came from."""
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
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TelemetryError(f"{source}: the stall bound must be a number of seconds")
    if not (math.isfinite(value) and value > 0):
        raise TelemetryError(f"{source}: the stall bound must be a positive number of seconds")
    return float(value)


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


def health(stall_after: float) -> tuple[int, dict[str, Any]]:
    """``(HTTP status, JSON body)`` of the health path, now, with stall bound
    ``stall_after`` seconds."""
    snapshot = liveness.liveness.snapshot()
    now = liveness.clock()
    since = snapshot.last_step_time if snapshot.last_step_time is not None else None
    origin = since if since is not None else snapshot.started_time
    silent = None if origin is None else max(0.0, now - origin)
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
        "step_interval_median_s": snapshot.interval_median_s,
        "exporters": _exporters(),
        "backends": _backends(),
    }
    return (503 if status == "stalled" else 200), body
