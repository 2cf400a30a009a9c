"""The keys a run logged that reach the trackers only: no declared series reads them, so
OpenTelemetry never sees them (``rlmetrics check --run RUN.jsonl``).

Which keys a family reads cannot be told from the declarations alone (patterns, routes,
plugins' own hooks), so each logged key is tried through the installed plugins themselves:
the key alone, logged under its prefix into a throwaway in-memory session, is teed when it
makes a series export a point that the same prefix logged empty does not. Setup and
rollout-checkpoint dicts are events whose every field belongs to its payload; they are not
tried. Nor is a key a ``backend_only`` declaration matches (``declare_keys(...,
backend_only=True)``: the counters every trainer logs, the ranks' straggler entries, every key
of an ``eval`` or ``test`` dict, a loop's own): it reaches the trackers only on purpose, and
is counted, not listed (:func:`declared_backend_only`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .. import routing
from ..events import TRAIN_PREFIXES
from ..families.training import dataset_metrics
from ..keymaps import PREFIXES as KEY_MAP_PREFIXES
from ..values import as_number
from .select import key_name, step_values

if TYPE_CHECKING:
    from ..keymaps import KeyMap
    from ..registry import Declared

__all__ = [
    "Suggestions",
    "Unexported",
    "declared_backend_only",
    "declaring_line",
    "kept_to_backends",
    "unexported_keys",
]

_NOT_NAME = re.compile(r"[^a-z0-9_]+")
#: A key's last segment (or its ``_<word>`` ending) that names a unit: the series takes the
#: unit and leaves the word out of its name (the exporter adds it back).
_UNIT_WORDS = {
    "s": "s",
    "sec": "s",
    "secs": "s",
    "second": "s",
    "seconds": "s",
    "ms": "ms",
    "millis": "ms",
    "milliseconds": "ms",
    "us": "us",
    "ns": "ns",
    "by": "By",
    "bytes": "By",
    "kb": "kBy",
    "mb": "MBy",
    "gb": "GBy",
    "pct": "%",
    "percent": "%",
    "per_second": "1/s",
    "per_sec": "1/s",
}
#: The numbered names tried when a name is taken, before giving up.
_TRIES = 20
_TRAINING = "rlmetrics.families.training"


@attrs.frozen
class Unexported:
    """One logged key no series reads, and what would tee it."""

    prefix: str
    key: str
    #: The line that would declare a series for it, or what to do when none can.
    remedy: str
    #: The Python line alone (it runs as printed, with ``module``'s names imported), or None.
    line: str | None = None
    module: str | None = None

    @property
    def name(self) -> str:
        return key_name(self.prefix, self.key)

    def as_dict(self) -> dict[str, str | None]:
        return {
            "prefix": self.prefix,
            "key": self.key,
            "remedy": self.remedy,
            "line": self.line,
            "module": self.module,
        }


def _literal(text: str) -> str:
    """``text`` as a Python string literal, in double quotes where it can be."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return repr(text)


def _tails(key: str) -> tuple[list[list[str]], str]:
    """A series name's tails for a logged key (dotted as the key is, then joined by ``_``) and
    its unit: lower case, ``/`` as ``.``, anything else ``_``, a unit word left out."""
    segments = [
        _NOT_NAME.sub("_", part).strip("_") for part in key.lower().replace("/", ".").split(".")
    ]
    segments = [("n" + part if part[0].isdigit() else part) for part in segments if part]
    unit = "1"
    if segments:
        last = segments[-1]
        if last in _UNIT_WORDS:
            unit = _UNIT_WORDS[last]
            segments.pop()
        else:
            for word, symbol in sorted(_UNIT_WORDS.items(), key=lambda item: -len(item[0])):
                if last.endswith("_" + word):
                    unit, segments[-1] = symbol, last[: -len(word) - 1]
                    break
    if segments and (segments[-1] == "total" or segments[-1].endswith("_total")):
        segments[-1] = segments[-1].removesuffix("total").rstrip("_")
        segments = [part for part in segments if part]
    segments = segments or ["value"]
    return [segments, ["_".join(segments)]], unit


