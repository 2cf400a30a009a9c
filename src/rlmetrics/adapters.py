"""What every trainer adapter shares: the Logger it writes to, and a guard on every call.

An adapter (a ``transformers.TrainerCallback``, a Lightning ``Logger``, an Accelerate tracker,
a Ray Train callback) is a thin translation from the trainer's extension point to
:class:`~rlmetrics.Logger` calls. Two things are the same in all of them:

- :class:`AdapterLogger`: the Logger the user passed, used as it is, or one the adapter builds
  from ``backends`` and ``key_map`` when the trainer starts (on the process that logs, so a
  rank that never logs opens no file and no tracker run), finishes when it ends and builds
  again if the trainer runs again. The configuration is checked where the adapter is made:
  an unknown backend or key map fails before the trainer starts, with the choices.
- :func:`guarded`: the trainer calls the adapter from its own loop, so nothing the adapter
  does may raise into it; a failure is reported once, naming the adapter and the call, and
  the trainer's step goes on.

A third-party adapter (for a trainer with its own logger interface) is built from the same two.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from ._warn import warn_once
from .keymaps import KeyMap, resolve_key_map
from .logger import Logger

__all__ = ["AdapterLogger", "guarded"]

_F = TypeVar("_F", bound=Callable[..., Any])


def guarded(adapter: str, call: str) -> Callable[[_F], _F]:
    """Wrap an adapter's method so that it never raises into the trainer: an exception is
    reported once (``adapter`` and ``call`` named) and the method returns None."""

    def wrap(function: _F) -> _F:
        @functools.wraps(function)
        def guard(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            except Exception:
                warn_once(
                    f"adapter:{adapter}:{call}",
                    f"rlmetrics: {adapter}: {call} failed; the trainer goes on (later failures "
                    "of this call are reported at DEBUG)",
                )
                return None

        return guard  # type: ignore[return-value]

    return wrap


class AdapterLogger:
    """The Logger an adapter writes to: ``logger`` as given, or one built on :meth:`start`
    from ``backends`` (``Logger``'s argument) and ``key_map``.

    Passing a Logger and ``backends`` or ``key_map`` too is a mistake (the Logger has its
    own), and so is an unknown backend or key map name: each raises ``ValueError`` here.
    """

    def __init__(
        self,
        logger: Logger | None = None,
        *,
        backends: Mapping[str, Mapping[str, Any] | None] | None = None,
        key_map: str | KeyMap | None = None,
        adapter: str = "adapter",
    ) -> None:
        self.adapter = adapter
        if logger is not None and (backends is not None or key_map is not None):
            raise ValueError(
                f"{adapter}: pass either a Logger or backends=/key_map= to build one, not both "
                "(configure the Logger you pass: rlmetrics.Logger(backends=..., key_map=...))"
            )
        if logger is not None and not isinstance(logger, Logger):
            raise TypeError(f"{adapter}: logger must be an rlmetrics.Logger, got {logger!r}")
        self.given = logger
        self.backends = None if backends is None else dict(backends)
        self.key_map = None if key_map is None else resolve_key_map(key_map)
        if self.backends is not None:
            from .backends import available_backends

            unknown = sorted(set(self.backends) - set(available_backends()))
            if unknown:
                raise ValueError(
                    f"{adapter}: unknown backend(s) {unknown}; available: "
                    f"{sorted(available_backends())}"
                )
        self._built: Logger | None = None

    @property
    def logger(self) -> Logger | None:
        """The Logger in use: the given one, or the one :meth:`start` built (None before)."""
        return self.given if self.given is not None else self._built

    def start(self) -> Logger:
        """The Logger to write to, building it the first time (or again after :meth:`finish`)."""
        if self.given is not None:
            return self.given
        if self._built is None:
            self._built = Logger(self.backends, key_map=self.key_map)
        return self._built

    def finish(self) -> None:
        """Finish the Logger built here and forget it, so the trainer can run again. A given
        Logger is its owner's to finish: it may outlive this trainer."""
        built, self._built = self._built, None
        if built is not None:
            built.finish()

    def __getstate__(self) -> dict[str, Any]:
        # An adapter may travel to another process (Ray ships its callbacks to the Train
        # controller); a Logger holds files and threads, so it is built again there.
        state = dict(self.__dict__)
        state["_built"] = None
        return state
