"""Which logged dicts also reach a typed hook: one table, no family named.

A training loop logs plain dicts; some of them are, by their prefix or keys, a setup-timing
report, a rollout-checkpoint event or an efficiency summary. Each row of :data:`ROUTES` says
how to recognise one, how to parse it into its typed payload (:mod:`rlmetrics.events`, the
hook contract) and which hook receives it. Mapping the payload to OpenTelemetry is the
families' business.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from ._warn import warn_once
from .events import (
    EFFICIENCY_PREFIX,
    EVALUATION_PREFIXES,
    ROLLOUT_EVENT_TYPES,
    SETUP_TIMING_PREFIX,
    TRAIN_PREFIXES,
    VALIDATION_PREFIX,
    WALL_TIME_KEY,
    EfficiencySummary,
    SetupTimings,
    rollout_event_from_metrics,
)
from .hooks import Hooks
from .key_patterns import ANY, pattern_regex
from .keyplans import KeyPlans

__all__ = [
    "KEY_PREFIXES",
    "ROUTES",
    "Route",
    "by_prefix",
    "carried",
    "deliver",
    "routes_for",
    "split",
    "take",
]


@attrs.frozen
class Route:
    """Dicts logged under one of ``prefixes`` are parsed by ``parse(prefix, flat)`` and handed
    to ``deliver(hooks, payload, step)``; a payload of None means the dict holds nothing for
    this hook (a train dict without ``efficiency/*`` keys). ``hook`` names the hook.

    ``wall_clock`` marks an event stream whose axis is Unix time, not the trainer step: a dict
    logged without ``telemetry/wall_time_seconds`` is stamped with the time it was logged,
    before any backend sees it, so every backend and the hook agree on its time.

    ``reads`` says which keys of such a dict the payload is parsed from, as a key pattern
    (:mod:`rlmetrics.known_keys`: ``**`` every key, ``efficiency/**`` those under it): they
    are known keys, never a typo ``Logger(unknown_keys=...)`` reports, and a dict with none
    of them is not parsed for the hook at all (decided once per key sequence).
    """

    hook: str
    prefixes: frozenset[str]
    parse: Callable[[str, Mapping[str, Any]], Any]
    deliver: Callable[[Hooks, Any, int], None]
    wall_clock: bool = False
    reads: str = "**"


_NO_SUMMARY = EfficiencySummary()


def _efficiency_summary(_prefix: str, flat: Mapping[str, Any]) -> EfficiencySummary | None:
    summary = EfficiencySummary.in_metrics(flat)
    return None if summary is None or summary == _NO_SUMMARY else summary


ROUTES: tuple[Route, ...] = (
    Route(
        "on_setup_timing",
        frozenset({SETUP_TIMING_PREFIX}),
        parse=lambda _prefix, flat: SetupTimings.from_metrics(flat),
        deliver=lambda hooks, timings, _step: hooks.on_setup_timing(timings),
    ),
    Route(
        "on_rollout_checkpoint",
        frozenset(ROLLOUT_EVENT_TYPES),
        parse=rollout_event_from_metrics,
        deliver=lambda hooks, event, _step: hooks.on_rollout_checkpoint(event),
        wall_clock=True,
    ),
    Route(
        "on_efficiency_summary",
        frozenset(TRAIN_PREFIXES),
        parse=_efficiency_summary,
        deliver=lambda hooks, summary, step: hooks.on_efficiency_summary(summary, step),
        reads=EFFICIENCY_PREFIX + "**",
    ),
)


def _index(routes: Iterable[Route]) -> dict[str, tuple[Route, ...]]:
    index: dict[str, tuple[Route, ...]] = {}
    for route in routes:
        for prefix in route.prefixes:
            index[prefix] = (*index.get(prefix, ()), route)
    return index


_BY_PREFIX = _index(ROUTES)


def take(
    prefix: str, flat: dict[str, Any], wanted: Callable[[str], bool], hooks_keys: bool = False
) -> list[Route]:
    """The routes a dict logged under ``prefix`` takes, before any backend sees it.

    A route whose hook is not ``wanted`` (only tees implement it and telemetry is off) is left
    out, so its payload is never parsed; a wall-clock stream's dict without a wall time is
    stamped here all the same, so the backends and the hook agree on it. With
    ``hooks_keys`` (``flat``'s keys are the ones the hooks get: no key map), a route none of
    whose keys the dict has is left out here too (:func:`deliver` checks it otherwise).
    """
    routes = _BY_PREFIX.get(prefix)  # routes_for, without its frame: this runs on every dict
    if not routes:
        return []
    if hooks_keys:
        routes = _routes_reading((prefix, *flat))
    taken = []
    for route in routes:
        if route.wall_clock:
            flat.setdefault(WALL_TIME_KEY, time.time())
        if wanted(route.hook):
            taken.append(route)
    return taken


def _reading(prefix_and_keys: tuple[Any, ...]) -> tuple[Route, ...]:
    """The routes of the prefix that read one of these keys at least."""
    prefix, keys = prefix_and_keys[0], prefix_and_keys[1:]
    found = []
    for route in routes_for(prefix):
        reads = pattern_regex(route.reads)
        if route.reads == ANY or any(type(k) is str and reads.fullmatch(k) for k in keys):
            found.append(route)
    return tuple(found)


#: Which routes a dict of these keys under this prefix holds anything for, once per sequence
#: (a loop logs a few; a smaller table than most, for a loop whose keys churn).
_routes_reading = KeyPlans(_reading, limit=64)


def deliver(
    taken: list[Route],
    hooks: Hooks,
    prefix: str,
    flat: Mapping[str, Any],
    step: int,
    hooks_keys: bool = False,
) -> None:
    """Parse each taken route's payload and call its hook; a dict a route cannot parse costs
    that hook only (``log_metrics`` still gets it). A route none of whose keys the dict
    has is skipped unparsed (a train dict without ``efficiency/*`` keys), unless
    ``hooks_keys`` says :func:`take` already left such routes out for these very keys."""
    reading = taken if hooks_keys else _routes_reading((prefix, *flat))
    for route in taken:
        if route not in reading:
            continue
        try:
            payload = route.parse(prefix, flat)
        except Exception:
            warn_once(
                f"route:{route.hook}",
                f"rlmetrics: a dict logged under {prefix!r} could not be read for "
                f"{route.hook}; that hook misses it, log_metrics still gets it",
            )
            continue
        if payload is not None:
            route.deliver(hooks, payload, step)


def routes_for(prefix: str) -> tuple[Route, ...]:
    """The routes a dict logged under ``prefix`` may take."""
    return _BY_PREFIX.get(prefix, ())


# -- a prefix written into the keys -----------------------------------------------------------

#: The prefixes a dict logged without one may carry in its keys' leading segments, the W&B way
#: (``{"train/reward": r}``, ``{"train": {"reward": r}}``): the plugins read such a key as the
#: rest of it logged under that prefix, as ``prefix="train"`` has them read it; the backends
#: keep it as logged. The prefixes the Logger's routing and the training family read, and the
#: evaluation ones (read by nothing, so ``eval/reward`` is never the training reward). Not the
#: rollout-checkpoint streams: their axis is their own sample index, not the trainer step.
KEY_PREFIXES = frozenset(
    {
        *(p for p in TRAIN_PREFIXES if p),
        VALIDATION_PREFIX,
        *EVALUATION_PREFIXES,
        SETUP_TIMING_PREFIX,
    }
)

#: A dict's keys by the prefix the plugins read them under: ``(prefix, ((logged key, key under
#: the prefix), ...))`` per prefix, in the order first logged; the keys of no prefix first.
Split = tuple[tuple[str, tuple[tuple[str, str], ...]], ...]


def _split(keys: tuple[Any, ...]) -> Split | None:
    groups: dict[str, list[tuple[str, str]]] = {}
    found = False
    for key in keys:
        prefix, rest = "", key
        if type(key) is str:
            cut = key.find("/")
            while cut > 0:
                if key[:cut] in KEY_PREFIXES and cut + 1 < len(key):
                    prefix, rest = key[:cut], key[cut + 1 :]
                    found = True
                    break
                cut = key.find("/", cut + 1)
        groups.setdefault(prefix, []).append((key, rest))
    if not found:
        return None
    unprefixed = groups.pop("", None)
    ordered = [("", unprefixed)] if unprefixed else []
    return tuple((prefix, tuple(pairs)) for prefix, pairs in [*ordered, *groups.items()])


#: Once per key sequence of a dict logged without a prefix; None when none of its keys carries
#: one (the common case: the step costs a tuple of its keys and a lookup).
_splits = KeyPlans(lambda keys: _split(keys) or (), limit=64)


def by_prefix(keys: tuple[Any, ...]) -> Split | None:
    """How a dict of ``keys`` logged without a prefix splits by the prefixes its keys carry
    (:data:`KEY_PREFIXES`), or None when none carries one."""
    return _splits(keys) or None


def split(
    flat: Mapping[str, Any], plan: Split
) -> list[tuple[str, dict[str, Any], tuple[tuple[str, str], ...]]]:
    """``flat`` (whose keys ``plan`` was made from) as ``(prefix, dict, pairs)`` per prefix,
    ``pairs`` the plan's ``(logged key, key under the prefix)`` of that dict (to set as
    :data:`rlmetrics.instruments.logged_keys` while the plugins read it)."""
    return [(prefix, {key: flat[logged] for logged, key in pairs}, pairs) for prefix, pairs in plan]


def carried(key: str) -> tuple[str, str]:
    """``(prefix, rest)`` of one key logged without a prefix that carries one
    (``("train", "reward")`` for ``train/reward``), else ``("", key)``. Not through the
    per-sequence table: one-key sequences asked for key by key would crowd a loop's own out."""
    parts = _split((key,))
    if parts is None:
        return "", key
    [(prefix, [(_logged, rest)])] = parts
    return prefix, rest
