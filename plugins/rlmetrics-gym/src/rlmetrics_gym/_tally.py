"""Plain integer counts updated on the request path and read by observable callbacks.

A counted event (a request starting, a connection attempt, an operation entering its queue)
must cost a few integer updates, not an OpenTelemetry call: the SDK's ``Counter.add`` hashes
attributes, takes locks and finds the stream on every call. So the hot path updates a dict of
ints under a lock, and the exporter's thread turns a snapshot into observations when it
collects. Counting happens whether or not telemetry is exporting, so an up/down count stays
right when telemetry starts while work is in flight.

A tally names the group whose observable series read it: its first count activates that group
(``rlmetrics.activate``), so a process that never counts pays nothing at collection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Generic, TypeVar

import rlmetrics

__all__ = ["Tally"]

K = TypeVar("K", bound=Hashable)


class Tally(Generic[K]):
    """Integer counts by key, at most ``max_keys`` distinct keys.

    A key beyond the cap is counted under ``overflow`` (a key the caller chooses, so its
    attributes stay inside the declared template), keeping totals right while memory and series
    stay bounded.
    """

    __slots__ = ("_counts", "_group", "_idle", "_lock", "_max_keys", "_overflow")

    def __init__(self, overflow: K, max_keys: int = 64, *, group: str | None = None) -> None:
        self._lock = threading.Lock()
        self._counts: dict[K, int] = {}
        self._overflow = overflow
        self._max_keys = max_keys
        self._group = group
        self._idle = group is not None  # not counted since the group was last activated

    def add(self, key: K, delta: int = 1) -> K:
        """Add ``delta`` to ``key``'s count; returns the key actually counted, so a later
        decrement can go to the same one."""
        if self._idle:
            self._idle = False
            rlmetrics.activate(self._group)  # type: ignore[arg-type]
        with self._lock:
            counts = self._counts
            if key not in counts and len(counts) >= self._max_keys:
                key = self._overflow
            counts[key] = counts.get(key, 0) + delta
        return key

    def get(self, key: K) -> int:
        with self._lock:
            return self._counts.get(key, 0)

    def snapshot(self) -> dict[K, int]:
        with self._lock:
            return dict(self._counts)

    def reset(self) -> None:
        """Forget every count (a monotonic tally, when a telemetry session starts)."""
        with self._lock:
            self._counts.clear()
        self._idle = self._group is not None  # a fresh registry (a test) is activated again

    def observations(
        self, attributes: Callable[[K], Mapping[str, str]]
    ) -> Iterator[tuple[int, Mapping[str, str]]]:
        """``(count, attributes)`` pairs for an observable callback."""
        for key, count in self.snapshot().items():
            yield count, attributes(key)
