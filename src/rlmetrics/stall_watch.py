"""The stall rule evaluated in this process: ``RLStepStalled`` fires through the ``on_alert``
hook (and each Logger's backends that take alerts) when the run goes silent for longer than
:class:`~rlmetrics.liveness.StallRule` allows, and resolves when a new step arrives.

Prometheus evaluates the same rule over the ``rl.step.*`` series, and ``/health`` on request;
this thread is for the trackers that keep alerts of their own (Trackio), which see nothing of
Prometheus. It runs while telemetry exports (the liveness family starts and stops it: steps
reach the liveness state only then) and something listens: a plugin implementing ``on_alert``,
or a Logger with a backend that takes alerts. A process where nothing would hear an alert
runs no thread (issue 37); the watch starts when the first listener appears (a Logger built,
a plugin registered), and stops with telemetry. It wakes every :data:`CHECK_INTERVAL_S` and
reads the liveness state: one snapshot under its lock, no I/O.
The rule is the Prometheus exporter's when one runs (its ``stall_*`` options), else the default
one with ``RLMETRICS_STALL_AFTER_S``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from . import _waiting
from . import hooks as _hooks
from . import liveness as _liveness
from . import plugins as _plugins
from ._process_state import resets_process_state
from ._warn import warn_once
from .events import ALERT_FIRING, ALERT_RESOLVED, Alert
from .liveness import StallRule

if TYPE_CHECKING:
    from .hooks import Hooks

__all__ = [
    "CHECK_INTERVAL_S",
    "STALL_ALERT",
    "StallWatch",
    "configure_rule",
    "listener_appeared",
    "listens_when",
    "send",
    "watch",
]

#: The alert's name: the Prometheus rule of the same meaning (``rlmetrics alerts``).
STALL_ALERT = "RLStepStalled"
#: How often the watch reads the liveness state (seconds). The shortest stall is a minute
#: (``stall_min_s``), so a few seconds late is news still.
CHECK_INTERVAL_S = 5.0

_rule: StallRule | None = None


def configure_rule(rule: StallRule | None) -> None:
    """The rule the watch applies from now (the Prometheus exporter's); None: the default."""
    global _rule
    _rule = rule


@resets_process_state
def _forget_rule() -> None:
    # A telemetry whose start failed after its exporter configured the rule never stops the
    # watch that would clear it: between tests, the next reads the variables afresh.
    configure_rule(None)


def _current_rule() -> StallRule:
    if _rule is not None:
        return _rule
    from .health import stall_rule  # reads RLMETRICS_STALL_AFTER_S
    from .telemetry import TelemetryError

    try:
        return stall_rule()
    except Exception as error:  # the exporter raises on a bad variable; here the watch goes on
        default = StallRule()
        warn_once(
            "stall-watch:rule",
            f"rlmetrics: {error}; the in-process stall alert uses the default stall bound of "
            f"{default.bound_s:.0f} s",
            expected=isinstance(error, TelemetryError),  # a variable to fix, not a bug
        )
        return default


class StallWatch:
    """Fires ``RLStepStalled`` when the stall rule starts to hold and resolves it when it stops
    (:meth:`check`, also called by tests with a moved :data:`rlmetrics.liveness.clock`)."""

    def __init__(self, interval_s: float | None = None) -> None:
        self._interval_s = CHECK_INTERVAL_S if interval_s is None else interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.firing = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rlmetrics-stall-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 1.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            _waiting.join(thread, timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.check()

    def check(self) -> Alert | None:
        """Read the liveness state now; returns the alert it sent, if the state changed."""
        try:
            snapshot = _liveness.liveness.snapshot()
            rule = _current_rule()
            now = _liveness.clock()
            silent, limit = _liveness.silence(snapshot, rule, now)
            stalled = silent is not None and silent > limit
            if stalled == self.firing:
                return None
            self.firing = stalled
            if stalled:
                since = "the last step" if snapshot.step is not None else "telemetry started"
                summary = (
                    f"no new trainer step for {silent:.0f} s since {since} (the stall limit is "
                    f"{limit:.0f} s)"
                )
            else:
                summary = f"trainer step {snapshot.step} arrived; the run is making progress"
            alert = Alert(
                STALL_ALERT,
                ALERT_FIRING if stalled else ALERT_RESOLVED,
                summary,
                snapshot.step,
                now,
            )
        except Exception:
            warn_once("stall-watch", "rlmetrics: the in-process stall rule could not be evaluated")
            return None
        send(alert)
        return alert


def send(alert: Alert) -> None:
    """``alert`` to the ``on_alert`` hook and to each live Logger's backends. Never raises."""
    try:
        _plugins.hooks().on_alert(alert)
    except Exception:
        warn_once("alert:hook", "rlmetrics: an alert could not reach the on_alert hook")
    try:
        from .logger import alert_loggers

        alert_loggers(alert)
    except Exception:
        warn_once("alert:backends", "rlmetrics: an alert could not reach the Loggers' backends")


_watch: StallWatch | None = None
#: Whether telemetry exports: the watch may run (once something listens).
_wanted = False
# Reentrant: a KeyboardInterrupt at a with block's end under a tracer (bpo-29988) leaves
# it held by its thread, which takes it again instead of waiting for ever.
_lock = threading.RLock()


def watch(on: bool) -> StallWatch | None:
    """Let the process's watch run (``on``: it starts now if something listens, else when a
    listener appears) or stop it; returns the one running, if any."""
    global _watch, _wanted
    with _lock:
        running, _watch, _wanted = _watch, None, on
    if running is not None:
        running.stop()
    if on:
        listener_appeared(_plugins.hooks())
    else:
        configure_rule(None)
    return _watch


def listener_appeared(hooks: Hooks | None = None) -> None:
    """Something that may take alerts appeared (a plugin was registered: its ``hooks``; a
    Logger with a backend that takes alerts): start the watch if telemetry exports, it is
    not running and something listens. Never raises."""
    global _watch
    if not _wanted or _watch is not None:
        return  # the common case, decided without a lock
    try:
        if not _listening(hooks):
            return
        with _lock:
            if not _wanted or _watch is not None:
                return
            _watch = StallWatch()
            _watch.start()
    except Exception:
        warn_once("stall-watch:start", "rlmetrics: the in-process stall rule could not start")


#: Asked whether something other than a plugin listens: the logger module adds "a live
#: Logger has a backend that takes alerts" (it imports this module, not the other way).
_listener_checks: list[Callable[[], bool]] = []


def listens_when(check: Callable[[], bool]) -> None:
    """Count ``check()`` (it must not raise) among what tells whether anything listens."""
    _listener_checks.append(check)


def _listening(hooks: Hooks | None) -> bool:
    """Whether an alert would reach anyone: an ``on_alert`` implementation, or whatever a
    :func:`listens_when` check finds (a live Logger's backend that takes alerts)."""
    if hooks is not None and hooks.implemented("on_alert"):
        return True
    return any(check() for check in _listener_checks)


# A plugin registered while telemetry exports may be the first listener.
_hooks.when_registered(listener_appeared)
