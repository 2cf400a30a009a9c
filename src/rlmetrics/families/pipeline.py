"""rlmetrics' own delivery: what the exporters sent and what the backends lost.

A metrics pipeline that fails quietly is worse than none: the dashboard goes flat and nobody
knows whether the run or the telemetry stopped. These counters make the pipeline's failures
visible where the alerts can see them:

- ``rlmetrics.exporter.exports``: exports each push exporter (OTLP, console) attempted, by
  ``rlmetrics.exporter`` (the name ``start()`` was given) and ``rlmetrics.export.outcome``
  (``success``, ``failure``). A failed OTLP export is counted here even while the collector it
  failed to reach is down, so a Prometheus scrape of the same process shows it.
- ``rlmetrics.exporter.spans.dropped``: spans an exporter lost, by ``rlmetrics.exporter`` and
  ``rlmetrics.drop.reason``: ``queue_full``, its batch span processor's queue
  (``OTEL_BSP_MAX_QUEUE_SIZE``) was full (spans ended faster than the exporter sent them: a
  burst of trajectories, a slow collector); ``export_failed``, in an export that failed (a
  span carries no totals a later export would resend, so these are lost for good).
- ``rlmetrics.backend.dropped``: rows a queued backend (W&B, MLflow…) dropped because it did
  not keep up (its queue was full, or its finish bound passed before it wrote them), by
  ``rlmetrics.backend``.
- ``rlmetrics.backend.failed``: rows a backend raised on, by ``rlmetrics.backend``.
- ``rlmetrics.values.dropped``: values the recording path dropped, by ``rlmetrics.series``
  (the declared series) and ``rlmetrics.drop.reason`` (``nan``, ``infinite``, ``negative``...):
  a NaN loss is no point of its own series, which keeps showing the last finite value, so it
  is counted here, where an alert (``RLValuesNotFinite``) sees it.

Each is counted when it happens, so a run whose pipeline loses nothing (and that has no push
exporter) pays nothing at collection: a counter exists from its first point on. A pull
exporter such as Prometheus' has no exports to count: its failures are the scraper's
(``up == 0``). The health path (:mod:`rlmetrics.health`) reports the same counts.
"""

from __future__ import annotations

from .. import hookimpl, instruments
from ..backends import worker
from ..exporters import span_drops
from ..exporters.tally import EXPORT_FAILED, QUEUE_FULL
from ..health import export_tallies
from ..registry import declare, record
from ..spec import OPEN, SUM, Kind, MetricSpec
from ..telemetry import current

__all__ = [
    "BACKEND_ATTR",
    "BACKEND_DROPPED",
    "BACKEND_FAILED",
    "DROP_REASON_ATTR",
    "EXPORTER_ATTR",
    "EXPORTS",
    "GROUP",
    "OUTCOME_ATTR",
    "SERIES_ATTR",
    "SPANS_DROPPED",
    "VALUES_DROPPED",
    "telemetry_started",
    "telemetry_stopping",
]

GROUP = "rlmetrics.pipeline"
EXPORTS = "rlmetrics.exporter.exports"
SPANS_DROPPED = "rlmetrics.exporter.spans.dropped"
BACKEND_DROPPED = "rlmetrics.backend.dropped"
BACKEND_FAILED = "rlmetrics.backend.failed"
EXPORTER_ATTR = "rlmetrics.exporter"
OUTCOME_ATTR = "rlmetrics.export.outcome"
DROP_REASON_ATTR = "rlmetrics.drop.reason"
BACKEND_ATTR = "rlmetrics.backend"
VALUES_DROPPED = "rlmetrics.values.dropped"
SERIES_ATTR = "rlmetrics.series"
#: Why the recording path dropped a value (``instruments._drop_cause``'s words).
VALUE_DROP_CAUSES = frozenset(
    {"none", "not-a-number", "nan", "infinite", "int64", "negative", "attributes"}
)

#: Exporter and backend names a process may report; each is a name given in code.
_MAX_NAMES = 32
_LOST = {"dropped": BACKEND_DROPPED, "failed": BACKEND_FAILED}

declare(
    GROUP,
    [
        MetricSpec(
            EXPORTS,
            Kind.COUNTER,
            unit="{export}",
            description="Exports a push exporter attempted, by exporter and outcome",
            attributes={EXPORTER_ATTR: OPEN, OUTCOME_ATTR: {"success", "failure"}},
            max_series=2 * _MAX_NAMES,
            reduce=SUM,
        ),
        MetricSpec(
            SPANS_DROPPED,
            Kind.COUNTER,
            unit="{span}",
            description="Spans an exporter lost, by why: its span queue was full, or their "
            "export failed",
            attributes={EXPORTER_ATTR: OPEN, DROP_REASON_ATTR: {QUEUE_FULL, EXPORT_FAILED}},
            max_series=2 * _MAX_NAMES,
            reduce=SUM,
        ),
        MetricSpec(
            BACKEND_DROPPED,
            Kind.COUNTER,
            unit="{row}",
            description="Rows a queued backend dropped because it did not keep up",
            attributes={BACKEND_ATTR: OPEN},
            max_series=_MAX_NAMES,
            reduce=SUM,
        ),
        MetricSpec(
            BACKEND_FAILED,
            Kind.COUNTER,
            unit="{row}",
            description="Rows a backend raised on (lost to that backend only)",
            attributes={BACKEND_ATTR: OPEN},
            max_series=_MAX_NAMES,
            reduce=SUM,
        ),
        MetricSpec(
            VALUES_DROPPED,
            Kind.COUNTER,
            unit="{value}",
            description="Values the recording path dropped (a NaN, an infinity, a negative "
            "count...), by series and cause: the series itself keeps its last good value",
            attributes={SERIES_ATTR: OPEN, DROP_REASON_ATTR: VALUE_DROP_CAUSES},
            max_series=256,
            reduce=SUM,
        ),
    ],
)


def _exported(name: str, succeeded: bool) -> None:
    outcome = "success" if succeeded else "failure"
    record(GROUP, {EXPORTS: 1}, {EXPORTER_ATTR: name, OUTCOME_ATTR: outcome})


def _spans_dropped(name: str, spans: int, reason: str) -> None:
    record(GROUP, {SPANS_DROPPED: spans}, {EXPORTER_ATTR: name, DROP_REASON_ATTR: reason})


def _lost(name: str, reason: str, rows: int) -> None:
    record(GROUP, {_LOST[reason]: rows}, {BACKEND_ATTR: name})


def _value_dropped(series: str, cause: str) -> None:
    if series != VALUES_DROPPED:  # its own drop would count itself again
        record(GROUP, {VALUES_DROPPED: 1}, {SERIES_ATTR: series, DROP_REASON_ATTR: cause})


@hookimpl
def telemetry_started() -> None:
    """Count every export of this session's push exporters, every span they lose, every
    row a backend loses and every value the recording path drops."""
    for name, tally in export_tallies():
        tally.name, tally.listener = name, _exported
    handle = current()
    for name, exporter in handle.exporters.items() if handle is not None else ():
        drops = span_drops(exporter.span_processor)
        if drops is not None:
            drops.name, drops.listener = name, _spans_dropped
    worker.loss_listener = _lost
    instruments.drop_listener = _value_dropped


@hookimpl
def telemetry_stopping() -> None:
    worker.loss_listener = None
    instruments.drop_listener = None
