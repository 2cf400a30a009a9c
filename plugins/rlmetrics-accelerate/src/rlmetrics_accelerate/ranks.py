"""``log_ranks``: ``Accelerator.log`` for every rank, merged across them first.

``Accelerator.log`` runs on the main process only, so what the other processes hold never
reaches a tracker; a loop that wants the run's value reduces by hand first. ``log_ranks`` is
called on every rank instead: each rank's dict is merged over the process group Accelerate
initialised, as each series declares (:mod:`rlmetrics.ranks`: a reward weighted by samples,
token counts summed, phase seconds as stragglers...), every rank appends its raw values to a
file of its own, and the main process hands the run's dict to ``Accelerator.log``: every
tracker of the loop (``RLMetricsTracker`` and Accelerate's own) gets one merged row per step.
The raw rows carry the ``RLMetricsTracker``'s run id (every rank takes the main process's) and
prefix, so they join its rows.

A loop on one process (no process group, or one rank) is logged as it is. Nothing here
raises into the loop: a merge that fails is said once and the main process logs its own
values (see :class:`rlmetrics.ranks.RankMerger`).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Mapping
from typing import Any

from rlmetrics import warn_once
from rlmetrics.flatten import flatten
from rlmetrics.ranks import RankMerger

from .tracker import RLMetricsTracker, whole_step

__all__ = ["log_ranks"]

#: Each Accelerator's merger, built on its first ``log_ranks`` and finished with it.
_MERGERS: weakref.WeakKeyDictionary[Any, RankMerger | None] = weakref.WeakKeyDictionary()
_STEPS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
#: The prefix each Accelerator's raw rows carry: its RLMetricsTracker's.
_PREFIXES: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def _rlmetrics_tracker(accelerator: Any) -> RLMetricsTracker | None:
    """The loop's RLMetricsTracker: every rank holds it in ``log_with`` (Accelerate starts
    it, and builds its Logger, on the main process only)."""
    trackers = [
        *getattr(accelerator, "trackers", ()),
        *(getattr(accelerator, "log_with", ()) or ()),
    ]
    return next((t for t in trackers if isinstance(t, RLMetricsTracker)), None)


def _merger(accelerator: Any, given: RankMerger | None) -> RankMerger | None:
    if accelerator in _MERGERS:
        return _MERGERS[accelerator]
    merger = given
    if merger is None and getattr(accelerator, "num_processes", 1) > 1:
        dist = sys.modules.get("torch.distributed")  # Accelerate imported it, and set it up
        if dist is not None and dist.is_available() and dist.is_initialized():
            from rlmetrics.ranks import torch_distributed

            merger = torch_distributed()
    if merger is not None:
        # The raw rows name the tracker's run and prefix: the main process's tracker Logger
        # gives the run's identity (the other ranks take it as the merger binds), and every
        # rank's tracker its prefix.
        tracker = _rlmetrics_tracker(accelerator)
        logger = tracker.tracker if tracker is not None else None
        merger.bind(logger.identity if logger is not None else None)
        _PREFIXES[accelerator] = tracker.prefix if tracker is not None else ""
        weakref.finalize(accelerator, merger.finish)
    _MERGERS[accelerator] = merger
    return merger


def log_ranks(
    accelerator: Any,
    values: Mapping[str, Any],
    step: int | None = None,
    log_kwargs: Mapping[str, Any] | None = None,
    *,
    merger: RankMerger | None = None,
) -> None:
    """``accelerator.log(values, step, log_kwargs)`` with ``values`` merged across the ranks:
    call it on every rank, at the same steps (the merge is a collective).

    :param merger: the merger to use, from the first call on (default: one over the default
        process group, :func:`rlmetrics.ranks.torch_distributed`, when there is more than one
        process; its raw files are ``rlmetrics.rank{rank}.jsonl``).
    """
    merged: Mapping[str, Any] | None = values
    try:
        found = _merger(accelerator, merger)
        if found is not None:
            # The raw rows' step: the given one (a float's whole part), else the last given,
            # as RLMetricsTracker logs the merged row.
            last = _STEPS.get(accelerator, 0) if step is None else whole_step(step)
            _STEPS[accelerator] = last
            merged = found.merge(flatten(values), last, _PREFIXES.get(accelerator, ""))
    except Exception:
        warn_once(
            "accelerate:log_ranks",
            "rlmetrics-accelerate: log_ranks could not merge the ranks' values; the main "
            "process logs its own",
        )
        merged = values if accelerator.is_main_process else None
    if merged is not None and accelerator.is_main_process:
        accelerator.log(dict(merged), step=step, log_kwargs=dict(log_kwargs or {}))