class Suggestions:
    """The line to offer for each key: it runs as printed against the declarations the run was
    checked with and those offered before it, and passes ``rlmetrics check``."""

    def __init__(self) -> None:
        from ..registry import default_registry

        declared = default_registry().declared()
        #: Declared series by lower-case name; the names offered here hold None.
        self._declared: dict[str, Declared | None] = {d.spec.name.lower(): d for d in declared}
        self._specs = [d.spec for d in declared]
        #: Declared series by (group, key): a key one reads needs no second declaration.
        self._reading: dict[tuple[str, str], Declared] = {
            (d.group, d.spec.key): d for d in declared
        }
        self._made: dict[tuple[bool, str], tuple[str | None, str | None, str]] = {}

    def __call__(self, prefix: str, key: str) -> Unexported:
        for _dataset, metric, _value in dataset_metrics({key: None}, prefix):
            return self._unexported(prefix, key, *self._offer(metric, dataset=True))
        if prefix in TRAIN_PREFIXES:
            return self._unexported(prefix, key, *self._offer(key, dataset=False))
        remedy = (
            f"no family reads dicts logged under {prefix!r}: log it in the train dict and "
            "declare it with tee_scalar, or read it in a family of your own "
            "(docs/writing-a-plugin.md)"
        )
        return Unexported(prefix, key, remedy)

    @staticmethod
    def _unexported(
        prefix: str, key: str, line: str | None, module: str | None, note: str
    ) -> Unexported:
        remedy = note if line is None else f"{line}  # {module}{note}"
        return Unexported(prefix, key, remedy, line, module)

    def _offer(self, key: str, *, dataset: bool) -> tuple[str | None, str | None, str]:
        made = self._made.get((dataset, key))
        if made is None:
            made = self._made[(dataset, key)] = self._make(key, dataset)
        return made

    def _make(self, key: str, dataset: bool) -> tuple[str | None, str | None, str]:
        from .. import check
        from ..families import training
        from ..spec import OPEN, Kind, MetricSpec

        reading = self._reading.get((training.DATASET_GROUP if dataset else training.GROUP, key))
        if reading is not None:
            # Declared already (it exported nothing when tried because its value or the
            # plugin's state kept it out): a second tee_scalar for the key would conflict.
            return (
                None,
                None,
                f"{key!r} is read by {reading.spec.name} already: check the value logged "
                "under it is a number",
            )
        tails, unit = _tails(key)
        base = "rl.validation." if dataset else "rl."
        taken = self._declared.get((base + ".".join(tails[0])).lower())
        if not dataset and taken is not None and _mappable(taken):
            # The series exists and reads another key (``reward/mean`` is rl.reward.mean, read
            # from ``reward``): a key-map rule records this key into it.
            line = f"KeyRule({_literal(key)}, series={_literal(taken.spec.name)})"
            return (
                line,
                "rlmetrics.keymaps",
                f": {taken.spec.name} reads {taken.spec.key!r}; log the value under that key, or "
                "add this rule to your Logger's key map (Logger(key_map=KeyMap(...)), "
                "docs/integrations.md)",
            )
        call = "tee_dataset_metric" if dataset else "tee_scalar"
        attributes = {training.DATASET_ATTR: OPEN} if dataset else {}
        for tail in tails:
            for number in range(1, _TRIES + 1):
                name = base + ".".join(tail) + (f"_{number}" if number > 1 else "")
                try:
                    spec = MetricSpec(name, Kind.GAUGE, unit=unit, key=key, attributes=attributes)
                except ValueError:
                    break
                if check.new_series_problems(spec, self._specs):
                    continue
                self._specs.append(spec)
                self._declared[name.lower()] = None  # offered here, so taken
                units = "" if unit == "1" else f", unit={_literal(unit)}"
                line = f'{call}({_literal(key)}, {_literal(name)}{units}, description="...")'
                return line, _TRAINING, ""
        return (
            None,
            None,
            (
                f"no series name could be made from {key!r}: declare one with {call}(key, name) "
                "(docs/writing-a-plugin.md)"
            ),
        )


def _mappable(taken: Declared) -> bool:
    """Whether a key-map rule can record into ``taken`` (an unlabelled gauge)."""
    from ..spec import Kind

    return taken.spec.kind is Kind.GAUGE and not taken.spec.attributes


def declaring_line(prefix: str, key: str) -> str:
    """The one line that would tee ``key`` logged under ``prefix`` (a train dict's key: a
    gauge by :func:`rlmetrics.families.training.tee_scalar`), or what to do instead."""
    return Suggestions()(prefix, key).remedy


