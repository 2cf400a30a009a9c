"""Flattening a logged dict: ``{"a": {"b": 1}}`` becomes ``{"a/b": 1}``.

The first thing every logged dict goes through, on the training loop's thread, so it is both
on the hot path and the first to meet hostile input: the common leaves (floats, ints,
strings) are recognised by exact type before any ABC check, and nothing a dict holds can make
it raise or hang.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._warn import describe_value, warn_once
from .values import readable_items

__all__ = ["MAX_FLAT_KEYS", "flatten", "key_text"]

#: Keys one logged dict may flatten to. A dict past it (a runaway nested structure) keeps its
#: first MAX_FLAT_KEYS keys; the overflow is reported once.
MAX_FLAT_KEYS = 10_000
_MAX_DEPTH = 32
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


def flatten(metrics: Mapping[Any, Any], sep: str = "/") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a/b": 1}``; keys become strings. Never raises.

    A mapping that contains itself is not entered again (the cycle is cut), nesting stops at
    32 levels (a deeper mapping is kept as a value), at most :data:`MAX_FLAT_KEYS` keys are
    kept, and an entry that cannot be read is skipped on its own; each is reported once.
    """
    if (
        type(metrics) is dict
        and len(metrics) <= MAX_FLAT_KEYS
        and set(map(type, metrics)) <= _STR
        and set(map(type, metrics.values())) <= _LEAVES
    ):
        # Already flat (the common case): string keys and plain leaves, checked in C.
        return dict(metrics)
    flat: dict[str, Any] = {}
    on_path: set[int] = set()

    def walk(node: Mapping[Any, Any], path: str, depth: int) -> bool:
        on_path.add(id(node))
        try:
            # A plain dict is copied by C in one go (a snapshot, should another thread change
            # it meanwhile); any other mapping is read entry by entry, each in its own guard.
            items = list(node.items()) if type(node) is dict else readable_items(node)
            for key, value in items:
                name = key if type(key) is str else key_text(key)
                full = path + name if path else name
                if type(value) not in _LEAVES and depth < _MAX_DEPTH and _is_mapping(value):
                    if id(value) in on_path:
                        warn_once(
                            "flatten:cycle",
                            "rlmetrics: a logged mapping contains itself; the cycle is cut",
                        )
                    elif not walk(value, full + sep, depth + 1):
                        return False
                    continue
                if len(flat) >= MAX_FLAT_KEYS:
                    warn_once(
                        "flatten:too-many-keys",
                        f"rlmetrics: a logged dict flattens to more than {MAX_FLAT_KEYS} keys; "
                        "the rest are dropped",
                    )
                    return False
                flat[full] = value
        finally:
            on_path.discard(id(node))
        return True

    if _is_mapping(metrics):
        walk(metrics, "", 0)
    else:
        warn_once(
            "flatten:not-a-mapping",
            f"rlmetrics: log_metrics takes a mapping, got {describe_value(metrics)}; dropped",
        )
    return flat
