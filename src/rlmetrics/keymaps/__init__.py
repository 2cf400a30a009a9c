"""Key maps: which key a trainer logs is which declared series.

Every trainer names the same quantities its own way (TRL logs ``kl``, verl ``actor/kl_loss``,
NeMo-RL ``kl_penalty``). A :class:`KeyMap` says, as data, what each of a trainer's keys is:

- a declared series (``KeyRule("kl", series="rl.kl.divergence")``), recorded as it is logged;
  a pattern with one ``*`` fills an attribute of the series with the part it matched
  (``KeyRule("rewards/*/mean", series=..., attribute="rl.reward.component")``), bounded as a
  family bounds names that come from logged keys: the first ``max_series - 1`` names a
  telemetry session meets stand for themselves, later ones are recorded as ``other``;
- an efficiency category, for timing keys (``KeyRule("timing_s/update_weights",
  category="idle/refit_bubble")``), or the step's wall time (:data:`STEP_WALL_TIME`): they
  reach ``on_efficiency_summary`` as if the loop had logged ``efficiency/<category>_s``;
- nothing (``KeyRule("epoch")``): the key reaches the backends only, and never the tee
  under another meaning (OpenRLHF's ``reward`` is not NeMo-RL's).

``Logger(key_map="trl")`` applies one to the dicts logged under the train prefixes (``train``
and ``""``, the ones the training scalars are read from): every backend still gets the
trainer's keys unchanged; the plugins' ``log_metrics`` gets the dict without the keys the map
lists, so no family reads them a second time; keys the map does not list reach it as they are.

Maps are offered through the ``register_key_maps`` hook, like backends and exporters, so a
downstream project ships the map of its own trainer in its own distribution; the core's maps
(TRL, verl, OpenRLHF) are in :mod:`rlmetrics.keymaps.builtin`. ``rlmetrics check`` lints every
map offered (its targets are declared, no two keys land on one series) and ``rlmetrics docs``
writes a map's key table into a page.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .._warn import describe_value, warn_once
from ..configuration import suggest
from ..events import EFFICIENCY_PREFIX, TRAIN_PREFIXES
from ..hooks import collect_offers
from ..keyplans import KeyPlans
from ..registry import default_registry, is_exporting, record, record_points
from ..telemetry import current
from ..values import (
    AttributeSet,
    BoundedValues,
    as_number,
    as_real,
    encodable,
    key_attribute,
)

if TYPE_CHECKING:
    from ..plugins import Plugins
    from ..registry import Declared

__all__ = [
    "EFFICIENCY_TARGETS",
    "PREFIXES",
    "REST",
    "RUN_WALL_TIME",
    "STEP_WALL_TIME",
    "WILDCARD",
    "KeyMap",
    "KeyMapper",
    "KeyRule",
    "available_key_maps",
    "efficiency_key",
    "resolve_key_map",
]

#: No session's declarations read yet (a KeyMapper made before telemetry starts).
_NOT_READ = object()

#: The one wildcard of a pattern key; it matches one path segment (no ``/``).
WILDCARD = "*"
#: A key ending in ``/**`` matches any rest of one segment or more (verl's validation keys
#: hold a data source with a ``/`` of its own): for a rule that keeps keys to the backends.
REST = "/**"
#: Category targets that are not categories: the step's wall time (the efficiency summary's
#: denominator) and the run's elapsed time, as the ``efficiency/*_s`` dict names them.
STEP_WALL_TIME = "step_wall_time"
RUN_WALL_TIME = "total_wall_time"
EFFICIENCY_TARGETS = frozenset({STEP_WALL_TIME, RUN_WALL_TIME})
#: The prefixes whose dicts a key map reads: the train dicts, as the training scalars are.
PREFIXES = frozenset(TRAIN_PREFIXES)


def efficiency_key(category: str) -> str:
    """The ``efficiency/<category>_s`` key a category target becomes for the tee."""
    return f"{EFFICIENCY_PREFIX}{category}_s"


def _attribute_pairs(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if isinstance(value, Mapping):
        value = value.items()
    return tuple(sorted((k, v) for k, v in value))


def _is_text(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"KeyRule.{attribute.name} must be a non-empty string, got {value!r}")


def _key_tuple(keys: Iterable[str]) -> tuple[str, ...]:
    return (keys,) if isinstance(keys, str) else tuple(keys)


@attrs.frozen
class KeyRule:
    """What one logged key is: a declared ``series``, an efficiency ``category``, or neither
    (the key reaches the backends only).

    :param key: the key as the trainer logs it (after flattening with ``/``), or a pattern
        with one ``*`` standing for one path segment (``rewards/*/mean``); a rule that keeps
        keys to the backends may end in ``/**``, any rest (``val-core/**``).
    :param series: the name of the declared series the key's value is recorded into.
    :param category: an efficiency category (``idle/refit_bubble``), or
        :data:`STEP_WALL_TIME` / :data:`RUN_WALL_TIME`; exact keys only.
    :param attribute: for a pattern mapped to a series, the series attribute that the part
        ``*`` matched becomes (its value set is the series' to bound).
    :param attributes: fixed attributes of every point the rule records.
    :param note: a word for the docs table (what the key holds, why it maps where it does).
    :param backends_beside: exact keys another trainer logs beside this key when this key
        means something else there: in a dict holding any of them, the key reaches the
        backends only (TRL's RewardTrainer logs ``loss``, a reward model's, beside its
        ``margin``; a policy trainer's ``loss`` is the policy loss).
    """

    key: str = attrs.field(validator=_is_text)
    series: str | None = attrs.field(default=None, validator=_is_text)
    category: str | None = attrs.field(default=None, validator=_is_text)
    attribute: str | None = attrs.field(default=None, validator=_is_text)
    attributes: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_attribute_pairs)
    note: str = ""
    backends_beside: tuple[str, ...] = attrs.field(default=(), converter=_key_tuple)

    def __attrs_post_init__(self) -> None:
        where = f"KeyRule({self.key!r})"
        if self.backends_beside and (
            (self.series is None and self.category is None)
            or not all(isinstance(k, str) and k and WILDCARD not in k for k in self.backends_beside)
        ):
            raise ValueError(
                f"{where}: backends_beside= names exact keys (no {WILDCARD!r}) beside which a "
                "key mapped to a series or a category reaches the backends only"
            )
        rest = self.key.endswith(REST)
        stem = self.key[: -len(REST)] if rest else self.key
        if "**" in stem:
            raise ValueError(f"{where}: '**' (any rest of the key) goes at the end, after a '/'")
        if rest and (self.series is not None or self.category is not None):
            raise ValueError(
                f"{where}: a key ending in {REST!r} matches keys of any depth, for a rule that "
                "keeps them to the backends only; map each key to a series on its own"
            )
        wildcards = stem.count(WILDCARD)
        if wildcards > 1:
            raise ValueError(f"{where}: a pattern has one {WILDCARD!r}, not {wildcards}")
        if self.series is not None and self.category is not None:
            raise ValueError(f"{where}: a key is a series or a category, not both")
        if self.category is not None and (wildcards or self.attributes):
            raise ValueError(
                f"{where}: a category target takes one exact key and no attributes (the "
                "efficiency family sets a category's attributes)"
            )
        if self.series is not None and wildcards and self.attribute is None:
            raise ValueError(
                f"{where}: a pattern mapped to {self.series!r} needs attribute= (the series "
                "attribute the matched part becomes); otherwise every key it matches would "
                "write the same series"
            )
        if self.attribute is not None and not (self.series is not None and wildcards):
            raise ValueError(f"{where}: attribute= is for a pattern mapped to a series")
        if self.series is None and self.attributes:
            raise ValueError(f"{where}: attributes= needs a series")
        for key, value in self.attributes:
            if not isinstance(key, str) or not isinstance(value, str) or not key:
                raise ValueError(f"{where}: attributes must map strings to strings")

    @property
    def pattern(self) -> bool:
        return WILDCARD in self.key

    def point_attributes(self, matched: str | None) -> AttributeSet:
        """The attribute set of the point a key matched by this rule records."""
        out = dict(self.attributes)
        if self.attribute is not None and matched is not None:
            out[self.attribute] = matched
        return frozenset(out.items())

    def target(self) -> str:
        """What the key becomes, in words (for the docs and the lint)."""
        if self.series is not None:
            return self.series
        if self.category is not None:
            return f"efficiency category {self.category}"
        return "the backends only"


def _rules(value: Iterable[KeyRule]) -> tuple[KeyRule, ...]:
    return tuple(value)


def _pattern_regex(key: str) -> re.Pattern[str]:
    rest = key.endswith(REST)
    before, star, after = (key[: -len(REST)] if rest else key).partition(WILDCARD)
    body = re.escape(before) + ("([^/]+)" if star else "") + re.escape(after)
    return re.compile(body + ("/.+" if rest else ""), re.DOTALL)


@attrs.frozen
class KeyMap:
    """The key map of one trainer: a name (``Logger(key_map=name)``), its rules, and a title
    for the docs (``"TRL 1.16 GRPOTrainer"``).

    An exact key wins over a pattern; patterns are tried in order. A key listed twice is a
    mistake and raises here.
    """

    name: str = attrs.field()
    rules: tuple[KeyRule, ...] = attrs.field(converter=_rules)
    title: str = ""
    _exact: dict[str, KeyRule] = attrs.field(init=False, eq=False, repr=False)
    _patterns: tuple[tuple[re.Pattern[str], KeyRule], ...] = attrs.field(
        init=False, eq=False, repr=False
    )

    @name.validator
    def _named(self, _attribute: object, value: Any) -> None:
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"KeyMap: name must be a non-empty string, got {value!r}")

    @rules.validator
    def _known_rules(self, _attribute: object, value: tuple[Any, ...]) -> None:
        seen: set[str] = set()
        for rule in value:
            if not isinstance(rule, KeyRule):
                raise ValueError(f"KeyMap {self.name!r}: expected KeyRule, got {rule!r}")
            if rule.key in seen:
                raise ValueError(f"KeyMap {self.name!r}: key {rule.key!r} is listed twice")
            seen.add(rule.key)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_exact", {r.key: r for r in self.rules if not r.pattern})
        patterns = tuple((_pattern_regex(r.key), r) for r in self.rules if r.pattern)
        object.__setattr__(self, "_patterns", patterns)

    def rule_for(self, key: str) -> tuple[KeyRule, str | None] | None:
        """The rule for logged ``key`` and the part its ``*`` matched, or None."""
        rule = self._exact.get(key)
        if rule is not None:
            return rule, None
        for regex, rule in self._patterns:
            match = regex.fullmatch(key)
            if match is not None:
                return rule, match.group(1) if regex.groups else None
        return None


# -- which maps exist -------------------------------------------------------------------------


def available_key_maps(plugins: Plugins | None = None) -> dict[str, tuple[str, KeyMap]]:
    """``{name: (offering plugin, map)}`` from every plugin's ``register_key_maps``."""
    from ..plugins import get_plugins

    plugins = plugins or get_plugins()
    hooks = plugins.hooks

    def offer(register: Callable[[str, KeyMap], None]) -> None:
        def register_map(key_map: KeyMap) -> None:
            if not isinstance(key_map, KeyMap):
                raise TypeError(f"register_key_maps takes a KeyMap, got {type(key_map).__name__}")
            register(key_map.name, key_map)

        hooks.register_key_maps(register_map)

    return collect_offers("key map", offer, plugins)


def resolve_key_map(key_map: str | KeyMap) -> KeyMap:
    """The map ``key_map`` names (or is); an unknown name raises ``ValueError``."""
    if isinstance(key_map, KeyMap):
        return key_map
    if not isinstance(key_map, str):
        raise TypeError(f"key_map must be a KeyMap or a name, got {type(key_map).__name__}")
    offered = available_key_maps()
    if key_map not in offered:
        meant = suggest(key_map.lower(), offered)
        raise ValueError(
            f"unknown key map {key_map!r}{meant}; available: {sorted(offered)}. A key map comes "
            "from a plugin's register_key_maps hook (the core offers trl, verl and openrlhf)"
        )
    return offered[key_map][1]


# -- applying one ------------------------------------------------------------------------------


@attrs.frozen
class _Plan:
    """What a map does to a dict with one sequence of keys."""

    series: tuple[tuple[str, KeyRule, str | None], ...]  # (logged key, rule, matched part)
    categories: tuple[tuple[str, str], ...]  # (logged key, efficiency/<category>_s)
    listed: frozenset[str]  # every key the map lists: the tee never gets it as it is
    kept: tuple[str, ...]  # the others, which the tee gets as they are


class KeyMapper:
    """One :class:`KeyMap` applied to a Logger's dicts.

    A trainer logs the same keys in the same order every step, so what the map does to a
    dict is worked out once per key sequence; a step then costs a lookup, its series'
    records and one dict without the listed keys.
    """

    def __init__(self, key_map: KeyMap) -> None:
        self.key_map = key_map
        self._plans = KeyPlans(self._plan)
        self._declared_for: object = _NOT_READ  # read on first use, telemetry or not
        self._declared: dict[str, Declared] = {}
        self._bounded: dict[KeyRule, BoundedValues] = {}
        # Each labelled point's attribute set, prepared once: per rule, its matched names
        # (the admitted ones only, so memory stays flat) and ``other``.
        self._attribute_sets: dict[tuple[KeyRule, str | None], AttributeSet | None] = {}

    def tee(self, flat: dict[str, Any], prefix: str) -> dict[str, Any]:
        """What the plugins get of ``flat``, a dict every backend got as it is: the mapped
        series recorded (while exporting), each category key as ``efficiency/<category>_s``,
        the listed keys left out. Never raises."""
        if prefix not in PREFIXES:
            return flat
        try:
            plan = self._plans(tuple(flat))
            if not plan.listed:
                return flat
            if plan.series and is_exporting():
                self._record(plan, flat)
            tee = {k: flat[k] for k in plan.kept}
            for key, efficiency in plan.categories:
                tee[efficiency] = flat[key]
            return tee
        except Exception:
            warn_once(
                f"keymap:{self.key_map.name}",
                f"rlmetrics: applying key map {self.key_map.name!r} failed; the dict reaches "
                "the plugins as it was logged",
            )
            return flat

    def _plan(self, keys: tuple[str, ...]) -> _Plan:
        series: list[tuple[str, KeyRule, str | None]] = []
        categories: list[tuple[str, str]] = []
        listed: set[str] = set()
        present = frozenset(keys)
        for key in keys:
            found = self.key_map.rule_for(key)
            if found is None:
                continue
            rule, matched = found
            listed.add(key)
            if not present.isdisjoint(rule.backends_beside):
                continue  # another trainer's key of that name: the backends only
            if rule.series is not None:
                series.append((key, rule, matched))
            elif rule.category is not None:
                categories.append((key, efficiency_key(rule.category)))
        kept = tuple(k for k in keys if k not in listed)
        return _Plan(tuple(series), tuple(categories), frozenset(listed), kept)

    def _targets(self) -> dict[str, Declared]:
        """Every declared series by name, read once per telemetry session (declarations are
        frozen while one runs)."""
        handle = current()
        if handle is not self._declared_for:
            self._declared = {d.spec.name: d for d in default_registry().declared()}
            self._bounded = {}  # each session admits its own first names
            self._attribute_sets = {}
            self._declared_for = handle
        return self._declared

    def _attribute_set(
        self, rule: KeyRule, matched: str | None, declared: Declared
    ) -> AttributeSet | None:
        """The attribute set a point of ``rule`` is recorded under; for a pattern into an open
        attribute, the matched part among the first names, ``other`` past them. None if the
        matched part is not a safe attribute value (reported once)."""
        known = self._attribute_sets
        if (rule, matched) in known:
            return known[(rule, matched)]
        label = matched
        if matched is not None and rule.attribute is not None:
            label = key_attribute(matched, f"key map {self.key_map.name!r} {rule.attribute}")
            if label is not None and dict(declared.spec.attributes).get(rule.attribute) is None:
                bounded = self._bounded.get(rule)
                if bounded is None:
                    limit = max(1, declared.spec.max_series - 1)
                    bounded = self._bounded[rule] = BoundedValues(limit)
                label = bounded(label)
        prepared = None if label is None and matched is not None else rule.point_attributes(label)
        if label == matched:  # a name past the cap is not remembered: memory stays flat
            self._attribute_sets[(rule, matched)] = prepared
        return prepared

    def _number(self, key: str, rule: KeyRule, value: Any) -> int | float | None:
        """The number a mapped key's value is, or None, said once per key and cause, naming
        the key the trainer logged: the series' own key (``reward``) is not what the
        trainer's code calls it (``critic/rewards/mean``), and ``record`` skips a None
        unsaid."""
        number = as_number(value)
        if number is not None and encodable(number):
            return number
        if number is not None:
            cause, why = "int64", "an int beyond the int64 range an exporter can encode"
        else:
            real = None if value is None else as_real(value)
            cause = (
                "none"
                if value is None
                else "not-a-number"
                if real is None
                else "nan"
                if real != real
                else "infinite"
            )
            why = f"{'None' if value is None else describe_value(value)} is not a finite number"
        warn_once(
            f"keymap:{self.key_map.name}:{key}:{cause}",
            f"rlmetrics: key map {self.key_map.name!r}: {rule.series} (key {key!r}) dropped a "
            f"value: {why}; the backends keep it",
        )
        return None

    def _record(self, plan: _Plan, flat: Mapping[str, Any]) -> None:
        targets = self._targets()
        unlabelled: dict[str, dict[str, Any]] = {}  # by group: one record call each
        labelled: dict[tuple[str, str], list[tuple[Any, AttributeSet]]] = {}
        for key, rule, matched in plan.series:
            declared = targets.get(rule.series or "")
            value = self._number(key, rule, flat[key])
            if value is None:
                continue
            if declared is None:
                meant = suggest(rule.series or "", targets, cutoff=0.8)
                warn_once(
                    f"keymap:{self.key_map.name}:{rule.series}",
                    f"rlmetrics: key map {self.key_map.name!r} maps {rule.key!r} to "
                    f"{rule.series!r}, which no loaded plugin declares{meant}; the key reaches "
                    "the backends only (rlmetrics check lints the map)",
                )
            elif rule.attribute is None and not rule.attributes:
                unlabelled.setdefault(declared.group, {})[declared.spec.key] = value
            elif (attributes := self._attribute_set(rule, matched, declared)) is not None:
                where = (declared.group, declared.spec.key)
                labelled.setdefault(where, []).append((value, attributes))
        for group, values in unlabelled.items():
            record(group, values)
        for (group, key), points in labelled.items():
            record_points(group, key, points)
