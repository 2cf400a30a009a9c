"""Attribute names and the mappings that keep every attribute value inside its closed set or
template, shared by the part-1 Gym families (rollouts, health, resources, driver, startup,
HTTP client).

Gym attribute values come from configs, exceptions and result rows: free text is always one
refactor away. So no value reaches an attribute unchecked: closed sets map anything else to a
fallback that is itself in the set, open values must match a short template (an identifier or a
server name) or become a fixed fallback. Every function here is pure and never raises.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any, Final

__all__ = [
    "DISPATCH_NAME_ATTR",
    "FAILURE_CLASS_ATTR",
    "FAILURE_KIND_ATTR",
    "FAILURE_TYPE_ATTR",
    "IDENTIFIER",
    "OUTCOME_ATTR",
    "SERVER_NAME",
    "TYPE_NAME",
    "bounded",
    "flag",
    "member",
]

# -- attribute keys shared by more than one module ------------------------------------------

OUTCOME_ATTR: Final = "nemo.gym.rollout.outcome"
DISPATCH_NAME_ATTR: Final = "nemo.gym.rollout.dispatch.name"
FAILURE_CLASS_ATTR: Final = "nemo.gym.failure_class"
FAILURE_KIND_ATTR: Final = "nemo.gym.failure_kind"
FAILURE_TYPE_ATTR: Final = "nemo.gym.failure_type"

# -- templates ------------------------------------------------------------------------------

#: A snake_case identifier: failure classes and kinds, health check ids.
IDENTIFIER: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")
#: A configured server name (``math_with_judge``, ``policy-model``, ``judge.v2``).
SERVER_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
#: A Python class name, as ``type(exc).__name__`` gives it.
TYPE_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def member(value: Any, closed: Collection[str]) -> bool:
    """Whether ``value`` is one of the strings in ``closed`` (False, never TypeError, for an
    unhashable value such as a list)."""
    return isinstance(value, str) and value in closed


def bounded(value: Any, template: re.Pattern[str], fallback: str) -> str:
    """``value`` when it is a string matching ``template`` in full, else ``fallback``."""
    if isinstance(value, str) and template.fullmatch(value):
        return value
    return fallback


def flag(value: Any) -> str:
    """``"true"`` or ``"false"`` for a flag from a result row.

    Python and NumPy bools and the numbers 0/1 are read as such; the strings ``true``/``false``
    (any case, surrounding blanks ignored) too, because a row that went through JSON or a
    config can carry them. Anything else (None, a missing value, other text) is ``"false"``:
    a sample is only treated as masked when it says so.
    """
    if isinstance(value, str):
        return "true" if value.strip().lower() in ("true", "1") else "false"
    try:
        return "true" if value is True or (value is not False and value == 1) else "false"
    except Exception:  # an object whose __eq__ raises (an ambiguous array)
        return "false"
