"""Many ranks, one run: each rank's logged dict merged into the run's as each series declares
(:class:`~rlmetrics.spec.Reduction`), on a distributed engine the run already has.

``Logger(ranks=rlmetrics.ranks.torch_distributed())`` (or ``ranks="torch"``) merges over the
trainer's torch.distributed process group: rank 0 logs the run's values, every rank keeps its
raw ones in a JSONL file of its own (docs/ranks.md). Other engines plug in by name through
the ``rlmetrics.ranks`` entry-point group (rlmetrics-ray's ``ranks="ray"``): the core names
no engine but the one it ships.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import Any, Protocol

from .._warn import describe_value
from ..configuration import ConfigurationError
from ..identity import RunIdentity
from ..spec import Reduce, Reduction
from .declared import Reductions
from .gathered import Gathered
from .handoff import DEFAULT_FULL_WAIT_S, DEFAULT_MAX_PENDING, Handoff
from .merger import (
    DEFAULT_RAW_PATH,
    Collective,
    RankMerger,
    RankRows,
    SeparableCollective,
    numbers_of,
    run_row,
    write_rank_hyperparams,
    write_rank_samples,
)
from .reduce import Column, Merged, Straggler, merge_columns

#: The entry-point group that names a Logger's ``ranks=`` engines: ``name = "module:factory"``,
#: the factory called with no arguments when a Logger is built with ``ranks="name"``.
ENTRY_POINT_GROUP = "rlmetrics.ranks"
#: The ``stream`` a Logger merges its efficiency summaries on (logged back as a summary).
EFFICIENCY_STREAM = "efficiency-summary"

__all__ = [
    "DEFAULT_RAW_PATH",
    "EFFICIENCY_STREAM",
    "ENTRY_POINT_GROUP",
    "GATHERED_RAW_PATH",
    "Collective",
    "Column",
    "Gathered",
    "Handoff",
    "Merged",
    "RankMerger",
    "RankRows",
    "Ranks",
    "Reductions",
    "SeparableCollective",
    "Straggler",
    "gathered",
    "merge_columns",
    "numbers_of",
    "resolve_ranks",
    "run_row",
    "torch_distributed",
    "write_rank_hyperparams",
    "write_rank_samples",
]


class Ranks(Protocol):
    """What a Logger's ``ranks=`` is: an engine's merger (:class:`RankMerger` on
    torch.distributed; rlmetrics-ray's reducer and ranks on Ray)."""

    @property
    def logs(self) -> bool:
        """Whether this process logs the run's rows (to its backends and the tee)."""

    #: Whether this process tees its own values (the logging one too: its trackers still get
    #: the run's rows), for recording rules that merge the ranks by run id.
    export_own: bool

    def bind(self, identity: RunIdentity | None, logger: Any = None) -> RunIdentity | None:
        """The Logger's run is known (``logger`` is the Logger, for an engine whose run
        rows arrive off the loop's thread: the Ray reducer logs them through it, the
        torch.distributed merger's thread through its ``_log_merged_row``). Returns the
        identity this rank's rows carry when the engine agreed one across the ranks (the
        Logger takes it), else None."""

    def merge(
        self, flat: Mapping[str, Any], step: int, prefix: str, stream: str | None = None
    ) -> dict[str, Any] | None:
        """The dict this process logs for ``flat`` (the run's), or None: it logs none now
        (not the logging process, or the run's row is delivered once merged)."""

    def drain(self, timeout_s: float) -> None:
        """Before the Logger closes (its lock not held): deliver what is still in flight,
        waiting at most ``timeout_s``."""

    def finish(self) -> None:
        """The Logger closes (under its lock)."""


def torch_distributed(
    group: Any = None,
    *,
    raw_path: str | os.PathLike[str] | None = DEFAULT_RAW_PATH,
    export_own: bool = False,
    reductions: Mapping[str, Reduction | Reduce | str] | None = None,
    background: bool = True,
    max_pending: int = DEFAULT_MAX_PENDING,
    full_wait_s: float = DEFAULT_FULL_WAIT_S,
    join_timeout_s: float = 300.0,
) -> RankMerger:
    """A merger over torch.distributed ``group`` (None: the default process group, which
    must be initialised). By default a Logger's merges run on the merger's own thread over a
    gloo group of its own, opened when the Logger is built: a collective, so build the Logger
    on every rank at the same point, never under ``if rank == 0:`` (a rank that built it
    alone waits ``join_timeout_s`` for the others, at most half the group's timeout, says so,
    and merges no more; so do ranks that build theirs later than that);
    ``background=False`` merges on the loop's thread. See :class:`RankMerger` for the other
    arguments."""
    from .torch import TorchCollective

    if not join_timeout_s > 0:
        raise ValueError(f"torch_distributed(join_timeout_s={join_timeout_s!r}): seconds, > 0")
    return RankMerger(
        TorchCollective(group, join_timeout_s),
        raw_path=raw_path,
        export_own=export_own,
        reductions=reductions,
        background=background,
        max_pending=max_pending,
        full_wait_s=full_wait_s,
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


#: What a merger passed as ``ranks=`` has (the :class:`Ranks` protocol).
_MERGER_PARTS = ("logs", "bind", "merge", "drain", "finish")


def resolve_ranks(ranks: str | Ranks | None) -> Ranks | None:
    """A Logger's ``ranks=``: a merger, ``"torch"`` (the default process group's), the name
    of an installed engine (the ``rlmetrics.ranks`` entry-point group), or None. A mistake
    raises here, saying what to pass (or which package the engine needs)."""
    if ranks is None:
        return None
    from importlib.metadata import entry_points

    engines = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    choices = (
        f"one of {', '.join(repr(name) for name in sorted({'torch', *engines}))} (an engine "
        f"installs its name in the {ENTRY_POINT_GROUP!r} entry-point group; rlmetrics-ray "
        "adds 'ray') or a merger such as rlmetrics.ranks.torch_distributed(group=...)"
    )
    if not isinstance(ranks, str):
        # Looked up without running them: a merger's ``logs`` may ask its engine.
        if all(inspect.getattr_static(ranks, part, None) is not None for part in _MERGER_PARTS):
            return ranks
        raise ConfigurationError(f"Logger(ranks=...) takes {choices}; got {describe_value(ranks)}")
    if ranks != "torch" and ranks not in engines:
        raise ConfigurationError(f"Logger(ranks={ranks!r}): pass {choices}")
    try:
        if ranks == "torch":
            return torch_distributed()
        built: Ranks = engines[ranks].load()()
        return built
    except ImportError as exc:
        raise ImportError(
            f"Logger(ranks={ranks!r}) needs the package {exc.name or str(exc)!r}, which is not "
            f"installed here ({exc})"
        ) from None  # the message says all the exception did
