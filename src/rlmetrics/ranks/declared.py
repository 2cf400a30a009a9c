"""How each logged key merges across ranks: what the installed families declare, else what
the merger was told, else the efficiency dict's own rule, else a mean.

One resolver for every engine's merger (torch.distributed's, the Ray reducer's), so a key
merges the same way whichever engine carried it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .. import routing
from ..events import EFFICIENCY_PREFIX, TRAIN_PREFIXES
from ..key_patterns import is_pattern, pattern_regex
from ..plugins import hooks
from ..registry import default_registry
from ..spec import Reduce, Reduction
from .reduce import Column

__all__ = ["Reductions", "efficiency_reduction"]


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
    """``{logger key: reduction}``: a spec's own reduction wins over ``given`` (a spec whose
    key is a pattern, ``vllm/requests_waiting/*``, gives it to every key the pattern matches);
    a key neither names merges by the efficiency rule, else by mean."""

    def __init__(self, given: Mapping[str, Reduction | Reduce | str] | None = None) -> None:
        self._given = {
            key: value if isinstance(value, Reduction) else Reduction(value)
            for key, value in (given or {}).items()
        }
        self._declared: dict[str, Reduction] = {}
        #: Specs whose key is a pattern (one series read from many keys: a reason per key).
        self._declared_patterns: dict[str, Reduction] = {}
        self._by_name: dict[str, str] = {}

    def columns(self, keys: Iterable[str]) -> list[Column]:
        """A column per key, in order. The declarations are read now (and the families
        loaded, if nothing has yet): called when a key set is new, rarely, so a family
        activated late is seen too."""
        hooks()
        for item in default_registry().declared():
            key = item.spec.key
            declared = self._declared_patterns if is_pattern(key) else self._declared
            declared.setdefault(key, item.spec.reduction)
            self._by_name.setdefault(item.spec.name, key)
        return [self._column(key) for key in keys]

    def _column(self, key: str) -> Column:
        reduction = self._declared.get(key) or self._matched(key) or self._given.get(key)
        carried = ""
        if reduction is None:
            # {"train/reward": r} logged without a prefix is read as reward under train
            # (rlmetrics.routing.by_prefix): it merges as reward does, its weight the same
            # dict's train/num_samples.
            carried, rest = _carried_train_key(key)
            if carried:
                reduction = self._declared.get(rest) or self._matched(rest)
        if reduction is None:
            carried, kind = "", efficiency_reduction(key)
            reduction = Reduction(kind if kind is not None else Reduce.MEAN)
        weight = None
        if reduction.kind is Reduce.WEIGHTED_MEAN:
            weight = self._by_name.get(str(reduction.weight), reduction.weight)
            if carried and weight is not None:
                weight = f"{carried}/{weight}"
        return Column(key, reduction.kind, weight)

    def _matched(self, key: str) -> Reduction | None:
        for pattern, reduction in self._declared_patterns.items():
            if pattern_regex(pattern).fullmatch(key):
                return reduction
        return None


def _carried_train_key(key: str) -> tuple[str, str]:
    """``("train", "reward")`` for ``train/reward``: a key that carries a train prefix, as a
    dict logged without one is read; ``("", key)`` for any other."""
    prefix, rest = routing.carried(key)
    return (prefix, rest) if prefix in TRAIN_PREFIXES else ("", key)
