"""What rlmetrics said, apart from what the libraries around it said.

A test that counts warnings must count rlmetrics' own: a tracker's client, urllib3 or a
library's thread may log into pytest's ``caplog`` meanwhile (MLflow's client retries a
connection for minutes on a thread of its own). :func:`own_records` filters captured records
to the ``rlmetrics`` logger and its children; :func:`captured_log` captures that logger alone,
from every thread and at every level, with a bounded wait for a record to arrive.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Iterator

__all__ = ["LOGGER_NAME", "CapturedLog", "captured_log", "own_records"]

#: The logger every rlmetrics message goes to (``warn_once`` included).
LOGGER_NAME = "rlmetrics"


def own_records(records: Iterable[logging.LogRecord]) -> list[logging.LogRecord]:
    """The records of ``records`` that rlmetrics' loggers emitted (``rlmetrics`` and
    ``rlmetrics.*``), in order."""
    prefix = LOGGER_NAME + "."
    return [r for r in records if r.name == LOGGER_NAME or r.name.startswith(prefix)]


class CapturedLog:
    """The ``rlmetrics`` logger's records, captured from every thread, with a way to wait."""

    def __init__(self) -> None:
        self.records: list[logging.LogRecord] = []
        self._cond = threading.Condition()

    def add(self, record: logging.LogRecord) -> None:
        with self._cond:
            self.records.append(record)
            self._cond.notify_all()

    def matching(self, text: str, level: int | None = None) -> list[logging.LogRecord]:
        """The records whose message contains ``text`` (at ``level``, when given)."""
        with self._cond:
            records = list(self.records)
        return [
            r for r in records if text in r.getMessage() and (level is None or r.levelno == level)
        ]

    def wait_for(self, text: str, count: int = 1, timeout_s: float = 15.0) -> None:
        """Wait until at least ``count`` records (any level) contain ``text``; past
        ``timeout_s``, fail saying what was captured."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self.matching(text)) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"timed out after {timeout_s:.1f} s waiting for {count} log records "
                        f"containing {text!r}; got {[r.getMessage() for r in self.records]}"
                    )
                self._cond.wait(min(remaining, 0.5))

    def wait_for_any(self, timeout_s: float) -> None:
        """Return when a new record arrives or after ``timeout_s``, whichever is first."""
        with self._cond:
            seen = len(self.records)
            self._cond.wait_for(lambda: len(self.records) > seen, timeout=timeout_s)


class _Handler(logging.Handler):
    def __init__(self, log: CapturedLog) -> None:
        super().__init__(logging.DEBUG)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        self.log.add(record)


@contextlib.contextmanager
def captured_log() -> Iterator[CapturedLog]:
    """Everything the ``rlmetrics`` logger (and its children) emit inside the block, DEBUG
    included; the logger's level is restored after."""
    log = CapturedLog()
    handler = _Handler(log)
    logger = logging.getLogger(LOGGER_NAME)
    saved = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield log
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
