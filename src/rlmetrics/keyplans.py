"""What depends only on a logged dict's keys, worked out once per key sequence.

A training loop logs the same keys in the same order every step, so whatever a dict's keys
alone decide (which are efficiency categories, which a key map lists, which go under ``eval``)
is worked out the first time a key sequence arrives and looked up afterwards: a step then
costs one tuple of its keys and a dict lookup, not a string test per key. A loop whose keys
change every step would grow the table without bound, so past ``limit`` sequences it starts
over.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ._process_state import resets_process_state

__all__ = ["DEFAULT_LIMIT", "KeyPlans"]

P = TypeVar("P")

#: Key sequences a table keeps before it starts over.
DEFAULT_LIMIT = 256
#: Every table, so a test starts with them empty: how full a table is decides when it starts
#: over, and a test that measures memory must not depend on the tests before it.
_TABLES: weakref.WeakSet[KeyPlans[Any]] = weakref.WeakSet()


class KeyPlans(Generic[P]):
    """``plans(keys)`` is ``build(keys)``, built once per distinct ``keys`` tuple.

    ``build`` must depend on the keys alone (never on the values) and must not return None.
    Safe from any thread: two threads that meet a new sequence at once may both build it, and
    either result serves.
    """

    __slots__ = ("__weakref__", "_build", "_limit", "_plans")

    def __init__(self, build: Callable[[tuple[Any, ...]], P], limit: int = DEFAULT_LIMIT) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"KeyPlans: limit must be a positive int, got {limit!r}")
        self._build = build
        self._limit = limit
        self._plans: dict[tuple[Any, ...], P] = {}
        _TABLES.add(self)

    def __call__(self, keys: tuple[Any, ...]) -> P:
        plan = self._plans.get(keys)
        if plan is None:
            plan = self._build(keys)
            if len(self._plans) >= self._limit:  # key sets that churn every step: start over
                self._plans.clear()
            self._plans[keys] = plan
        return plan

    def __len__(self) -> int:
        return len(self._plans)


@resets_process_state
def _empty_every_table() -> None:
    for table in list(_TABLES):
        table._plans.clear()
