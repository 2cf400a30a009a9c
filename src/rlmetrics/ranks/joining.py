"""Whether every rank of a group builds its merger within a bound, agreed through a key-value
store (torch.distributed's own), before any collective is made on the merger's behalf.

Opening the merger's process group and agreeing the run id are collectives: a rank that never
makes them (its Logger built under ``if rank == 0:``) would leave the others waiting the
group's whole timeout, while the ranks without a merger wait as long in the trainer's next
collective, which then times out and ends the run. :func:`join` bounds the wait instead, and
every rank, the late ones included, reaches the same answer.

The protocol, on one counter per opening: each rank adds 1 as it arrives; the rank that makes
it the world size says so (``decided`` = the world size). A rank that waited its patience out
first adds :data:`CLOSED`: the count it raised is what had arrived by then, which the first to
close writes as ``decided``. A rank that arrives after that reads a count past ``CLOSED`` and
takes the decision written. Every rank returns ``decided``: all joined when it is the world
size, else none of them goes on to the collectives.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

__all__ = ["CLOSED", "JoinStore", "RanksNotJoined", "join"]

#: What a rank that stopped waiting adds to the count: far above any world size.
CLOSED = 1 << 40


class JoinStore(Protocol):
    """The part of ``torch.distributed.Store`` :func:`join` uses."""

    def add(self, key: str, amount: int) -> int: ...

    def set(self, key: str, value: str) -> None: ...

    def get(self, key: str) -> Any: ...

    def wait(self, keys: list[str], timeout: timedelta) -> None: ...


class RanksNotJoined(RuntimeError):
    """Not every rank built its merger within the patience: no rank merges."""

    def __init__(self, joined: int, world_size: int, patience: timedelta, late: bool) -> None:
        self.joined, self.world_size, self.patience, self.late = joined, world_size, patience, late
        super().__init__(
            f"{joined} of {world_size} ranks built a merger within "
            f"{patience.total_seconds():g} s" + (" (this rank came later)" if late else "")
        )


def join(store: JoinStore, key: str, world_size: int, patience: timedelta) -> None:
    """Arrive at ``key`` and wait at most ``patience`` for the other ranks; raises
    :class:`RanksNotJoined` on every rank (whenever each arrives) when some rank did not
    arrive in time. Each opening needs a ``key`` of its own, the same on every rank."""
    count_key, decided_key = f"{key}/count", f"{key}/decided"
    arrived = int(store.add(count_key, 1))
    late = arrived > CLOSED
    if arrived == world_size:
        store.set(decided_key, str(world_size))
        return
    if not late:
        try:
            store.wait([decided_key], patience)
        except Exception:  # the patience is out (torch raises DistStoreError, a RuntimeError)
            before = int(store.add(count_key, CLOSED)) - CLOSED
            if before < CLOSED:  # this rank closed first: the count it closed is the answer
                store.set(decided_key, str(before))
                if before != world_size:
                    raise RanksNotJoined(before, world_size, patience, late=False) from None
                return
    decided = int(_text(store.get(decided_key)))
    if decided != world_size:
        raise RanksNotJoined(decided, world_size, patience, late=late)


def _text(value: Any) -> str:
    """A store's value (torch's ``get`` gives bytes) as text."""
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)
