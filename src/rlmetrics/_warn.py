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

**Strict mode** (``rlmetrics.start(strict=True)``, ``Logger(strict=True)`` or
``RLMETRICS_STRICT=1``), for CI and first runs: a warning that means "something you asked for
is not happening" — every one but the :data:`INFORMATIONAL` causes — is remembered, and the
next rlmetrics call on the user's side (a ``Logger`` call, ``start()``, ``shutdown()``,
``force_flush()``) raises :class:`StrictModeError` with it, once the call has done its work. A
failure on another thread (a tracker's writer, the exporter's) surfaces the same way: the
threads that hit it are never the ones raised into.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import math
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ._fork import reset_in_child

__all__ = [
    "INFORMATIONAL",
    "MAX_WARNING_KEYS",
    "STRICT_ENV",
    "StrictModeError",
    "describe_key",
    "describe_number",
    "describe_value",
    "hold_strict",
    "informational",
    "logger",
    "not_our_exception",
    "note_unmet",
    "raise_if_strict",
    "release_strict",
    "strict_from_env",
    "strict_mode",
    "warn_once",
]

logger = logging.getLogger("rlmetrics")

_Call = TypeVar("_Call", bound=Callable[..., Any])
#: The exception the caller was handling when it called into rlmetrics (see
#: :func:`not_our_exception`): not a failure of ours, so no warning carries it.
_callers_exception: contextvars.ContextVar[BaseException | None] = contextvars.ContextVar(
    "rlmetrics_callers_exception", default=None
)


def not_our_exception(call: _Call) -> _Call:
    """``call``, whose warnings do not carry the exception its caller is handling.

    A loop calls some of rlmetrics inside its own ``except`` (a live trajectory's failed tool
    call) or as its exception leaves a block (``__exit__``); a warning said there about what
    the loop passed would otherwise carry the loop's exception, traceback and message (which
    may quote a prompt), as if rlmetrics had failed. An exception raised inside ``call`` is
    ours and keeps its traceback."""

    @functools.wraps(call)
    def called(*args: Any, **kwargs: Any) -> Any:
        handled = sys.exc_info()[1]
        if handled is None:  # the common case: nothing to keep out
            return call(*args, **kwargs)
        token = _callers_exception.set(handled)
        try:
            return call(*args, **kwargs)
        finally:
            _callers_exception.reset(token)

    return called  # type: ignore[return-value]


#: Distinct warn-once keys remembered per process; past it, new causes are logged at DEBUG.
MAX_WARNING_KEYS = 4096

_OVERFLOW = "\0overflow"
_warned: set[str] = set()
#: The keys strict mode has raised for since strict mode was last taken up (a ``start()`` or
#: ``Logger`` holding it): a failure warned once per process still raises in each strict
#: scope. Bounded like ``_warned``.
_raised: set[str] = set()
_lock = threading.Lock()

STRICT_ENV = "RLMETRICS_STRICT"
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"", "0", "false", "no", "off"})

#: The causes (warn-once keys, by their leading segments) whose warning is information, not a
#: request going unmet: strict mode never raises for them. Everything else does.
INFORMATIONAL: dict[str, str] = {
    "*-clash": "a name two plugins offer: the documented winner is used",
    "plugin-clash": "an entry-point name two distributions offer: the documented winner loads",
    "samples:rows": "sample rows past max_sample_rows are cut, the rest logged",
    "samples:columns": "sample columns past the cap are cut, the rest logged",
    "samples:cell": "sample text past max_cell_bytes is cut, the rest logged",
    "hyperparams:too-many": "a configuration past 10,000 values: the first are logged",
    "hyperparams:text": "a configuration value trackers cannot store is logged as its text",
    "hyperparams:omegaconf": "an OmegaConf config that does not resolve is logged unresolved",
    "hyperparams:long-list": "a list past 10,000 elements: its first are logged",
    "hyperparams:replaced": "a value no tracker can store is replaced, the rest logged",
    "samples:replaced": "a sample cell no tracker can store is replaced, the rest logged",
    "wandb:config-text": "a number W&B's config would round is logged as its text",
    "tensorboard:hparam-text": "an int the HParams dashboard would round is logged as its text",
    "mlflow:key-renamed": "a key MLflow refuses is logged under a name it accepts",
    "mlflow:param-cut": "a parameter past MLflow's 6000 characters is cut",
    "mlflow:param-changed": "a changed parameter is kept under MLflow's rule and said",
    "mlflow:resume-not-found": "no MLflow run to resume: a new one is started with the tag",
    "rollout:unknown-reason": "a checkpoint reason outside the known set is counted as other",
    "unknown-key": "a key nothing knows, under Logger(unknown_keys='warn'): said, not raised "
    "('error' asks strict mode to raise)",
    "dashboard-row": "a command's output (the dashboard), not the run's",
    "alert-rules": "a command's output (the alert rules), not the run's",
    "demo-part": "a part of rlmetrics demo, not of a run",
    "demo-part-step": "a part of rlmetrics demo, not of a run",
    "demo-part-close": "a part of rlmetrics demo, not of a run",
}


class StrictModeError(RuntimeError):
    """Strict mode: something asked of rlmetrics is not happening (the message says what)."""


