"""warn_once: report a recurring telemetry failure once, loudly, then quietly.

Telemetry failures are usually per-step and deterministic: a broken sink fails the same way
on every step. A warning per step would bury the run's log in identical tracebacks while
saying nothing the first one did not; silence would hide a dead sink. So: WARNING with a
traceback the first time a key fails, DEBUG afterwards, so the repetition stays recoverable.
"""

from __future__ import annotations

import logging
import sys
import threading

__all__ = ["logger", "warn_once"]

logger = logging.getLogger("rlmetrics")

_warned: set[str] = set()
_lock = threading.Lock()


def warn_once(key: str, message: str) -> None:
    """Log ``message`` at WARNING the first time ``key`` is seen, at DEBUG afterwards.

    The first report carries the active exception's traceback, or the call stack when there
    is none, so it points at the cause.
    """
    with _lock:
        first = key not in _warned
        _warned.add(key)
    if first:
        in_except = sys.exc_info()[0] is not None
        logger.warning(message, exc_info=in_except, stack_info=not in_except)
    else:
        logger.debug(message, exc_info=sys.exc_info()[0] is not None)


def _reset() -> None:
    """Forget every key (tests)."""
    with _lock:
        _warned.clear()
