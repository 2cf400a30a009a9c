"""The collective of a process that already holds every rank's values: Ray Train's controller
receives each worker's report together, so its merger needs no exchange
(:meth:`RankMerger.merge_gathered`)."""

from __future__ import annotations

from typing import Any

__all__ = ["Gathered"]


class Gathered:
    """Rank 0 of a world whose rows arrive together: nothing to exchange. ``merge`` (which
    exchanges) fails on it, said once by the merger; ``merge_gathered`` is its call."""

    rank = 0
    #: Unknown until the rows arrive (each call's ``dicts`` is the world).
    world_size = 0

    def all_gather(self, row: list[float]) -> list[list[float]]:
        raise RuntimeError("rows gathered already: call RankMerger.merge_gathered(dicts, ...)")

    def all_gather_object(self, obj: Any) -> list[Any]:
        raise RuntimeError("rows gathered already: call RankMerger.merge_gathered(dicts, ...)")
