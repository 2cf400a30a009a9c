"""Many ranks, one run: each rank's logged dict merged into the run's as each series declares
(:class:`~rlmetrics.spec.Reduction`), on a distributed engine the run already has.

``Logger(ranks=rlmetrics.ranks.torch_distributed())`` (or ``ranks="torch"``) merges over the
trainer's torch.distributed process group: rank 0 logs the run's values, every rank keeps its
raw ones in a JSONL file of its own (docs/ranks.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..spec import Reduce, Reduction
from .gathered import Gathered
from .merger import DEFAULT_RAW_PATH, Collective, RankMerger, RankRows
from .reduce import Column, Merged, Straggler, merge_columns

__all__ = [
    "DEFAULT_RAW_PATH",
    "GATHERED_RAW_PATH",
    "Collective",
    "Column",
    "Gathered",
    "Merged",
    "RankMerger",
    "RankRows",
    "Straggler",
    "gathered",
    "merge_columns",
    "resolve_ranks",
    "torch_distributed",
]


def torch_distributed(
    group: Any = None,
    *,
    raw_path: str | os.PathLike[str] | None = DEFAULT_RAW_PATH,
    export_own: bool = False,
    reductions: Mapping[str, Reduction | Reduce | str] | None = None,
) -> RankMerger:
    """A merger over torch.distributed ``group`` (None: the default process group, which
    must be initialised). See :class:`RankMerger` for the other arguments."""
    from .torch import TorchCollective

    return RankMerger(
        TorchCollective(group), raw_path=raw_path, export_own=export_own, reductions=reductions
    )


#: The raw rows of a merger whose process holds every rank's values: one file for all ranks.
GATHERED_RAW_PATH = "rlmetrics.ranks.jsonl"


def gathered(
    *,
    raw_path: str | os.PathLike[str] | None = GATHERED_RAW_PATH,
    reductions: Mapping[str, Reduction | Reduce | str] | None = None,
) -> RankMerger:
    """A merger for a process that receives every rank's dict itself (Ray Train's
    controller): :meth:`RankMerger.merge_gathered` merges them with no collective. Its
    ``raw_path`` is one file for every rank (each row carries its ``rank``)."""
    return RankMerger(Gathered(), raw_path=raw_path, reductions=reductions)


def resolve_ranks(ranks: str | RankMerger | None) -> RankMerger | None:
    """A Logger's ``ranks=``: a merger, ``"torch"`` (the default process group's) or None."""
    if ranks is None or isinstance(ranks, RankMerger):
        return ranks
    if ranks == "torch":
        return torch_distributed()
    raise ValueError(
        f"Logger(ranks={ranks!r}): pass 'torch' or a merger such as "
        "rlmetrics.ranks.torch_distributed(group=...)"
    )
