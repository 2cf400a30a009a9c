"""What a push exporter's exports came to: how many, how many failed, and the last one.

:class:`~rlmetrics.exporters.ForkSafe` keeps one per exporter; the health path and the
``rlmetrics.exporter.exports`` series read it. Only the reader's thread writes it.
"""

from __future__ import annotations

import time

import attrs

__all__ = ["ExportTally"]


@attrs.define
class ExportTally:
    """Exports attempted and failed, and the outcome and Unix time of the last one."""

    exports: int = 0
    failures: int = 0
    last_succeeded: bool | None = None
    last_time: float | None = None

    def add(self, *, succeeded: bool) -> None:
        self.exports += 1
        if not succeeded:
            self.failures += 1
        self.last_succeeded = succeeded
        self.last_time = time.time()
