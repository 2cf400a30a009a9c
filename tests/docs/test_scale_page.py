"""docs/scale.md and docs/ranks.md size what one rank sends per merged step: the row's width
(a header, the absent-value mask, one float64 per key), the bytes for 60 keys and what every
rank receives at 1,024 and 10,000 ranks. The figures are checked against a row the real
merger packs, so a change of the row's layout cannot leave the pages sizing the old one."""

from __future__ import annotations

import math
import re
from pathlib import Path

from rlmetrics.ranks.merger import RankMerger

DOCS = Path(__file__).resolve().parents[2] / "docs"
KEYS = 60


class _Capturing:
    """A collective of ``world_size`` ranks whose every rank packs the same row; it keeps the
    row this rank gathers."""

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size
        self.row: list[float] = []

    def all_gather(self, row: list[float]) -> list[list[float]]:
        self.row = list(row)
        return [list(row)] * self.world_size

    def all_gather_object(self, obj: object) -> list[object]:
        return [obj] * self.world_size


def _packed_width(keys: int) -> int:
    collective = _Capturing(rank=1, world_size=2)
    merger = RankMerger(collective, raw_path=None, background=False)
    step = {f"bench/k{i:02d}": float(i) for i in range(keys)}
    merger.merge(step, 0, "")
    merger.merge(step, 1, "")  # the table agreed: a step's own row
    return len(collective.row)


def _kilo(n_bytes: int) -> str:
    return f"{round(n_bytes / 1000)} KB"


def _mega(n_bytes: int) -> str:
    return f"{n_bytes / 1e6:.1f} MB"


def test_the_pages_size_the_row_the_merger_packs() -> None:
    width = _packed_width(KEYS)
    header = width - KEYS - math.ceil(KEYS / 52)
    assert _packed_width(1) == header + 1 + 1  # one key, one mask word: the header is fixed
    row_bytes = width * 8
    scale = (DOCS / "scale.md").read_text()
    formula = re.search(r"one row of `(\d+) \+ ceil\(K / 52\) \+ K` float64: (\d+) bytes", scale)
    assert formula is not None, "docs/scale.md no longer gives the row's formula"
    assert (int(formula.group(1)), int(formula.group(2))) == (header, row_bytes)
    received = f"{_kilo(row_bytes * 1024)} at 1,024 ranks, {_mega(row_bytes * 10_000)} at 10,000"
    assert received in scale
    assert f"at 10,000 ranks, {_mega(row_bytes * 10_000)} per" in scale
    ranks = (DOCS / "ranks.md").read_text()
    assert f"1,024-rank step is {row_bytes} bytes per rank" in ranks
