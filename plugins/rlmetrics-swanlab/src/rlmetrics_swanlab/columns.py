"""What SwanLab would drop of a row, decided before it is handed over, so it can be said.

SwanLab keeps, per key, the kind of its first value (a number or a medium such as text) and
every step it holds, and silently drops a value at a step the key already has (any earlier
step, not only the last), while a value of the other kind, or at a step past
:data:`MAX_STEP`, is refused with an ERROR line of SwanLab's own on every row. The backend
mirrors those rules here (SwanLab 0.10's ``RunMetrics``, with the same kind of step set: a
roaring bitmap, a few bytes for a run of consecutive steps) and says each drop once.
"""

from __future__ import annotations

import hashlib
import re

from pyroaring import BitMap64

__all__ = ["MAX_KEY_LENGTH", "MAX_STEP", "NUMBER", "TEXT", "Columns", "swanlab_key"]

#: The largest step SwanLab takes (its ``_MAX_STEP``).
MAX_STEP = 1 << 48
#: The longest key SwanLab keeps (its ``METRIC_KEY_MAX_LENGTH``); it cuts a longer one.
MAX_KEY_LENGTH = 512
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: What SwanLab strips from a key's ends.
_EDGES = " \t\n\r./"
_DIGEST_CHARS = 8


def swanlab_key(key: str) -> tuple[str | None, bool]:
    """The key SwanLab keeps ``key`` as, and whether it differs from ``key``: each control
    character as its escape (SwanLab refuses the key), the ends stripped of spaces, ``.`` and
    ``/`` as SwanLab strips them, and a key past :data:`MAX_KEY_LENGTH` cut with ``-`` and 8 hex
    digits of a hash of the whole key (SwanLab's own cut made keys with one start one series).
    None for a key nothing is left of."""
    kept = _CONTROL.sub(lambda m: repr(m.group())[1:-1], key).strip(_EDGES)
    if len(kept) > MAX_KEY_LENGTH:
        digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        kept = kept[: MAX_KEY_LENGTH - _DIGEST_CHARS - 1] + "-" + digest[:_DIGEST_CHARS]
    return (kept or None), kept != key


#: The kinds of value a SwanLab key holds.
NUMBER, TEXT = "number", "text"


class Columns:
    """Per key: its kind and the steps SwanLab holds for it; and the key SwanLab keeps for
    each logged one (:func:`swanlab_key`)."""

    def __init__(self) -> None:
        self._kinds: dict[str, str] = {}
        self._steps: dict[str, BitMap64] = {}
        self._keys: dict[str, tuple[str | None, bool]] = {}

    def key(self, key: str) -> tuple[str | None, bool]:
        """:func:`swanlab_key` of ``key``, remembered."""
        found = self._keys.get(key)
        if found is None:
            found = self._keys[key] = swanlab_key(key)
        return found

    def refusal(self, key: str, kind: str, step: int) -> tuple[str, str] | None:
        """Why SwanLab would drop ``key``'s value of ``kind`` at ``step``, as ``(reason,
        text)`` (the reason keys the one warning); None when it takes it, which is then
        recorded."""
        if not 0 <= step <= MAX_STEP:
            return "step", (
                f"{key!r} was logged at step {step}; SwanLab takes steps from 0 to {MAX_STEP}"
            )
        first = self._kinds.setdefault(key, kind)
        if first != kind:
            return "kind", (
                f"{key!r} was first logged as a {first} and now as {kind}; SwanLab keeps one "
                f"kind per key and drops the {kind}"
            )
        steps = self._steps.setdefault(key, BitMap64())
        if step in steps:
            return "repeated", (
                f"{key!r} was logged again at step {step}, which it already has; SwanLab "
                "keeps the first value of a key at a step and drops the others"
            )
        steps.add(step)
        return None
