"""How each logged key merges across ranks: what the installed families declare, else what
the merger was told, else the efficiency dict's own rule, else a mean.

One resolver for every engine's merger (torch.distributed's, the Ray reducer's), so a key
merges the same way whichever engine carried it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from typing import Any

from .. import routing
from ..events import EFFICIENCY_PREFIX, VALIDATION_PREFIX
from ..key_patterns import is_pattern, pattern_regex
from ..plugins import hooks
from ..registry import default_registry
from ..spec import Reduce, Reduction
from .reduce import Column

__all__ = ["Reductions", "efficiency_reduction"]

_TRAINING = "rlmetrics.families.training"


def efficiency_reduction(key: str) -> Reduce | None:
    """The efficiency dict's rule: category seconds and the step's wall time are phases."""
    if not key.startswith(EFFICIENCY_PREFIX):
        return None
    if key == EFFICIENCY_PREFIX + "total_wall_time_s":
        return Reduce.MAX
    if key.endswith("_s"):
        return Reduce.STRAGGLER
    if key.endswith("_is_per_step"):
        return Reduce.LAST
    return Reduce.MEAN


class Reductions:
    """``{logger key: reduction}``, each key read as the series that reads it under the
    prefix it is logged under (or carries in its keys, ``{"eval/reward": r}``): a spec's own
    reduction wins over ``given`` (a spec whose key is a pattern, ``vllm/requests_waiting/*``,
    gives it to every key the pattern matches); a key neither names merges by the efficiency
    rule, else by mean.

    What reads a key: under ``validation`` and ``validation-<dataset>``, the per-dataset
    validation series (``<dataset>/reward`` is ``rl.validation.reward.mean``); in a train dict,
    the spec whose key it is, a reward component's series for ``reward/<component>`` and the
    per-dataset series for ``validation/<dataset>/<metric>``. A dict under any other prefix
    (``eval``, ``test``, a loop's own) is read by no series; its keys merge as the same keys
    of a train dict (an evaluation's ``num_samples`` sums, its ``reward`` weighs by them)."""

    def __init__(self, given: Mapping[str, Reduction | Reduce | str] | None = None) -> None:
        self._given = {
            key: value if isinstance(value, Reduction) else Reduction(value)
            for key, value in (given or {}).items()
        }
        self._declared: dict[str, Reduction] = {}
        #: Specs whose key is a pattern (one series read from many keys: a reason per key).
        self._declared_patterns: dict[str, Reduction] = {}
        #: The per-dataset validation series by their metric's key, and the reward
        #: components' series (keys a family reads by their shape, not their spec's key).
        self._datasets: dict[str, Reduction] = {}
        self._component: Reduction | None = None
        self._training: Any = None
        self._by_name: dict[str, str] = {}

    def columns(self, keys: Iterable[str], prefix: str = "") -> list[Column]:
        """A column per key of a dict logged under ``prefix``, in order. The declarations
        are read now (and the families loaded, if nothing has yet): called when a key set is
        new, rarely, so a family activated late is seen too."""
        hooks()
        # The family that reads components and datasets, when it is loaded; never imported
        # here: left out (RLMETRICS_DISABLE_PLUGINS), its declarations would come after the
        # freeze and fail the merge, and it declares nothing to look up.
        training = self._training = sys.modules.get(_TRAINING)
        for item in default_registry().declared():
            spec = item.spec
            self._by_name.setdefault(spec.name, spec.key)
            if training is not None and item.group == training.DATASET_GROUP:
                self._datasets.setdefault(spec.key, spec.reduction)
                continue
            if training is not None and spec.name == training.REWARD_COMPONENT:
                self._component = spec.reduction
            declared = self._declared_patterns if is_pattern(spec.key) else self._declared
            declared.setdefault(spec.key, spec.reduction)
        return [self._column(key, prefix) for key in keys]

    def _column(self, key: str, prefix: str) -> Column:
        # {"train/reward": r} logged without a prefix is read as reward under train
        # (rlmetrics.routing.by_prefix): it merges as reward does, its weight the same dict's
        # train/num_samples.
        carried, rest = routing.carried(key) if not prefix else ("", key)
        read = self._read_as(carried or prefix, rest)
        if read is None:
            given = self._given.get(key)
            kind = efficiency_reduction(rest)
            if given is not None:
                read = given, ""
            else:
                read = Reduction(kind if kind is not None else Reduce.MEAN), ""
        reduction, beside = read
        weight = None
        if reduction.kind is Reduce.WEIGHTED_MEAN:
            weight = self._by_name.get(str(reduction.weight), reduction.weight)
            if weight is not None:
                weight = beside + weight
                if carried:
                    weight = f"{carried}/{weight}"
        return Column(key, reduction.kind, weight)

    def _read_as(self, prefix: str, key: str) -> tuple[Reduction, str] | None:
        """The reduction of the series that reads ``key`` under ``prefix``, and what its
        weight's key is under in the same dict (a dataset's weight beside its metric), or
        None when no series reads it."""
        validation = prefix == VALIDATION_PREFIX or prefix.startswith(VALIDATION_PREFIX + "-")
        if not validation:
            found = self._declared.get(key) or self._matched(key)
            if found is not None:
                return found, ""
        training = self._training
        if training is None:
            return None
        component = self._component
        if not validation and component is not None and training.reward_components({key: 0.0}):
            return component, ""
        in_dataset = training.dataset_metrics({key: 0.0}, prefix if validation else "")
        if in_dataset:
            found = self._datasets.get(in_dataset[0][1])
            if found is not None:
                head, cut, _metric = key.rpartition("/")
                return found, head + cut
        return None

    def _matched(self, key: str) -> Reduction | None:
        for pattern, reduction in self._declared_patterns.items():
            if pattern_regex(pattern).fullmatch(key):
                return reduction
        return None
