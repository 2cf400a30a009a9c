"""The keys a run logged that reach the trackers only: no declared series reads them, so
OpenTelemetry never sees them (``rlmetrics check --run RUN.jsonl``).

Which keys a family reads cannot be told from the declarations alone (patterns, routes,
plugins' own hooks), so each logged key is tried through the installed plugins themselves:
the key alone, logged under its prefix into a throwaway in-memory session, is teed when it
makes a series export a point that the same prefix logged empty does not. Setup and
rollout-checkpoint dicts are events whose every field belongs to its payload; they are not
tried.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ..events import TRAIN_PREFIXES
from ..families.training import dataset_metrics
from ..values import as_number
from .select import key_name, step_values

__all__ = ["Unexported", "declaring_line", "unexported_keys"]

_NOT_NAME = re.compile(r"[^a-z0-9_.]+")


@attrs.frozen
class Unexported:
    """One logged key no series reads, and what would tee it."""

    prefix: str
    key: str
    #: The line that would declare a series for it, or what to do when none can.
    remedy: str

    @property
    def name(self) -> str:
        return key_name(self.prefix, self.key)

    def as_dict(self) -> dict[str, str]:
        return {"prefix": self.prefix, "key": self.key, "remedy": self.remedy}


def declaring_line(prefix: str, key: str) -> str:
    """The one line that would tee ``key`` logged under ``prefix`` (a train dict's key: a
    gauge by :func:`rlmetrics.families.training.tee_scalar`), or what to do instead."""
    for _dataset, metric, _value in dataset_metrics({key: None}, prefix):
        # A per-dataset validation metric: one gauge for every dataset, rl.dataset its label.
        name = "rl.validation." + _series_name(metric)
        return (
            f'tee_dataset_metric("{metric}", "{name}", description="...")  '
            "# rlmetrics.families.training"
        )
    if prefix in TRAIN_PREFIXES:
        name = "rl." + _series_name(key)
        return f'tee_scalar("{key}", "{name}", description="...")  # rlmetrics.families.training'
    return (
        f"no family reads dicts logged under {prefix!r}: log it in the train dict and "
        "declare it with tee_scalar, or read it in a family of your own "
        "(docs/writing-a-plugin.md)"
    )


def _series_name(key: str) -> str:
    """A series name's tail for a logged key: lower case, ``/`` as ``.``, the rest ``_``."""
    return _NOT_NAME.sub("_", key.lower().replace("/", ".")).strip("._")


def _logged(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Any]:
    """``{(prefix, key): a number logged under it}`` for every key logged at a trainer step."""
    found: dict[tuple[str, str], Any] = {}
    for _step, prefix, key, value in step_values(rows):
        if (prefix, key) not in found and as_number(value) is not None:
            found[(prefix, key)] = value
    return found


def unexported_keys(
    rows: Iterable[Mapping[str, Any]], key_map: str | None = None
) -> tuple[list[Unexported], int]:
    """The keys of ``rows`` that no installed plugin's series reads (with ``key_map``
    applied, as ``Logger(key_map=...)`` would), and how many keys were tried. Call it with
    telemetry not started: it binds the process's registry to an in-memory session for each
    try."""
    from ..keymaps import KeyMapper, resolve_key_map

    mapper = None if key_map is None else KeyMapper(resolve_key_map(key_map))
    logged = _logged(rows)
    baselines: dict[str, set[str]] = {}
    missing = []
    for (prefix, key), value in logged.items():
        if prefix not in baselines:
            baselines[prefix] = _exported(prefix, {}, mapper)
        if not _exported(prefix, {key: value}, mapper) - baselines[prefix]:
            missing.append(Unexported(prefix, key, declaring_line(prefix, key)))
    return missing, len(logged)


def _exported(prefix: str, metrics: dict[str, Any], mapper: Any) -> set[str]:
    """The series that export a point when ``metrics`` is logged under ``prefix`` through
    every installed plugin, in a session of its own."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from .. import routing
    from ..plugins import get_plugins
    from ..registry import default_registry

    hooks = get_plugins().hooks
    registry = default_registry()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    registry.bind(provider.get_meter("rlmetrics.check"))
    try:
        flat = dict(metrics)
        taken = routing.take(prefix, flat, hooks.wanted)
        tee = flat if mapper is None else mapper.tee(flat, prefix)
        routing.deliver(taken, hooks, prefix, tee, 1)
        hooks.log_metrics(tee, 1, prefix)
        data = reader.get_metrics_data()
    finally:
        registry.release()
        provider.shutdown()
    names: set[str] = set()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            names.update(m.name for m in scope.metrics if list(m.data.data_points))
    return names
