"""What every trainer adapter shares: the Logger it writes to, and a guard on every call.

An adapter (a ``transformers.TrainerCallback``, a Lightning ``Logger``, an Accelerate tracker,
a Ray Train callback) is a thin translation from the trainer's extension point to
:class:`~rlmetrics.Logger` calls. Two things are the same in all of them:

- :class:`AdapterLogger`: the Logger the user passed, used as it is and never finished here
  (it is its owner's), or one the adapter builds from ``backends`` and ``key_map`` the first
  time the trainer logs (on the process that logs, so a rank that never logs opens no file and
  no tracker run). A built Logger is the adapter's for its whole life — ``train()``,
  ``evaluate()``, ``predict()``, a second ``train()`` all write to it — and is finished once:
  by :meth:`AdapterLogger.finish` (the adapter's explicit end: Accelerate's ``end_training``,
  ``callback.finish()``), when the adapter is garbage-collected (its trainer is gone), or at
  interpreter exit, whichever comes first. One Logger per adapter means one run per tracker
  (W&B, MLflow): never a second run under the same run id left running. After it is
  finished, the adapter's calls are dropped and said once. The configuration is checked where
  the adapter is made: an unknown backend, backend option or key map fails before the trainer
  starts, with the choices.
- :func:`guarded`: the trainer calls the adapter from its own loop, so nothing the adapter
  does may raise into it; a failure is reported once, naming the adapter and the call, and
  the trainer's step goes on. Strict mode is the exception a user asks for: a
  :class:`~rlmetrics.StrictModeError` (and, in strict mode, the adapter's own failure)
  propagates out of the call and stops the run.

A third-party adapter (for a trainer with its own logger interface) is built from the same two.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from ._fork import reset_in_child
from ._warn import StrictModeError, raise_if_strict, warn_once
from .configuration import check_options, configured, named_choice
from .hyperparams import to_hyperparams
from .identity import launcher_run_id, new_run_id
from .keymaps import KeyMap, resolve_key_map
from .logger import Logger
from .ranks import RankMerger
from .telemetry import current

__all__ = ["AdapterLogger", "HandedAgain", "caller", "guarded", "merges_ranks", "stands_down"]

_F = TypeVar("_F", bound=Callable[..., Any])


def guarded(adapter: str, call: str) -> Callable[[_F], _F]:
    """Wrap an adapter's method so that it never raises into the trainer: an exception is
    reported once (``adapter`` and ``call`` named) and the method returns None.

    Strict mode wins: a :class:`~rlmetrics.StrictModeError` propagates, and in strict mode
    the method's own failure is raised as one (its cause attached) once it is reported."""

    def wrap(function: _F) -> _F:
        @functools.wraps(function)
        def guard(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            except StrictModeError:
                raise  # strict mode was asked for: it stops the run
            except Exception:
                warn_once(
                    f"adapter:{adapter}:{call}",
                    f"rlmetrics: {adapter}: {call} failed; the trainer goes on (later failures "
                    "of this call are reported at DEBUG)",
                )
                raise_if_strict()  # in strict mode, the failure just reported stops the run
                return None

        return guard  # type: ignore[return-value]

    return wrap


def merges_ranks(logger: Logger | None) -> bool:
    """Whether ``logger`` was built with ``ranks=``: its logging is a collective (every rank
    calls it), not rank zero's alone."""
    return logger is not None and getattr(logger, "_ranks", None) is not None


#: The Loggers adapters built and nobody has finished yet (the interpreter's exit finishes
#: every unfinished Logger: rlmetrics.logger).
_open: set[Logger] = set()
_open_lock = threading.Lock()


def _finish_unattended(logger: Logger, timeout_s: float | None = None) -> None:
    """Finish ``logger`` with nobody to raise to (its adapter was garbage-collected), waiting
    at most ``timeout_s`` (default: its ``finish_timeout_s``); a strict-mode error was already
    said as a warning."""
    with _open_lock:
        if logger not in _open:
            return
        _open.discard(logger)
    try:
        logger.finish(timeout_s)
    except StrictModeError:
        pass
    except Exception:
        warn_once("adapter:finish", "rlmetrics: finishing an adapter's Logger failed")


@reset_in_child
def _forget_open_loggers() -> None:
    # A forked child's copies of the parent's Loggers are the parent's to finish.
    global _open_lock
    _open_lock = threading.Lock()
    _open.clear()


def _named_run_id() -> str | None:
    """The id a Logger built now would take without being given one, when something names
    it: the running telemetry, the configuration's ``run_id``, the launcher
    (:func:`~rlmetrics.logger.Logger`'s order); None when the Logger would make one up."""
    telemetry = current()
    if telemetry is not None:
        return telemetry.run_id
    configured_id = configured().logger.get("run_id")
    if configured_id is not None and configured_id[0]:
        return str(configured_id[0])
    launched = launcher_run_id()
    return launched[0] if launched is not None else None


def caller(find: Callable[[Mapping[str, Any]], Any], depth: int) -> Any:
    """The trainer (or accelerator) calling an adapter, found on the call stack, since the
    extension points hand adapters none: what ``find`` makes of the nearest of ``depth``
    frames' locals it returns something other than None for; None when there is none (a call
    by hand). ``find`` reads plain locals and instance dicts only, so no property runs."""
    frame = inspect.currentframe()
    try:
        frame = frame.f_back if frame is not None else None
        for _ in range(depth):
            if frame is None:
                return None
            found = find(frame.f_locals)
            if found is not None:
                return found
            frame = frame.f_back
        return None
    finally:
        del frame  # a frame held in a local keeps every frame above it alive


def stands_down(
    adapter: str, this: object, kind: type, siblings: Iterable[object], where: str
) -> bool:
    """Whether an earlier ``kind`` (``this``'s adapter class) among ``siblings`` (the trainer's
    callbacks or loggers, the Accelerator's trackers) does the logging: each would build a
    Logger of its own and write every row and the configuration to the run again (and every
    value to the tee twice), so only the first logs; the others say so once. ``where`` names
    the holder ("the trainer"), for the message."""
    first = next((each for each in siblings if isinstance(each, kind)), this)
    if first is this:
        return False
    warn_once(
        f"adapter:{adapter}:twice",
        f"rlmetrics: {adapter}: {where} has more than one {kind.__name__}; the first logs and "
        f"the others do nothing (each would log every row to the run again). Give {where} "
        "one, with every backend in its backends=",
    )
    return True


class HandedAgain:
    """Tells a dict a trainer hands an adapter twice in a row — the same object at the same
    step holding the same value objects — from a new one. A trainer hands the one dict to
    each entry of its list of loggers, and an adapter may be listed twice (Accelerate's
    ``init_trackers`` called again lists it again; ``Trainer(logger=[logger, logger])``):
    each entry would write the row to the run again. A dict the loop changes and logs again,
    or logs at another step, is a new one. Holds the last dict until the next call."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[Any, Any, tuple[Any, ...]] | None = None

    def __call__(self, values: Any, step: Any) -> bool:
        """Whether ``values`` at ``step`` is the dict handed in the call before."""
        held = tuple(values.items()) if isinstance(values, Mapping) else ()
        last, self._last = self._last, (values, step, held)
        if last is None or last[0] is not values or last[1] != step or len(last[2]) != len(held):
            return False
        return all(a[0] == b[0] and a[1] is b[1] for a, b in zip(last[2], held, strict=True))


class AdapterLogger:
    """The Logger an adapter writes to: ``logger`` as given, or one built on the first
    :meth:`start` from ``backends`` (``Logger``'s argument) and ``key_map``, kept for the
    adapter's whole life and finished once (:meth:`finish`, the adapter garbage-collected, or
    interpreter exit).

    Passing a Logger and ``backends`` or ``key_map`` too is a mistake (the Logger has its
    own), and so is an unknown backend, backend option or key map name: each raises
    ``ValueError`` here.
    """

    def __init__(
        self,
        logger: Logger | None = None,
        *,
        backends: Mapping[str, Mapping[str, Any] | None] | Iterable[str] | str | None = None,
        key_map: str | KeyMap | None = None,
        adapter: str = "adapter",
        ranks: str | RankMerger | None = None,
    ) -> None:
        self.adapter = adapter
        if logger is not None and ranks is not None:
            raise ValueError(
                f"{adapter}: pass either a Logger or ranks=, not both: ranks= alone builds a "
                "Logger that merges the ranks (from backends= and key_map=), and a Logger of "
                "yours merges them when you build it with ranks= (rlmetrics.Logger(ranks='torch'"
                "), on every rank once the process group is initialised): the adapter then "
                "calls it on every rank"
            )
        if ranks is not None and not isinstance(ranks, RankMerger) and ranks != "torch":
            raise ValueError(
                f"{adapter}: ranks={ranks!r}: pass 'torch' (the default process group) or a "
                "merger such as rlmetrics.ranks.torch_distributed(group=...)"
            )
        #: ``Logger``'s ``ranks`` for the Logger built here: resolved when it is built, on
        #: every rank, once the trainer has initialised its process group.
        self.ranks = ranks
        if logger is not None and (backends is not None or key_map is not None):
            raise ValueError(
                f"{adapter}: pass either a Logger or backends=/key_map= to build one, not both "
                "(configure the Logger you pass: rlmetrics.Logger(backends=..., key_map=...))"
            )
        if logger is not None and not isinstance(logger, Logger):
            raise TypeError(f"{adapter}: logger must be an rlmetrics.Logger, got {logger!r}")
        self.given = logger
        # As Logger takes them: a mapping of names to options, one name, or names.
        self.backends = named_choice("backend", adapter, backends)
        self.key_map = None if key_map is None else resolve_key_map(key_map)
        if self.backends is not None:
            from .backends import available_backends

            offered = available_backends()
            unknown = sorted(set(self.backends) - set(offered))
            if unknown:
                raise ValueError(
                    f"{adapter}: unknown backend(s) {unknown}; available: {sorted(offered)}"
                )
            # A misspelt option too, as Logger checks it: here, not at the first step, where
            # the guard would only warn and the run would lose every row.
            for name, options in self.backends.items():
                check_options("backend", name, offered[name][1], options, ("identity",))
        self._built: Logger | None = None
        self._finished = False
        self._finalizer: weakref.finalize[Any, Any] | None = None
        #: The configuration last logged through :meth:`log_hyperparams`, as plain values.
        self._last_hyperparams: dict[str, Any] | None = None
        #: The run's id as :meth:`run_id` last told it; ``_reserved`` when it was made here
        #: (the Logger built later takes it).
        self._run_id: str | None = None
        self._reserved: str | None = None

    @property
    def logger(self) -> Logger | None:
        """The Logger in use: the given one, or the one :meth:`start` built (None before it,
        and after :meth:`finish`)."""
        return self.given if self.given is not None else self._built

    @property
    def finished(self) -> bool:
        """Whether :meth:`finish` ended this adapter's life (a given Logger is never)."""
        return self._finished

    def start(self) -> Logger | None:
        """The Logger to write to, built the first time; None once :meth:`finish` ended the
        Logger built here (the call is dropped, and said once; in strict mode, raised as a
        :class:`~rlmetrics.StrictModeError`)."""
        if self.given is not None:
            return self.given
        if self._built is None:
            if self._finished:
                warn_once(
                    f"adapter:{self.adapter}:after-finish",
                    f"rlmetrics: {self.adapter} was called after its Logger was finished; what "
                    "it was given is dropped (one adapter is one run: make a new one, or pass "
                    "it a Logger of yours, which you finish)",
                )
                raise_if_strict()  # rows dropped: in strict mode, that stops the run
                return None
            # An id run_id() made up before the Logger was built is the run's, unless the run
            # has been named since (telemetry started: its id is the Logger's, and another
            # one would be refused).
            reserved = self._reserved if _named_run_id() is None else None
            built = Logger(
                self.backends, key_map=self.key_map, ranks=self._merger(), run_id=reserved
            )
            with _open_lock:
                _open.add(built)
            # The adapter gone (its trainer with it): the Logger is finished then. Not at
            # exit through weakref's own hook: the Logger's exit hook runs in a known order.
            self._finalizer = weakref.finalize(self, _finish_unattended, built)
            self._finalizer.atexit = False
            self._built = built
        return self._built

    def run_id(self, *, reserve: bool = True) -> str:
        """The id of the run this adapter writes, for a trainer that names things by it
        before anything is logged (Lightning's checkpoint folder is its logger's version):
        the Logger's (the last one's, once finished); before it is built, the id it will
        take — the running telemetry's, the configured one, the launcher's — else one made
        here, which the Logger built later takes when ``reserve`` (pass False on a rank
        whose Logger takes rank 0's id). Builds nothing."""
        logger = self.logger
        if logger is not None:
            self._run_id = logger.identity.run_id
        elif self._run_id is None or (self._reserved is not None and not self._finished):
            named = _named_run_id()
            if named is not None:
                self._run_id, self._reserved = named, None
            elif self._run_id is None:
                self._run_id = new_run_id()
                self._reserved = self._run_id if reserve else None
        return self._run_id

    def log_hyperparams(self, config: Any) -> None:
        """``config`` as the run's hyperparameters, to the Logger (built if need be) — unless
        it is the configuration logged through this adapter last: trainers hand theirs again
        at each stage (Lightning at each ``fit``, ``validate`` and ``test``; Accelerate at
        each ``init_trackers``), and the same configuration again is only a second header
        row, a second params upload. A changed one is logged."""
        logger = self.start()
        if logger is None:
            return
        plain = to_hyperparams(config)  # plain values: compared safely, whatever config holds
        if plain == self._last_hyperparams:
            return
        self._last_hyperparams = plain
        logger.log_hyperparams(config)

    @property
    def merges(self) -> bool:
        """Whether every rank calls this adapter's logging: ``ranks=`` was given, or the
        given Logger merges ranks itself (``rlmetrics.Logger(ranks=...)``). The adapter then
        calls its Logger on every rank (each rank's takes part in the merge), not on rank
        zero only."""
        return self.ranks is not None or merges_ranks(self.given)

    def _merger(self) -> RankMerger | None:
        """``ranks`` for the Logger built now: ``"torch"`` is the default process group's
        merger when one is initialised with more than one rank; a process on its own (the
        same script run without a launcher) logs its values as they are."""
        if self.ranks != "torch":
            return self.ranks if isinstance(self.ranks, RankMerger) else None
        dist = sys.modules.get("torch.distributed")  # never imported here: the trainer's
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
        if dist.get_world_size() < 2:
            return None
        from .ranks import torch_distributed

        return torch_distributed()

    def finish(self, *, failed: bool = False) -> None:
        """Finish the Logger built here, once (``failed``: the run ended with an error, which
        the trackers that keep a run's outcome are told); later :meth:`start` calls return
        None. A given Logger is its owner's to finish (it may outlive this trainer): it stays
        open, and the adapter keeps writing to it. In strict mode, raises what
        ``Logger.finish`` does."""
        if self.given is not None:
            return
        self._finished = True
        built, self._built = self._built, None
        finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.detach()
        if built is None:
            return
        with _open_lock:
            if built not in _open:
                return
            _open.discard(built)
        built.finish(failed=failed)

    def __getstate__(self) -> dict[str, Any]:
        # An adapter may travel to another process (Ray ships its callbacks to the Train
        # controller); a Logger holds files and threads, so it is built again there.
        state = dict(self.__dict__)
        state["_built"] = None
        state["_finalizer"] = None
        return state
