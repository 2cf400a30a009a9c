"""A run read through the key map that wrote it.

A trainer's keys are not rlmetrics': TRL logs ``kl`` where NeMo-RL logs ``kl_penalty``. The
Logger's key map (``Logger(key_map="trl")``) says which key is which series, so the report and
``rlmetrics check --run`` read a run through the same map: a mapped key is the series it
feeds, a key the map keeps to the backends is not a finding.

The JSONL does not record the map. It is named (``--key-map``), or found from the run itself
when the rows say which trainer wrote them: the transformers callback
(``rlmetrics-transformers``, which applies the ``trl`` map unless given a Logger) logs the
trainer's ``TrainingArguments`` as the run's hyperparameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ..events import EFFICIENCY_PREFIX, TRAIN_PREFIXES
from ..keymaps import KeyMap, efficiency_key, resolve_key_map

__all__ = ["TRAINING_ARGUMENTS", "FoundKeyMap", "RunKeys", "found_key_map"]

#: Fields every ``transformers.TrainingArguments`` (and so every TRL config) has, and
#: ``to_dict()`` writes: hyperparameters holding all of them were logged by a transformers
#: trainer.
TRAINING_ARGUMENTS = frozenset(
    {
        "output_dir",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "learning_rate",
        "lr_scheduler_type",
        "logging_steps",
        "save_strategy",
        "max_steps",
    }
)
#: The map a transformers or TRL trainer's callback applies.
TRANSFORMERS_KEY_MAP = "trl"


@attrs.frozen
class FoundKeyMap:
    """The key map a run is read through, and how it was chosen (for the output)."""

    name: str
    how: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "how": self.how}


def found_key_map(
    hyperparams: Mapping[str, Any] | None, named: str | None = None
) -> FoundKeyMap | None:
    """The key map to read a run with: the one ``named`` (``--key-map``), else the one the
    run's hyperparameters show its trainer applied, else None."""
    if named is not None:
        return FoundKeyMap(named, "named with --key-map")
    if hyperparams is not None and set(hyperparams) >= TRAINING_ARGUMENTS:
        return FoundKeyMap(
            TRANSFORMERS_KEY_MAP,
            "found from the run: its hyperparameters are a transformers TrainingArguments, "
            "logged by the transformers/TRL callback, which applies this map "
            "(--key-map names another)",
        )
    return None


@attrs.frozen
class _Plan:
    dropped: frozenset[str]
    added: tuple[tuple[str, str], ...]  # (logged key, the key it is read as)


class RunKeys:
    """One key map applied to a run's train dicts as the report reads them: each key the map
    sends to a training series is also read under that series' logged key (``kl`` as
    ``kl_penalty``), each timing key under its efficiency category (``efficiency/<c>_s``), and
    a key the map lists whose name the report reads as something else (OpenRLHF's
    ``reward``, which is not the mean reward) is left out. The trainer's other keys stay as
    logged."""

    def __init__(self, key_map: str | KeyMap) -> None:
        from ..families import training
        from ..registry import default_registry

        self.key_map = resolve_key_map(key_map)
        self._series_key = {
            d.spec.name: d.spec.key
            for d in default_registry().declared()
            if d.group == training.GROUP
        }
        self._component_series = training.REWARD_COMPONENT
        self._read_as = frozenset(self._series_key.values())
        self._plans: dict[tuple[str, ...], _Plan] = {}

    def _reserved(self, key: str) -> bool:
        return key in self._read_as or key.startswith((EFFICIENCY_PREFIX, "reward/"))

    def _plan(self, keys: tuple[str, ...]) -> _Plan:
        dropped: set[str] = set()
        added: list[tuple[str, str]] = []
        for key in keys:
            found = self.key_map.rule_for(key)
            if found is None:
                continue
            rule, matched = found
            if self._reserved(key):
                dropped.add(key)
            if rule.category is not None:
                added.append((key, efficiency_key(rule.category)))
            elif rule.series == self._component_series and matched is not None:
                added.append((key, f"reward/{matched}"))
            elif rule.series in self._series_key:
                added.append((key, self._series_key[rule.series]))
        return _Plan(frozenset(dropped), tuple(added))

    def read(self, metrics: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        """``metrics`` (a dict logged under ``prefix``) as the report reads it."""
        if prefix not in TRAIN_PREFIXES:
            return dict(metrics)
        keys = tuple(k for k in metrics if isinstance(k, str))
        plan = self._plans.get(keys)
        if plan is None:
            plan = self._plans[keys] = self._plan(keys)
        out = {k: v for k, v in metrics.items() if k not in plan.dropped}
        for key, read_as in plan.added:
            out[read_as] = metrics[key]
        return out

    def rows(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``rows`` with each train dict read through the map (other rows as they are)."""
        out = []
        for row in rows:
            metrics = row.get("metrics")
            if isinstance(metrics, Mapping) and row.get("prefix", "") in TRAIN_PREFIXES:
                row = {**row, "metrics": self.read(metrics, row.get("prefix", ""))}
            out.append(row)
        return out