def _logged(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], Any]:
    """``{(prefix, key): a number logged under it}`` for every key logged at a trainer step."""
    found: dict[tuple[str, str], Any] = {}
    for _step, prefix, key, value in step_values(rows):
        if (prefix, key) not in found and as_number(value) is not None:
            found[(prefix, key)] = value
    return found


def unexported_keys(
    rows: Iterable[Mapping[str, Any]], key_map: str | KeyMap | None = None
) -> tuple[list[Unexported], int]:
    """The keys of ``rows`` that no installed plugin's series reads (with ``key_map``
    applied, as ``Logger(key_map=...)`` would; a key the map keeps to the backends on purpose
    is none of them, nor tried), and how many keys were tried. Call it with telemetry not
    started: it binds the process's registry to an in-memory session for each try."""
    from ..keymaps import KeyMapper, resolve_key_map

    mapper = None if key_map is None else KeyMapper(resolve_key_map(key_map))
    logged = _logged(rows)
    backend_only = _BackendOnly()
    suggest = Suggestions()
    baselines: dict[str, set[str]] = {}
    missing = []
    tried = 0
    for (logged_prefix, logged_key), value in logged.items():
        # {"train/reward": r} logged without a prefix is read as reward under train, as the
        # Logger reads it (rlmetrics.routing.by_prefix); it is tried and offered so.
        prefix, key = (
            routing.carried(logged_key) if not logged_prefix else (logged_prefix, logged_key)
        )
        if mapper is not None and _kept_to_backends(mapper.key_map, prefix, key):
            continue
        if backend_only(prefix, key):
            continue
        tried += 1
        if prefix not in baselines:
            baselines[prefix] = _exported(prefix, {}, mapper)
        if not _exported(prefix, {key: value}, mapper) - baselines[prefix]:
            found = suggest(prefix, key)
            # Named as logged: the row holds train/my_stat, not my_stat.
            missing.append(attrs.evolve(found, prefix=logged_prefix, key=logged_key))
    return missing, tried


class _BackendOnly:
    """Whether a (prefix, key) is one a ``backend_only`` declaration matches, as the
    declarations are now (:func:`rlmetrics.declare_keys`)."""

    def __init__(self) -> None:
        from ..key_patterns import pattern_regex
        from ..registry import default_registry

        self._patterns = [
            (pattern_regex(p.prefix), pattern_regex(p.key))
            for p in default_registry().key_patterns()
            if p.backend_only
        ]

    def __call__(self, prefix: str, key: str) -> bool:
        return any(p.fullmatch(prefix) and k.fullmatch(key) for p, k in self._patterns)


def declared_backend_only(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The keys of ``rows`` declared as reaching the trackers only (``declare_keys(...,
    backend_only=True)``), named as a report names them; :func:`unexported_keys` leaves them
    out."""
    matches = _BackendOnly()
    return [
        key_name(prefix, key)
        for prefix, key in _logged(rows)
        if matches(*(routing.carried(key) if not prefix else (prefix, key)))
    ]


def _kept_to_backends(key_map: KeyMap, prefix: str, key: str) -> bool:
    found = key_map.rule_for(key) if prefix in KEY_MAP_PREFIXES else None
    return found is not None and found[0].series is None and found[0].category is None


def kept_to_backends(rows: Iterable[Mapping[str, Any]], key_map: str | KeyMap) -> list[str]:
    """The keys of ``rows`` that ``key_map`` lists as reaching the backends only."""
    from ..keymaps import resolve_key_map

    resolved = resolve_key_map(key_map)
    return [
        key_name(prefix, key)
        for prefix, key in _logged(rows)
        if _kept_to_backends(resolved, *(routing.carried(key) if not prefix else (prefix, key)))
    ]


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
    session = registry.bind(provider.get_meter("rlmetrics.check"))
    try:
        flat = dict(metrics)
        taken = routing.take(prefix, flat, hooks.wanted)
        tee = flat if mapper is None else mapper.tee(flat, prefix)
        routing.deliver(taken, hooks, prefix, tee, 1)
        hooks.log_metrics(tee, 1, prefix)
        data = reader.get_metrics_data()
        # Gauges are no SDK instrument: their points are the session's tables.
        names = {spec.name for spec, points in session.gauge_points() if points}
    finally:
        registry.release()
        provider.shutdown()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            names.update(m.name for m in scope.metrics if list(m.data.data_points))
    return names
