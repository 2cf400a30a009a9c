"""What the tracing modules share in this process: the tracer binding (None when not
tracing), the phase table plugins offer, the step's and the run's accounting, the run clock
and the scopes open while tracing.

One object, :data:`state`, reset in place (between tests, in a forked child), so every module
that imports it keeps seeing the current one.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .. import plugins as _plugins
from .._fork import reset_in_child
from .._warn import describe_key, describe_value, warn_once
from .accounting import DEFAULT_CLOCK, PhaseKind, PhaseSeconds

if TYPE_CHECKING:
    from .binding import Binding
    from .naming import Naming
    from .scopes import Scope, Step

__all__ = ["kinds", "new_session", "reset", "state", "target"]

_NOT_LOADED = object()


class _State:
    """What phases share in this process (see the module's docstring)."""

    def __init__(self) -> None:
        #: The thread that started this process (a forked child's forking thread): its spans
        #: carry no ``thread.*`` attributes.
        self.main_thread = threading.main_thread().ident
        self.reset()

    def reset(self) -> None:
        """Forget the binding, the phase table, the accounting and the open spans."""
        self.binding: Binding | None = None
        self.kinds: dict[str, PhaseKind] = {}
        #: Where each accounted name's seconds go (the step's accounting or the run's).
        self.targets: dict[str, PhaseSeconds] = {}
        #: The names whose phases read one wall clock (``PhaseKind.wall_clock``): overlapping
        #: phases of one count once.
        self.wall_clock: frozenset[str] = frozenset()
        self.kinds_source: object = _NOT_LOADED
        self.step_timer = PhaseSeconds()
        self.run_timer = PhaseSeconds()
        self.clock = DEFAULT_CLOCK
        self.run_start_ns: int | None = None
        self.steps: list[Step] = []  # open steps, innermost last
        self.runs = 0  # rlmetrics.run() scopes open: they own the run's accounting
        self.last_step: int | None = None
        self.open: dict[int, Scope] = {}  # open scopes while tracing, by id
        #: Open live trajectories (``rlmetrics.trajectory`` blocks), by id: what shutdown
        #: delivers as it stands (each has ``_truncate(reason)`` and ``_logger``).
        self.live: dict[int, Any] = {}
        self.sequence = 0
        #: The naming profile in use (``start(naming=...)``); None: rlmetrics' names only.
        self.naming: Naming | None = None

    def new_session(self) -> None:
        """A telemetry session starts: the accounting starts afresh (:meth:`start_run`)
        unless an ``rlmetrics.run()`` scope is open, which owns it."""
        if not self.runs:
            self.start_run()

    def start_run(self) -> None:
        """The step's and the run's accounting, the run's start and the last step, afresh."""
        self.step_timer.take()
        self.run_timer.take()
        self.run_start_ns = None
        self.last_step = None


state = _State()


@reset_in_child
def _forget_after_fork() -> None:
    """In a forked child the parent's tracer, accounting and open spans are not its own."""
    state.reset()
    state.main_thread = threading.get_ident()


def reset() -> None:
    """Forget the accounting, the phase table and the open spans (tests, a forked child)."""
    state.reset()


def new_session() -> None:
    """A telemetry session starts (``telemetry.start`` calls it): the run-wide totals of the
    last session (cumulative phases, the run's wall time) do not carry into this one, and the
    phase table is read (a phase's start reads which names are wall-clock ones)."""
    state.new_session()
    kinds()


def kinds() -> dict[str, PhaseKind]:
    """The phase table, offered by the loaded plugins (read again when they reload)."""
    source = _plugins._plugins
    if source is None or source is not state.kinds_source:
        source = _plugins.get_plugins()
        if source is not state.kinds_source:
            offered = state.kinds = _load_kinds(source)
            state.targets = {
                name: state.run_timer if kind.cumulative else state.step_timer
                for name, kind in offered.items()
            }
            state.wall_clock = frozenset(n for n, kind in offered.items() if kind.wall_clock)
            state.kinds_source = source
    return state.kinds


def target(name: str) -> PhaseSeconds | None:
    """The accounting a phase's seconds go to; None for a phase nobody offers."""
    if _plugins._plugins is not state.kinds_source:
        kinds()
    return state.targets.get(name)


def _load_kinds(source: _plugins.Plugins) -> dict[str, PhaseKind]:
    from ..hooks import collect_offers

    offered: dict[str, PhaseKind] = {}
    for name, (plugin, kind) in collect_offers("phase", source.hooks.register_phases).items():
        if isinstance(name, str) and isinstance(kind, PhaseKind):
            offered[name] = kind
        else:
            warn_once(
                f"phase-offer:{plugin}",
                f"rlmetrics: plugin {plugin!r} offered phase {describe_key(name)} with "
                f"{describe_value(kind)}, not a PhaseKind; ignored",
            )
    return offered
