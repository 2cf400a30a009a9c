"""MetricRegistry: the declared series, frozen while telemetry runs, recorded by key.

Families declare their specs at import (``declare``); ``rlmetrics.start()`` freezes the
registry and binds every spec to an OpenTelemetry instrument (:mod:`rlmetrics.instruments`);
``record`` then writes by registry key, and is a cheap no-op while no session is bound.

A process pays only for the families it uses. A recorded series gets its instrument on its
first point; an observable one is called at every collection, so a group declared with
``on_use=True`` gets its observable instruments only once the process uses the family
(``activate(group)``: a server middleware built, a runtime sampler enabled), whether that is
before ``start()`` or long after the registry froze. Every installed distribution declares
at start; only the families a process activates cost it a collection.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING

import attrs

from ._fork import forget_in_child
from ._warn import describe_key, warn_once
from .instruments import Recorder, Session
from .spec import MetricSpec

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter

    from .known_keys import KeyPattern

__all__ = [
    "DeclarationError",
    "Declared",
    "LateDeclarationError",
    "MetricRegistry",
    "activate",
    "declare",
    "default_registry",
    "is_exporting",
    "record",
    "record_declared",
    "record_points",
    "retract",
]


class DeclarationError(ValueError):
    """Two declarations of one series disagree."""


class LateDeclarationError(DeclarationError):
    """A declaration arrived after the registry froze."""


@attrs.frozen
class Declared:
    """A spec with the group it belongs to and the module that declared it."""

    group: str
    spec: MetricSpec
    owner: str


def _caller_module(depth: int) -> str:
    try:
        return str(sys._getframe(depth + 1).f_globals.get("__name__", "<unknown>"))
    except ValueError:
        return "<unknown>"


class MetricRegistry(Recorder):
    """Declarations by group and key; instruments while a telemetry session is bound, and
    the :class:`~rlmetrics.instruments.Recorder` calls that write into them."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._by_key: dict[tuple[str, str], Declared] = {}
        self._by_name: dict[str, Declared] = {}
        # Groups whose observable instruments wait for the process to use the family, and
        # the groups this process has used (kept across sessions and into a forked child,
        # which inherits what the family built: a middleware, a sampler).
        self._on_use: set[str] = set()
        self._active: set[str] = set()
        self._frozen = False
        self._session = None
        #: The key patterns families declared (:mod:`rlmetrics.known_keys`): frozen, rolled
        #: back and isolated with the series.
        self._key_patterns: list[KeyPattern] = []
        #: Bumped by every change of what is declared: what is derived from the declarations
        #: (the known keys) is rebuilt when it moves, never per step.
        self.generation = 0
        forget_in_child(self)

    def _after_fork_in_child(self) -> None:
        # The parent's session is not the child's: recording is a no-op until the child
        # starts telemetry itself. The SDK objects are left alone, never shut down from here.
        self._lock = threading.RLock()
        self._session = None
        self._frozen = False

    # -- declaration ----------------------------------------------------------------------

    def declare(
        self,
        group: str,
        specs: Iterable[MetricSpec],
        *,
        owner: str | None = None,
        on_use: bool = False,
    ) -> None:
        """Declare ``specs`` under ``group``; raise on a conflict or after freeze.

        With ``on_use=True`` the group's observable instruments are created when the process
        first calls :meth:`activate` for it, not at start: a family installed everywhere but
        used in a few processes (a server's, a sampler's) costs the others no collection.
        Identical re-declaration (a module imported twice, a reload) is a no-op.
        """
        owner = owner or _caller_module(1)
        if isinstance(specs, (MetricSpec, str)) or not isinstance(specs, Iterable):
            one = isinstance(specs, MetricSpec)
            shown = f"MetricSpec({specs.name!r}, ...)" if one else "..."
            got = "one MetricSpec" if one else f"{type(specs).__name__} {specs!r}"
            raise DeclarationError(
                f"rlmetrics.declare({group!r}) from {owner} takes its specs in a list: "
                f"rlmetrics.declare({group!r}, [{shown}]); got {got}"
            )
        specs = list(specs)
        if not isinstance(group, str) or not group:
            raise DeclarationError(
                f"rlmetrics.declare from {owner}: group must be a non-empty string"
            )
        for spec in specs:
            if not isinstance(spec, MetricSpec):
                raise DeclarationError(
                    f"rlmetrics.declare({group!r}) from {owner}: expected MetricSpec, got {spec!r}"
                )
        with self._lock:
            if self._frozen:
                names = ", ".join(s.name for s in specs)
                raise LateDeclarationError(
                    f"rlmetrics.declare({group!r}) from {owner} came after telemetry started, "
                    f"so {names} would never be exported: declarations freeze at "
                    "rlmetrics.start(). "
                    + (
                        "In the script, declare it above the rlmetrics.start() call (beside the "
                        "imports), or move it to a module registered as an entry point in the "
                        "'rlmetrics' group so it loads at start."
                        if owner == "__main__"
                        else f"Import {owner} before rlmetrics.start(), or register it as an "
                        "entry point in the 'rlmetrics' group so it loads at start."
                    )
                )
            if on_use != (group in self._on_use) and any(g == group for g, _ in self._by_key):
                raise DeclarationError(
                    f"rlmetrics.declare({group!r}) from {owner}: the group was declared "
                    f"{'without' if on_use else 'with'} on_use=True before; one group is "
                    "activated one way"
                )
            pending: list[Declared] = []
            for spec in specs:
                item = Declared(group, spec, owner)
                self._check_conflict(item, pending)
                pending.append(item)
            if on_use:
                self._on_use.add(group)
            self.generation += 1
            for item in pending:
                # setdefault: an identical re-declaration keeps the first owner and position.
                self._by_key.setdefault((group, item.spec.key), item)
                self._by_name.setdefault(item.spec.name.lower(), item)

    def _check_conflict(self, item: Declared, pending: list[Declared]) -> None:
        spec = item.spec
        rivals = [
            self._by_key.get((item.group, spec.key)),
            self._by_name.get(spec.name.lower()),
            *(
                p
                for p in pending
                if p.spec.key == spec.key or p.spec.name.lower() == spec.name.lower()
            ),
        ]
        for rival in rivals:
            if rival is None:
                continue
            fields = rival.spec.conflicts_with(spec)
            if rival.group != item.group:
                fields.insert(0, "group")
            if fields:
                raise DeclarationError(
                    f"conflicting declarations of {spec.name!r} (key {spec.key!r}): "
                    f"{item.owner} declares it in group {item.group!r} and {rival.owner} in group "
                    f"{rival.group!r}; they differ in {', '.join(fields)}. One series has one "
                    "declaration: make them identical or rename one."
                )

    def declare_key_patterns(self, patterns: Iterable[KeyPattern], owner: str) -> None:
        """Declare logged keys a family reads (or keeps to the backends) that its series' keys
        do not say (:func:`rlmetrics.known_keys.declare_keys`); after freeze, an error."""
        patterns = list(patterns)
        with self._lock:
            new = [p for p in patterns if p not in self._key_patterns]
            if not new:
                return  # declared before (a module imported twice): a no-op, as for series
            if self._frozen:
                keys = ", ".join(repr(p.key) for p in patterns)
                raise LateDeclarationError(
                    f"rlmetrics.declare_keys from {owner} came after telemetry started, so "
                    f"{keys} would not be known to Logger(unknown_keys=...): declarations "
                    f"freeze at rlmetrics.start(). Import {owner} before rlmetrics.start(), or "
                    "register it as an entry point in the 'rlmetrics' group so it loads at start."
                )
            self._key_patterns.extend(new)
            self.generation += 1

    def key_patterns(self) -> list[KeyPattern]:
        """Every declared key pattern, in declaration order."""
        with self._lock:
            return list(self._key_patterns)

    def declared(self) -> list[Declared]:
        """Every declaration, in declaration order."""
        with self._lock:
            return list(self._by_key.values())

    def keys(self, group: str) -> Collection[str]:
        """The registry keys declared under ``group``."""
        session = self._session
        if session is not None:  # frozen: the session's index answers without a scan
            return session.groups.get(group, {}).keys()
        with self._lock:
            return frozenset(key for g, key in self._by_key if g == group)

    # -- activation ---------------------------------------------------------------------

    def activate(self, group: str) -> None:
        """The process uses ``group``'s family: create its observable instruments in the
        running session (and in every later one). Cheap once done; never raises, and never
        an error after the registry froze (the group was declared before). Call it where
        the family is first used, never from an observable callback (the SDK holds its
        collection lock there)."""
        if group in self._active:
            return
        try:
            with self._lock:
                if group in self._active:
                    return
                self._active.add(group)
                session = self._session
            if session is not None:
                session.activate(group)
        except Exception:
            warn_once(
                f"activate:{describe_key(group)}",
                f"rlmetrics: activating {describe_key(group)} failed; its observable series "
                "are not exported",
            )

    def bound_now(self, group: str) -> bool:
        """Whether ``group``'s observable instruments are created at start."""
        return group not in self._on_use or group in self._active

    def freeze(self) -> None:
        """Close declaration (telemetry start does this through ``bind``)."""
        with self._lock:
            self._frozen = True

    def mark(self) -> tuple[int, int]:
        """A point to :meth:`rollback` to: what a failed plugin declared is undone."""
        with self._lock:
            return len(self._by_key), len(self._key_patterns)

    def rollback(
        self, mark: tuple[int, int], keep: Callable[[str], bool] | None = None
    ) -> list[Declared]:
        """Forget every declaration (series and key patterns) made since ``mark``, but those
        of an owner ``keep`` says to keep; returns the series forgotten."""
        series, patterns = mark
        with self._lock:
            if self._frozen:
                raise LateDeclarationError("rlmetrics: cannot roll declarations back while frozen")
            since = list(self._by_key.values())[series:]
            undone = [item for item in since if keep is None or not keep(item.owner)]
            for item in undone:
                del self._by_key[(item.group, item.spec.key)]
                del self._by_name[item.spec.name.lower()]
            self._on_use &= {group for group, _ in self._by_key}
            self._key_patterns[patterns:] = [
                pattern
                for pattern in self._key_patterns[patterns:]
                if keep is not None and keep(pattern.owner)
            ]
            self.generation += 1
            return undone

    # -- sessions -------------------------------------------------------------------------

    def bind(self, meter: Meter) -> Session:
        """Freeze and build every declared instrument on ``meter``; recording starts. The
        session returned is what its provider's collections read the gauges from."""
        with self._lock:
            self._frozen = True
            self._session = session = Session(self._by_key.values(), meter, self.bound_now)
        return session

    def release(self) -> None:
        """End the session: recording becomes a no-op and declaration reopens."""
        with self._lock:
            if self._session is not None:
                self._session.active = False
            self._session = None
            self._frozen = False

    @property
    def exporting(self) -> bool:
        return self._session is not None

    def copy(self) -> MetricRegistry:
        """An unfrozen registry holding the same declarations (tests)."""
        clone = MetricRegistry()
        with self._lock:
            clone._by_key = dict(self._by_key)
            clone._by_name = dict(self._by_name)
            clone._on_use = set(self._on_use)
            clone._active = set(self._active)
            clone._key_patterns = list(self._key_patterns)
        return clone

    def _exchange(self, other: MetricRegistry) -> None:
        """Trade declarations and session with ``other``: how ``isolated_state`` gives a test
        its own default registry without replacing the object ``rlmetrics.record`` is bound
        to."""
        with self._lock, other._lock:
            self._by_key, other._by_key = other._by_key, self._by_key
            self._by_name, other._by_name = other._by_name, self._by_name
            self._on_use, other._on_use = other._on_use, self._on_use
            self._active, other._active = other._active, self._active
            self._frozen, other._frozen = other._frozen, self._frozen
            self._session, other._session = other._session, self._session
            self._key_patterns, other._key_patterns = other._key_patterns, self._key_patterns
            self.generation += 1
            other.generation += 1


_default = MetricRegistry()


def default_registry() -> MetricRegistry:
    """The process-wide registry that ``declare``/``record`` and ``start()`` use."""
    return _default


def declare(group: str, specs: Iterable[MetricSpec], *, on_use: bool = False) -> None:
    """Declare ``specs`` under ``group`` in the default registry (call at import time); with
    ``on_use=True`` its observable instruments wait for :func:`activate`."""
    _default.declare(group, specs, owner=_caller_module(1), on_use=on_use)


# The recording calls are methods of the one default registry, bound as ``random.random``
# is to random's hidden instance: a training loop's call reaches the recording loop in one
# frame, where a function looking the registry up would add a second. For that the default
# registry is never replaced; ``rlmetrics.testing.isolated_state`` swaps what it holds.
record = _default.record
activate = _default.activate
record_points = _default.record_points
record_declared = _default.record_declared
#: A family's batch of one histogram's values under one prepared attribute set (not public).
record_values = _default.record_values
retract = _default.retract


def is_exporting() -> bool:
    """Whether a started telemetry session is exporting (every tee is a no-op otherwise)."""
    return _default.exporting
