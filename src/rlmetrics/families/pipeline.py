"""rlmetrics' own delivery: what the exporters sent and what the backends lost.

A metrics pipeline that fails quietly is worse than none: the dashboard goes flat and nobody
knows whether the run or the telemetry stopped. These series make the pipeline's failures
visible where the alerts can see them:

- ``rlmetrics.exporter.exports``: exports each push exporter (OTLP, console) attempted, by
  ``rlmetrics.exporter`` (the name ``start()`` was given) and ``rlmetrics.export.outcome``
  (``success``, ``failure``). A failed OTLP export is counted here even while the collector it
  failed to reach is down, so a Prometheus scrape of the same process shows it.
- ``rlmetrics.backend.dropped``: rows a queued backend (W&B, MLflow…) dropped because it did
  not keep up, by ``rlmetrics.backend``.
- ``rlmetrics.backend.failed``: rows a backend raised on, by ``rlmetrics.backend``.

All three are observable counters read at collection time, cumulative since the telemetry
session (exports) or since the Logger was created (backend rows); a pull exporter such as
Prometheus has no exports to count: its failures are the scraper's (``up == 0``).
"""

from __future__ import annotations

from ..health import backend_rows, export_tallies
from ..registry import declare
from ..spec import OPEN, Kind, MetricSpec, Observation

__all__ = [
    "BACKEND_ATTR",
    "BACKEND_DROPPED",
    "BACKEND_FAILED",
    "EXPORTER_ATTR",
    "EXPORTS",
    "GROUP",
    "OUTCOME_ATTR",
]

GROUP = "rlmetrics.pipeline"
EXPORTS = "rlmetrics.exporter.exports"
BACKEND_DROPPED = "rlmetrics.backend.dropped"
BACKEND_FAILED = "rlmetrics.backend.failed"
EXPORTER_ATTR = "rlmetrics.exporter"
OUTCOME_ATTR = "rlmetrics.export.outcome"
BACKEND_ATTR = "rlmetrics.backend"

#: Exporter and backend names a process may report; each is a name given in code.
_MAX_NAMES = 32


def _observe_exports() -> list[Observation]:
    observed: list[Observation] = []
    for name, tally in export_tallies():
        observed.append(
            (tally.exports - tally.failures, {EXPORTER_ATTR: name, OUTCOME_ATTR: "success"})
        )
        observed.append((tally.failures, {EXPORTER_ATTR: name, OUTCOME_ATTR: "failure"}))
    return observed


def _observe_backends(field: str) -> list[Observation]:
    return [(rows, {BACKEND_ATTR: name}) for name, rows in backend_rows(field).items()]


declare(
    GROUP,
    [
        MetricSpec(
            EXPORTS,
            Kind.OBSERVABLE_COUNTER,
            unit="{export}",
            description="Exports a push exporter attempted, by exporter and outcome",
            attributes={EXPORTER_ATTR: OPEN, OUTCOME_ATTR: {"success", "failure"}},
            max_series=2 * _MAX_NAMES,
            callback=_observe_exports,
        ),
        MetricSpec(
            BACKEND_DROPPED,
            Kind.OBSERVABLE_COUNTER,
            unit="{row}",
            description="Rows a queued backend dropped because it did not keep up",
            attributes={BACKEND_ATTR: OPEN},
            max_series=_MAX_NAMES,
            callback=lambda: _observe_backends("dropped"),
        ),
        MetricSpec(
            BACKEND_FAILED,
            Kind.OBSERVABLE_COUNTER,
            unit="{row}",
            description="Rows a backend raised on (lost to that backend only)",
            attributes={BACKEND_ATTR: OPEN},
            max_series=_MAX_NAMES,
            callback=lambda: _observe_backends("failed"),
        ),
    ],
)
