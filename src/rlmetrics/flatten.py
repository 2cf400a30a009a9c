"""Flattening a logged dict: ``{"a": {"b": 1}}`` becomes ``{"a/b": 1}``.

The first thing every logged dict goes through, on the training loop's thread, so it is both
on the hot path and the first to meet hostile input: the common leaves (floats, ints,
strings) are recognised by exact type before any ABC check, and nothing a dict holds can make
it raise or hang.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping
from typing import Any

from ._warn import describe_value, warn_once
from .events import STEP_KEY, WALL_TIME_KEY
from .values import readable_items

__all__ = ["MAX_DEPTH", "MAX_FLAT_KEYS", "flatten", "key_text"]

#: Keys one logged dict may flatten to. A dict past it (a runaway nested structure) keeps its
#: first MAX_FLAT_KEYS keys, and past them only the step's own keys and the keys the caller
#: says a series tees; the cut is reported once, with the count of keys it dropped.
MAX_FLAT_KEYS = 10_000
#: Nesting levels flattened; a mapping deeper than this is kept as a value, reported once.
MAX_DEPTH = 32
#: Keys that survive any cut: the axes a tracker plots a row against.
_AXIS_KEYS = frozenset({STEP_KEY, WALL_TIME_KEY})
# Exact types that are never mappings: the common leaves skip the ABC check.
_LEAVES = frozenset({float, int, str, bool, type(None), list, tuple, bytes})
_STR = frozenset({str})


def _is_mapping(value: Any) -> bool:
    kind = type(value)
    if kind is dict:
        return True
    if kind in _LEAVES:
        return False
    try:
        return isinstance(value, Mapping)
    except Exception:
        return False


def key_text(key: Any) -> str:
    """The string a key stands for (``str(key)``, or a placeholder if that raises)."""
    if type(key) is str:
        return key  # type: ignore[no-any-return]
    try:
        return str(key)
    except Exception:
        return f"<{type(key).__name__}>"


def flatten(
    metrics: Mapping[Any, Any],
    sep: str = "/",
    teed: Callable[[], Container[str]] | None = None,
) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a/b": 1}``; keys become strings. Never raises.

    A mapping that contains itself is not entered again (the cycle is cut), nesting stops at
    :data:`MAX_DEPTH` levels (a deeper mapping is kept as a value), and an entry that cannot
    be read is skipped on its own; two entries that flatten to one key (``{"a": {"b": 1},
    "a/b": 2}``) keep the later value. Past :data:`MAX_FLAT_KEYS` keys, only the axis keys
    (``rlmetrics/step``, ``telemetry/wall_time_seconds``) and the keys in ``teed()`` (the ones
    a declared series reads; asked for once, when the cap is first passed) are kept. Each is
    reported once; a cut says how many keys it dropped.
    """
    if (
        type(metrics) is dict
        and len(metrics) <= MAX_FLAT_KEYS
        # issuperset of an iterator: no set is built (two fifths of the check's time)
        and _STR.issuperset(map(type, metrics))
        and _LEAVES.issuperset(map(type, metrics.values()))
    ):
        # Already flat (the common case): string keys and plain leaves, checked in C.
        return dict(metrics)
    flat: dict[str, Any] = {}
    on_path: set[int] = set()
    admitted = dropped = 0
    survivors: Container[str] = _AXIS_KEYS

    def walk(node: Mapping[Any, Any], path: str, depth: int) -> None:
        nonlocal admitted, dropped, survivors
        on_path.add(id(node))
        try:
            # A plain dict is copied by C in one go (a snapshot, should another thread change
            # it meanwhile); any other mapping is read entry by entry, each in its own guard.
            items = list(node.items()) if type(node) is dict else readable_items(node)
            for key, value in items:
                name = key if type(key) is str else key_text(key)
                full = path + name if path else name
                if type(value) not in _LEAVES and _is_mapping(value):
                    if id(value) in on_path:
                        warn_once(
                            "flatten:cycle",
                            "rlmetrics: a logged mapping contains itself; the cycle is cut",
                        )
                        continue
                    if depth < MAX_DEPTH:
                        walk(value, full + sep, depth + 1)
                        continue
                    warn_once(
                        "flatten:too-deep",
                        f"rlmetrics: a logged dict is nested more than {MAX_DEPTH} levels deep; "
                        "each mapping below that level is logged as one value, not flattened",
                    )
                if full in flat:
                    # {"a": {"b": 1}, "a/b": 2} (two sources merged into one dict): one key
                    # holds one value, as a dict's update does; the earlier is not lost unsaid.
                    warn_once(
                        "flatten:same-key",
                        f"rlmetrics: two entries of a logged dict flatten to the key {full!r} "
                        "(a nested dict and a key with its path, or keys 1 and '1'); the later "
                        "one is logged",
                    )
                    flat[full] = value
                elif admitted < MAX_FLAT_KEYS:
                    admitted += 1
                    if admitted == MAX_FLAT_KEYS:
                        survivors = _survivors(teed)
                    flat[full] = value
                elif full in survivors:
                    flat[full] = value
                else:
                    dropped += 1
        finally:
            on_path.discard(id(node))

    if _is_mapping(metrics):
        walk(metrics, "", 0)
    else:
        warn_once(
            "flatten:not-a-mapping",
            f"rlmetrics: log_metrics takes a mapping, got {describe_value(metrics)}; dropped",
        )
    if dropped:
        warn_once(
            "flatten:too-many-keys",
            f"rlmetrics: a logged dict flattens to {len(flat) + dropped} keys, more than "
            f"{MAX_FLAT_KEYS}; {dropped} keys past the cap were dropped (the step's own keys "
            "and the keys a declared series tees were kept)",
        )
    return flat


class _Survivors:
    """The keys that survive a cut: the axis keys and those in ``teed``."""

    def __init__(self, teed: Container[str]) -> None:
        self._teed = teed

    def __contains__(self, key: object) -> bool:
        try:
            return key in _AXIS_KEYS or key in self._teed
        except Exception:  # a caller's container that raises keeps the axis keys only
            return key in _AXIS_KEYS


def _survivors(teed: Callable[[], Container[str]] | None) -> Container[str]:
    try:
        return _AXIS_KEYS if teed is None else _Survivors(teed())
    except Exception:
        return _AXIS_KEYS
