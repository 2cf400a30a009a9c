"""What a push exporter's exports came to: how many, how many failed, and the last one.

:class:`~rlmetrics.exporters.ForkSafe` keeps one per exporter; the health path reads it, and
the ``pipeline`` family sets its ``name`` and ``listener`` to count each export as
``rlmetrics.exporter.exports``. Only the reader's thread writes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

from .._warn import warn_once

__all__ = ["ExportTally"]


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