_strict_holders = 0
#: Scopes that turned strict mode off explicitly (``Logger(strict=False)``): the call wins
#: over ``RLMETRICS_STRICT`` while one lives, unless another scope holds strict mode on.
_strict_refusers = 0
_pending: str | None = None
_pending_more = 0


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
    # Strict mode raises for each failure once per strict scope, even when this process
    # warned about it before the scope began (a second strict Logger, the same cause). A
    # repeat is checked against the holders alone (one global read: the repeated-failure path
    # stays as cheap as it was); RLMETRICS_STRICT makes each start()/Logger() a holder.
    again = known and _strict_holders > 0 and key not in _raised
    if ((first and strict_mode()) or again) and not informational(key):
        with _lock:
            noted = key in _raised or (again and len(_raised) >= MAX_WARNING_KEYS)
            if not noted and len(_raised) < MAX_WARNING_KEYS:
                _raised.add(key)
        if not noted:
            note_unmet(message)
    handled = sys.exc_info()[1]
    in_except = handled is not None and handled is not _callers_exception.get()
    if expected and first:
        logger.warning(message)
        if in_except:
            logger.debug(message, exc_info=True)
        return
    logger.log(logging.WARNING if first else logging.DEBUG, message, exc_info=in_except)


def informational(key: str) -> bool:
    """Whether warn-once ``key`` is one of the :data:`INFORMATIONAL` causes."""
    head = key.split(":", 1)[0]
    if head.endswith("-clash"):
        return True
    return any(key == cause or key.startswith(cause + ":") for cause in INFORMATIONAL)


def strict_from_env() -> bool:
    """``RLMETRICS_STRICT`` read strictly: ``ValueError`` for a value that is neither on
    (``1``, ``true``, ``yes``, ``on``) nor off (``0``, ``false``, ``no``, ``off``, empty)."""
    value = os.environ.get(STRICT_ENV, "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(
        f"{STRICT_ENV}={os.environ.get(STRICT_ENV)!r} is neither on (1, true, yes, on) nor off "
        "(0, false, no, off)"
    )


def strict_mode() -> bool:
    """Whether strict mode is on: a started telemetry or a live Logger asked for it, or
    ``RLMETRICS_STRICT`` says so and no live one turned it off. Never raises."""
    if _strict_holders > 0:
        return True
    return _strict_refusers == 0 and os.environ.get(STRICT_ENV, "").strip().lower() in _ON


def hold_strict(on: bool = True) -> None:
    """Strict mode on (``on``), or off against ``RLMETRICS_STRICT``, until the matching
    :func:`release_strict` (``start(strict=...)`` holds it until shutdown, ``Logger(strict=...)``
    until ``finish()``). Taking strict mode on starts a new strict scope: a failure already
    raised for in an earlier one raises again when it recurs."""
    global _strict_holders, _strict_refusers
    with _lock:
        if on:
            _strict_holders += 1
            _raised.clear()
        else:
            _strict_refusers += 1


def release_strict(on: bool = True) -> None:
    global _strict_holders, _strict_refusers
    with _lock:
        if on:
            _strict_holders = max(0, _strict_holders - 1)
        else:
            _strict_refusers = max(0, _strict_refusers - 1)


def note_unmet(message: str) -> None:
    """Remember, in strict mode, that something asked for is not happening: the next
    :func:`raise_if_strict` raises it (later ones are counted)."""
    global _pending, _pending_more
    if not strict_mode():
        return
    with _lock:
        if _pending is None:
            _pending = message
        else:
            _pending_more += 1


def raise_if_strict() -> None:
    """Raise :class:`StrictModeError` with what strict mode has noted since the last raise
    (a no-op when nothing was: one global read)."""
    global _pending, _pending_more
    if _pending is None:
        return
    with _lock:
        message, more = _pending, _pending_more
        _pending, _pending_more = None, 0
    if message is None:
        return
    also = f" (and {more} more: see the rlmetrics log)" if more else ""
    raise StrictModeError(f"strict mode: {message}{also}")


def describe_value(value: Any) -> str:
    """What a value is, for a warning, without quoting it: ``a str of length 12``,
    ``a dict``; a float that is not finite says which (``a float (nan)``): "a float is not a
    finite number" leaves the reader to guess, and NaN, inf and -inf quote nothing logged."""
    kind = type(value).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    if isinstance(value, (str, bytes, bytearray)):
        return f"{article} {kind} of length {len(value)}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{article} {kind} ({float(value)!r})"
    return f"{article} {kind}"


def describe_number(value: Any) -> str:
    """:func:`describe_value`, with the value of an int or a finite float (a count, a step, a
    latency: no text a log should not quote), for a warning that says it is out of range:
    ``an int -3``, ``a float (-0.5)``; an int past 128 bits by its size (``str()`` raises
    past 4,300 digits)."""
    if type(value) is int:
        bits = value.bit_length()
        return f"an int {value}" if bits <= 128 else f"an int of {bits} bits"
    if type(value) is float and math.isfinite(value):
        return f"a float ({value!r})"
    return describe_value(value)


@reset_in_child
def _new_lock_after_fork() -> None:
    global _lock
    _lock = threading.Lock()


def describe_key(key: Any) -> str:
    """A key or name for a message: a string quoted, anything else described (its ``repr``
    may raise, or be a logged value)."""
    return repr(key) if type(key) is str else describe_value(key)


def _reset() -> None:
    """Forget every key and strict mode's state (tests)."""
    global _strict_holders, _strict_refusers, _pending, _pending_more
    with _lock:
        _warned.clear()
        _raised.clear()
        _strict_holders = _strict_refusers = 0
        _pending, _pending_more = None, 0
