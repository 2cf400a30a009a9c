"""Logger backends: where each logged dict is written (a file, a tracker, the console).

A backend is any object with ``log_metrics(metrics, step, prefix)`` and ``finish()``,
offered by a plugin's ``register_backends`` hook under a name that ``Logger(backends=...)``
selects. The built-in ``jsonl`` and ``console`` backends are plugins like any other.

Four methods are optional, and a backend that has them gets what the Logger logs through them
(third-party backends included): ``log_hyperparams(params)`` (:class:`TakesHyperparams`),
``log_samples(rows, step, name)`` (:class:`TakesSamples`), ``log_trajectories(trajectories,
step, trace_ids)`` (:class:`TakesTrajectories`) and ``log_alert(alert)``
(:class:`TakesAlerts`). A factory that names an ``identity`` parameter is handed the run's
:class:`~rlmetrics.identity.RunIdentity` (its id, and whether this process resumes it).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from .. import _waiting
from .._warn import describe_value, warn_once
from ..events import STEP_KEY, WALL_TIME_KEY
from ..hooks import collect_offers
from ..plugins import Plugins, get_plugins
from ..storable import utf8_text
from ..values import as_number

if TYPE_CHECKING:
    from ..events import Alert
    from ..trajectories import Trajectory

__all__ = [
    "AXIS_KEYS",
    "Backend",
    "BackendFactory",
    "TakesAlerts",
    "TakesHyperparams",
    "TakesRows",
    "TakesSamples",
    "TakesTrajectories",
    "BackendUnavailable",
    "SharedRuns",
    "StepAxis",
    "as_step",
    "available_backends",
    "first_line",
    "full_key",
    "merged_config",
    "RoomCheck",
    "no_room",
    "start_within",
    "storable_text",
]

_T = TypeVar("_T")

#: Axis keys are logged as they are, never under the dict's prefix, so a tracker can bind
#: a prefix's series to them.
AXIS_KEYS = frozenset({STEP_KEY, WALL_TIME_KEY})


@runtime_checkable
class Backend(Protocol):
    """What ``Logger`` needs of a backend."""

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        """Write one flat dict. ``full_key(prefix, key)`` gives the name a tracker shows."""

    def finish(self) -> None:
        """Flush and close. Called once, from ``Logger.finish()``; never from ``__del__``. A
        ``finish`` that takes ``failed`` is told ``failed=True`` when the run ended with an
        exception (a tracker that keeps a run's outcome marks it failed)."""


@runtime_checkable
class TakesHyperparams(Protocol):
    """A backend that keeps a run's configuration (optional)."""

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """Keep ``params``: a nested dict of JSON values (str, int, float, bool, None, lists,
        dicts), converted and bounded by the Logger (:mod:`rlmetrics.hyperparams`). May be
        called more than once in a run; later keys add to or update earlier ones where the
        tracker allows it."""


@runtime_checkable
class TakesRows(Protocol):
    """A queued backend that writes several rows in one request (optional): when it falls
    behind, the rows queued for it come in one call instead of one call each."""

    def log_metrics_rows(self, rows: Sequence[tuple[Mapping[str, Any], Any, str]]) -> int:
        """Write ``rows``, each ``(metrics, step, prefix)`` as ``log_metrics`` takes them, in
        order, and return how many of them, from the first, were written (a request that
        failed ends it early): the first of the rest is then written alone through
        ``log_metrics`` (which says why it fails), and the others come again as a backlog.
        Raising counts as having written none."""


@runtime_checkable
class TakesSamples(Protocol):
    """A backend that shows sample rows (optional)."""

    def log_samples(self, rows: Sequence[Mapping[str, Any]], step: int, name: str) -> None:
        """Show ``rows`` (dicts of JSON values, prompt/completion/reward and any other column,
        bounded by the Logger: :mod:`rlmetrics.samples`) as the table ``name`` at ``step``."""


@runtime_checkable
class TakesTrajectories(Protocol):
    """A backend that shows finished rollouts as traces of its own (optional; every backend
    gets them as sample rows through ``log_samples`` regardless)."""

    def log_trajectories(
        self, trajectories: Sequence[Trajectory], step: int, trace_ids: Sequence[str | None]
    ) -> None:
        """Show ``trajectories`` (checked records, :class:`rlmetrics.trajectories.Trajectory`)
        logged at ``step``; ``trace_ids[i]`` is the OpenTelemetry trace id (32 hex digits) of
        the i-th one's spans, None where it has none."""


@runtime_checkable
class TakesAlerts(Protocol):
    """A backend that keeps alerts of its own (optional)."""

    def log_alert(self, alert: Alert) -> None:
        """Keep ``alert`` (:class:`rlmetrics.events.Alert`: a rule rlmetrics evaluates in
        this process started or stopped firing). Called from rlmetrics' stall-watch thread."""


BackendFactory = Callable[..., Backend]


class BackendUnavailable(Exception):
    """A backend cannot start or write because of a condition of the world, not a bug: a path
    that cannot be written, a store that went away. Its message names the condition and the
    remedy; the Logger reports it as that one line (the traceback only at DEBUG) and goes on
    without the backend. ``OSError`` is read the same way."""


def first_line(error: BaseException) -> str:
    """The first line of a tracker's error (its type's name when it says nothing): what a
    :class:`BackendUnavailable` built from it quotes as the tracker's reason."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def full_key(prefix: str, key: str) -> str:
    """``prefix/key``, except for axis keys and an empty prefix."""
    return key if not prefix or key in AXIS_KEYS else f"{prefix}/{key}"


def storable_text(text: str) -> str:
    """``text`` (a key or a text value, on a tracker's own thread) with each lone surrogate —
    text decoded from bytes that are not UTF-8 with ``surrogateescape`` — as its ``\\udXXX``
    escape, said once: no tracker stores one (TensorBoard and W&B lost the whole row to
    ``UnicodeEncodeError``, SwanLab dropped the key with an error of its own)."""
    stored, replaced = utf8_text(text)
    if replaced:
        warn_once(
            "backend:surrogate",
            f"rlmetrics: a logged key or value holds a lone surrogate ({stored[:64]!r}: text "
            "decoded from bytes that are not UTF-8), which no tracker stores; the trackers get "
            "it as its \\udXXX escape (the JSONL file has it as logged)",
        )
    return stored


def no_room(folder: os.PathLike[str] | str, min_free: int, tracker: str) -> str | None:
    """Why ``tracker`` could not write another row into its run ``folder``, or None: the folder
    is gone (deleted mid-run), or its disk has less than ``min_free`` bytes free. For a tracker
    that writes on a thread or process of its own and never tells its caller a write failed
    (SwanLab, W&B offline): checked before each row is handed to it."""
    try:
        disk = os.statvfs(folder)
    except OSError as exc:
        return f"{tracker}'s run folder {folder} is gone ({exc.strerror or exc})"
    free = disk.f_bavail * disk.f_frsize
    if free < min_free:
        return (
            f"the disk holding {tracker}'s run folder {folder} has {free} bytes free "
            f"(less than {min_free})"
        )
    return None


class RoomCheck:
    """A tracker's check, before each row, that it can still write: once its run folder is
    gone or its disk is (nearly) full (:func:`no_room`), or the tracker set :attr:`broken`
    itself (a write refused as full), every later row is refused at once, for good."""

    __slots__ = ("broken", "min_free", "then", "tracker")

    def __init__(self, tracker: str, min_free: int, then: str) -> None:
        self.tracker = tracker
        self.min_free = min_free
        #: What the refusal goes on to say (what the backend does now), after the cause.
        self.then = then
        #: Why the tracker can write no more of this run; None while it can.
        self.broken: str | None = None

    def check(self, folder: os.PathLike[str] | str | None) -> None:
        """Raise :class:`BackendUnavailable` if no row can go to the tracker any more;
        ``folder`` None: nothing to look at (the check only repeats an earlier refusal)."""
        if self.broken is None and folder is not None:
            self.broken = no_room(folder, self.min_free, self.tracker)
        if self.broken is not None:
            raise BackendUnavailable(f"{self.broken}; {self.then}")


def merged_config(current: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """``update``'s top-level keys, each with what ``current`` holds under it merged in, section
    by section (a later value wins): what a tracker whose ``config.update`` replaces a
    top-level key whole (W&B, SwanLab, Trackio) is given, so a second ``log_hyperparams``
    adds to a nested section instead of replacing it, as it does in MLflow and TensorBoard."""
    return {key: _merged(current.get(key), value) for key, value in update.items()}


def _merged(current: Any, update: Any) -> Any:
    if not (isinstance(current, Mapping) and isinstance(update, Mapping)):
        return update
    out = dict(current)
    for key, value in update.items():
        out[key] = _merged(current.get(key), value)
    return out


def as_step(step: Any) -> int | None:
    """The integer trainer step ``step`` stands for (Python, NumPy or torch scalar), else None.

    A tracker with a numeric step axis needs one; what to do without it is the backend's call.
    """
    number = as_number(step)
    return None if number is None else int(number)


class StepAxis:
    """A tracker's integer step axis: each dict at its trainer step, and one whose step is not
    a number at the previous one (said once per tracker), since such a tracker needs a step
    and the last good one keeps the point near its peers."""

    def __init__(self, tracker: str) -> None:
        self.tracker = tracker
        #: The step the last dict was logged at.
        self.last = 0

    def __call__(self, step: Any) -> int:
        number = as_step(step)
        if number is None:
            warn_once(
                f"{self.tracker}:bad-step",
                f"rlmetrics-{self.tracker}: a step ({describe_value(step)}) is not a number; "
                "such dicts are logged at the previous step",
            )
            return self.last
        self.last = number
        return number


class SharedRuns:
    """Which of a tracker's backends in this process log into each of its runs, so that a run
    one of them started is finished by the last of them to finish, not the first.

    A tracker that keeps one active run per process (W&B, SwanLab) hands a second Logger's
    backend the run the first one started; finished at the first Logger's ``finish()``, it
    failed every row the second one logged after. A run none of them started (passed in, or
    the script's own) is never theirs to finish."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[int, int] = {}  # id(run): backends logging into it, not finished
        self._started: set[int] = set()  # id(run) of the runs one of them started

    def join(self, run: Any, started: bool) -> None:
        """A backend logs into ``run`` from now on; ``started``: it started the run."""
        with self._lock:
            self._users[id(run)] = self._users.get(id(run), 0) + 1
            if started:
                self._started.add(id(run))

    def leave(self, run: Any) -> bool:
        """A backend finished with ``run``: whether to finish the run now (one of them started
        it, and no other still logs into it)."""
        with self._lock:
            left = self._users.get(id(run), 1) - 1
            if left > 0:
                self._users[id(run)] = left
                return False
            self._users.pop(id(run), None)
            if id(run) in self._started:
                self._started.discard(id(run))
                return True
            return False

    def forget(self) -> None:
        """Forget every run (the process-state reset between tests finishes them itself)."""
        with self._lock:
            self._users.clear()
            self._started.clear()


def available_backends(plugins: Plugins | None = None) -> dict[str, tuple[str, BackendFactory]]:
    """``{name: (offering plugin, factory)}`` from every plugin's ``register_backends``."""
    plugins = plugins or get_plugins()
    return collect_offers("backend", plugins.hooks.register_backends, plugins)


def start_within(
    start: Callable[[], _T],
    timeout_s: float,
    what: str,
    abandon: Callable[[_T], None] | None = None,
) -> _T:
    """``start()`` (a tracker's connection: create its run, reach its server) on a thread of
    its own, waited for at most ``timeout_s``: a server that never answers costs the caller
    that bound, whatever the tracker's own timeouts and retries do. Its result or its
    exception is the caller's; past the bound, :class:`BackendUnavailable` saying that
    ``what`` did not answer (the Logger then skips the backend in one line). The thread is
    left to end on its own; should ``start`` still succeed, ``abandon`` gets what it returned
    (to end a run nobody will write to)."""
    lock = threading.Lock()
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def run() -> None:
        try:
            result = start()
        except BaseException as exc:  # handed to the caller below
            with lock:
                outcome["error"] = exc
            finished.set()
            return
        with lock:
            late = "gave-up" in outcome
            outcome["result"] = result
        finished.set()
        if late and abandon is not None:
            # A best effort for a backend already reported as skipped.
            with contextlib.suppress(Exception):
                abandon(result)

    threading.Thread(target=run, name="rlmetrics-backend-start", daemon=True).start()
    _waiting.wait(finished, timeout_s)
    with lock:
        if "error" in outcome:
            raise outcome["error"]
        if "result" in outcome:
            return outcome["result"]  # type: ignore[no-any-return]
        outcome["gave-up"] = True
    raise BackendUnavailable(
        f"{what} did not answer within {timeout_s:.1f} s (the backend's connect_timeout_s)"
    )
