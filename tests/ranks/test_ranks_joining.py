"""rlmetrics.ranks.joining: every rank reaches the same answer, whenever it arrives — all
joined when every rank came within the patience, else none (a late rank too), so no rank
goes on to a collective the others will not make."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from rlmetrics.ranks.joining import RanksNotJoined, join


class DictStore:
    """A key-value store with torch.distributed.Store's add/set/get/wait, in one process."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.changed = threading.Condition()

    def add(self, key: str, amount: int) -> int:
        with self.changed:
            value = int(self.values.get(key, "0")) + amount
            self.values[key] = str(value)
            self.changed.notify_all()
            return value

    def set(self, key: str, value: str) -> None:
        with self.changed:
            self.values[key] = value
            self.changed.notify_all()

    def get(self, key: str) -> bytes:
        with self.changed:
            if not self.changed.wait_for(lambda: key in self.values, 30.0):
                raise RuntimeError(f"get timeout: {key}")
            return self.values[key].encode()

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        with self.changed:
            found = self.changed.wait_for(
                lambda: all(k in self.values for k in keys), timeout.total_seconds()
            )
        if not found:
            raise RuntimeError(f"wait timeout: {keys}")


def joined(store: DictStore, world: int, patience_s: float) -> BaseException | None:
    try:
        join(store, "k", world, timedelta(seconds=patience_s))
    except RanksNotJoined as exc:
        return exc
    return None


def test_every_rank_on_time_joins() -> None:
    store = DictStore()
    results: list[BaseException | None] = [None] * 3
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, joined(store, 3, 30.0)))
        for i in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == [None, None, None]


def test_a_rank_alone_stops_waiting_and_a_late_rank_takes_the_same_answer() -> None:
    store = DictStore()
    first = joined(store, 2, 0.01)  # rank 0 alone, as under `if rank == 0:`
    assert isinstance(first, RanksNotJoined)
    assert (first.joined, first.world_size, first.late) == (1, 2, False)
    late = joined(store, 2, 30.0)  # the other rank, after rank 0 stopped waiting
    assert isinstance(late, RanksNotJoined)
    assert (late.joined, late.late) == (1, True)


class RaceStore(DictStore):
    """The other rank arrives just as this rank's wait runs out, before it writes its
    decision."""

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        self.add("k/count", 1)
        raise RuntimeError("wait timeout")


def test_a_rank_that_stops_waiting_after_every_rank_came_still_joins() -> None:
    assert joined(RaceStore(), 2, 0.01) is None  # the count it closed is the world: all joined


@pytest.mark.parametrize("world", [2, 3])
def test_two_ranks_that_stop_waiting_agree(world: int) -> None:
    store = DictStore()
    assert isinstance(joined(store, world + 1, 0.01), RanksNotJoined)
    second = joined(store, world + 1, 0.01)
    assert isinstance(second, RanksNotJoined) and second.late
