"""What a push exporter's exports came to: how many, how many failed, and the last one.

:class:`~rlmetrics.exporters.ForkSafe` keeps one per exporter; the health path reads it, and
the ``pipeline`` family sets its ``name`` and ``listener`` to count each export as
``rlmetrics.exporter.exports``. Only the reader's thread writes it. :class:`SpanDrops` is the spans
an exporter lost, to a full queue or a failed export (``rlmetrics.exporter.spans.dropped``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

from .._warn import warn_once

__all__ = ["EXPORT_FAILED", "QUEUE_FULL", "ExportTally", "SpanDrops"]


@attrs.define
class ExportTally:
    """Exports attempted and failed, and the outcome and Unix time of the last one."""

    exports: int = 0
    failures: int = 0
    last_succeeded: bool | None = None
    last_time: float | None = None
    #: The exporter's name in ``start()`` and who hears of each export, once telemetry runs.
    name: str = ""
    listener: Callable[[str, bool], None] | None = None

    def add(self, *, succeeded: bool) -> None:
        self.exports += 1
        if not succeeded:
            self.failures += 1
        self.last_succeeded = succeeded
        self.last_time = time.time()
        listener = self.listener
        if listener is not None:
            try:
                listener(self.name, succeeded)
            except Exception:  # never into the exporter's thread
                warn_once("exporter:tally-listener", "rlmetrics: counting an export failed")


#: Why a span was dropped: its batch processor's queue was full, or its export failed.
QUEUE_FULL = "queue_full"
EXPORT_FAILED = "export_failed"


@attrs.define
class SpanDrops:
    """Spans an exporter lost: dropped by its batch span processor because the queue was full
    (the SDK drops the oldest queued span when one more ends, saying so only in its own log),
    or in an export that failed (the exporter says that once itself; spans carry no totals a
    later export would resend). Counted by the thread that lost them; a full queue is said
    once, naming the exporter and the queue's variable."""

    queue_size: int = 0
    queue_full: int = 0
    export_failed: int = 0
    #: The exporter's name in ``start()`` and who hears of each loss (the exporter's name,
    #: how many spans, :data:`QUEUE_FULL` or :data:`EXPORT_FAILED`), once telemetry runs.
    name: str = ""
    listener: Callable[[str, int, str], None] | None = None

    def full(self, count: int) -> None:
        first = not self.queue_full
        self.queue_full += count
        if first:  # a full queue drops every span that ends: said once, not asked each time
            self._say_full()
        self._tell(count, QUEUE_FULL)

    def _say_full(self) -> None:
        warn_once(
            f"exporter:{self.name}:span-queue",
            f"rlmetrics: the span queue of exporter {self.name!r} (OTEL_BSP_MAX_QUEUE_SIZE, "
            f"{self.queue_size}) was full, so spans are being dropped: they end faster than "
            "the exporter sends them. rlmetrics.exporter.spans.dropped counts them; a larger "
            "OTEL_BSP_MAX_QUEUE_SIZE, or a smaller trajectory span budget "
            "(rlmetrics.trajectories.configure(budget=...)), keeps them. Said once",
            expected=True,
        )

    def failed(self, count: int) -> None:
        self.export_failed += count
        self._tell(count, EXPORT_FAILED)

    def _tell(self, count: int, reason: str) -> None:
        listener = self.listener
        if listener is not None:
            try:
                listener(self.name, count, reason)
            except Exception:  # never into the thread that lost them
                warn_once("exporter:drop-listener", "rlmetrics: counting dropped spans failed")
