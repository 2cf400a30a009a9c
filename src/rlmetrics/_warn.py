"""warn_once: report a recurring telemetry failure once, loudly, then quietly.

Telemetry failures are usually per-step and deterministic: a broken sink fails the same way
on every step. A warning per step would bury the run's log in identical reports while saying
nothing the first one did not; silence would hide a dead sink. So: one WARNING line the first
time a key fails, DEBUG afterwards, so the repetition stays recoverable. A failure of plugin
or SDK code carries its traceback (a bug to fix); an expected condition (a full queue, a dead
collector, a path that cannot be written) is one line naming it and the remedy, its traceback
at DEBUG.

Keys name a cause (a plugin and what failed), never a logged value, so the set of keys stays
bounded; as a backstop it is capped. A message never quotes a logged string (it may be a
secret): :func:`describe_value` gives its type and length instead.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from ._fork import reset_in_child

__all__ = ["MAX_WARNING_KEYS", "describe_key", "describe_value", "logger", "warn_once"]

logger = logging.getLogger("rlmetrics")

#: Distinct warn-once keys remembered per process; past it, new causes are logged at DEBUG.
MAX_WARNING_KEYS = 4096

_OVERFLOW = "\0overflow"
_warned: set[str] = set()
_lock = threading.Lock()


def warn_once(key: str, message: str, *, expected: bool = False) -> None:
    """Log ``message`` at WARNING the first time ``key`` is seen, at DEBUG afterwards.

    Called while handling an exception (plugin or SDK code that raised: a bug to fix), the
    first report carries its traceback. An ``expected`` condition — a full queue, a dead
    collector, a path that cannot be written — is no bug: its WARNING is the one line
    ``message``, which names the condition and the remedy, and the traceback, if any, goes to
    DEBUG with it.
    """
    with _lock:
        known = key in _warned
        first = not known and len(_warned) < MAX_WARNING_KEYS
        overflowing = not known and not first and _OVERFLOW not in _warned
        if first:
            _warned.add(key)
        if overflowing:
            _warned.add(_OVERFLOW)  # one past the cap: the cap itself is reported once
    if overflowing:
        logger.warning(
            "rlmetrics: more than %d distinct telemetry warnings; further new ones are "
            "logged at DEBUG",
            MAX_WARNING_KEYS,
        )
    in_except = sys.exc_info()[0] is not None
    if expected and first:
        logger.warning(message)
        if in_except:
            logger.debug(message, exc_info=True)
        return
    logger.log(logging.WARNING if first else logging.DEBUG, message, exc_info=in_except)


def describe_value(value: Any) -> str:
    """What a value is, for a warning, without quoting it: ``a str of length 12``,
    ``a float``, ``a dict``."""
    kind = type(value).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    if isinstance(value, (str, bytes, bytearray)):
        return f"{article} {kind} of length {len(value)}"
    return f"{article} {kind}"


@reset_in_child
def _new_lock_after_fork() -> None:
    global _lock
    _lock = threading.Lock()


def describe_key(key: Any) -> str:
    """A key or name for a message: a string quoted, anything else described (its ``repr``
    may raise, or be a logged value)."""
    return repr(key) if type(key) is str else describe_value(key)


def _reset() -> None:
    """Forget every key (tests)."""
    with _lock:
        _warned.clear()
