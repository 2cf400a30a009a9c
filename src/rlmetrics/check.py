"""``rlmetrics check``: every declared spec linted the way a reviewer of an OTel schema would.

Each rule returns findings that name the plugin (entry point and distribution) and the spec.
``error`` findings make the command fail; ``warning`` findings are advice. A family whose
specification fixes a name that breaks a rule (NeMo Gym's ``_ms`` and ``_total`` names)
declares an :class:`Exemption` through the ``register_check_exemptions`` hook, and the finding
is reported as exempt, with the reason, instead.

Rules:

- ``name``: lower-case dot-separated segments of ``[a-z][a-z0-9_]*`` under a namespace (at least
  two segments); no name may also be the namespace of another (``a.b`` beside ``a.b.c``).
- ``unit``: a UCUM unit: known atoms (``s``, ``ms``, ``By``…), ``1``, ``%``, annotations such as
  ``{token}``, one ``/`` (``{token}/s``); never a word such as ``seconds``, ``bytes`` or
  ``count``.
- ``unit-in-name``: the name does not repeat its unit (``*_ms``, ``*.seconds``, ``*_bytes``,
  ``*.pct``, ``*_per_second``): the exporter appends the unit word itself, so Prometheus would
  show it twice or show a name that disagrees with the unit.
- ``total-suffix``: no OpenTelemetry name ends in ``_total`` or ``.total``: Prometheus adds
  ``_total`` to counters (and on anything else it lies about the type).
- ``histogram-buckets``: a histogram declares its buckets (the SDK default of 0…10000 suits
  neither seconds nor tokens), strictly increasing.
- ``unbounded-attribute``: an open attribute must not look unbounded (ids, steps, paths, urls,
  free text, timestamps) and must not be a resource attribute (the run id, the service): the
  spec's *metric vs span tag vs resource attribute* rule.
- ``duplicate-name``: no two series share a name, case-insensitively or once translated to
  Prometheus (``a.b_c`` and ``a.b.c`` are both ``a_b_c``).
- ``description``: a spec says what it measures (a warning).
- ``reduce``: the spec's reduction across ranks fits its instrument: a counter's or a
  histogram's values add up (``sum`` only); an up-down counter is a total (``sum``, ``min``,
  ``max``, ``last``); ``straggler`` is for a gauge of seconds; a ``weighted_mean`` names a
  declared series that sums across ranks (its weight) other than itself.
- ``load``: a plugin that failed to import declared nothing that can be checked (an error:
  its declarations may be the reason).
- ``rl-proposal``: no series takes a name the proposed RL conventions define
  (semantic-conventions-genai #88: :data:`RL_PROPOSAL_NAMES`), nor
  one under such a name: ``rlmetrics.start(naming="rl_proposal")`` speaks the proposal, and a
  plugin's ``rl.train.loss`` of another meaning would collide with it. The proposal's
  histograms the profile records (``rl.loop.duration``...) are declared by rlmetrics, so
  ``duplicate-name`` and ``name`` hold them; rlmetrics' own names hold the rest of ``rl.*``.
- ``key-map``: every key map offered (``register_key_maps``) maps onto declared series it can
  record into, with declared attributes, and onto known efficiency categories; no two of its
  keys land on one series (or one category).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .configuration import suggest
from .dashboard.promql import prometheus_name, prometheus_unit
from .plugins import FAILED, PluginInfo, Plugins, normalize
from .registry import Declared
from .spec import Kind, MetricSpec, Reduce

if TYPE_CHECKING:
    from .keymaps import KeyMap, KeyRule

__all__ = [
    "ERROR",
    "RULES",
    "WARNING",
    "CheckResult",
    "Exemption",
    "Finding",
    "check_declared",
    "check_key_maps",
    "check_plugins",
    "efficiency_categories",
    "new_series_problems",
]

ERROR, WARNING = "error", "warning"

#: Every rule, with what it checks (``rlmetrics check --json`` lists them).
RULES: Mapping[str, str] = {
    "name": "lower-case dotted name under a namespace; no name is another's namespace",
    "unit": "a UCUM unit, not a word",
    "unit-in-name": "the name does not repeat its unit",
    "total-suffix": "no OpenTelemetry name ends in _total (Prometheus adds it to counters)",
    "histogram-buckets": "histograms declare strictly increasing buckets",
    "unbounded-attribute": "open attributes are bounded and not resource attributes",
    "duplicate-name": "one name, one series (also once translated to Prometheus)",
    "description": "every series says what it measures",
    "reduce": "the reduction across ranks fits the instrument; a weighted mean's weight exists",
    "load": "the plugin imported (a failed one declared nothing checkable)",
    "key-map": "a key map's targets are declared and recordable; no two keys on one series",
    "rl-proposal": "no series takes, or sits under, a name the proposed RL conventions define",
}


def _names(names: Iterable[str]) -> frozenset[str]:
    return frozenset(names)


@attrs.frozen
class Exemption:
    """A deliberate departure from one rule for named series, with the reason.

    :param rule: a key of :data:`RULES`.
    :param metrics: the OpenTelemetry names it covers.
    :param reason: why (cite the specification that fixes the name).
    :param attribute: for ``unbounded-attribute``, the one attribute key it covers.
    """

    rule: str = attrs.field()
    metrics: frozenset[str] = attrs.field(converter=_names)
    reason: str = attrs.field()
    attribute: str | None = None

    @rule.validator
    def _known_rule(self, _attribute: object, value: str) -> None:
        if value not in RULES:
            raise ValueError(f"Exemption: unknown rule {value!r}; choose from {sorted(RULES)}")

    @reason.validator
    def _has_reason(self, _attribute: object, value: str) -> None:
        if not isinstance(value, str) or not value.strip():
            raise ValueError("Exemption: say why (cite the specification that fixes the name)")

    def covers(self, finding: Finding) -> bool:
        return (
            finding.rule == self.rule
            and finding.metric in self.metrics
            and (self.attribute is None or finding.attribute == self.attribute)
        )


@attrs.frozen
class Finding:
    """One problem with one spec (or one plugin, for ``load``)."""

    severity: str
    rule: str
    plugin: str
    metric: str
    message: str
    attribute: str | None = None
    exempt_because: str | None = None

    def line(self) -> str:
        subject = self.metric + (f" [{self.attribute}]" if self.attribute else "")
        text = f"{self.severity}: {self.plugin}: {subject}: {self.rule}: {self.message}"
        return text + (f" (exempt: {self.exempt_because})" if self.exempt_because else "")

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class CheckResult:
    findings: tuple[Finding, ...]
    exempt: tuple[Finding, ...]
    checked: tuple[str, ...]
    key_maps: tuple[str, ...] = ()

    @property
    def errors(self) -> int:
        return sum(1 for f in self.findings if f.severity == ERROR)

    @property
    def warnings(self) -> int:
        return sum(1 for f in self.findings if f.severity == WARNING)

    def as_dict(self) -> dict[str, Any]:
        return {
            "checked": len(self.checked),
            "key_maps": list(self.key_maps),
            "errors": self.errors,
            "warnings": self.warnings,
            "findings": [f.as_dict() for f in self.findings],
            "exempt": [f.as_dict() for f in self.exempt],
            "rules": dict(RULES),
        }


# -- the rules ---------------------------------------------------------------------------------

_SEGMENT = re.compile(r"[a-z][a-z0-9_]*")

# UCUM atoms a metric unit is made of (the ones OpenTelemetry semantic conventions use, with
# their common prefixes); anything else must be an annotation in braces.
_PREFIXES = ("", "k", "M", "G", "T", "m", "u", "n", "Ki", "Mi", "Gi", "Ti")
_BASE_ATOMS = ("s", "By", "bit", "Hz", "W", "J", "V", "A", "g", "m", "Cel", "K")
_ATOMS = frozenset(p + a for p in _PREFIXES for a in _BASE_ATOMS) | {"min", "h", "d", "1", "%"}
_ANNOTATION = re.compile(r"\{[!-z|~]*\}")
_WORDS = {
    "second": "s",
    "seconds": "s",
    "sec": "s",
    "secs": "s",
    "millisecond": "ms",
    "milliseconds": "ms",
    "byte": "By",
    "bytes": "By",
    "count": "1 or {thing}",
    "percent": "%",
    "ratio": "1",
    "fraction": "1",
    "tokens": "{token}",
    "token": "{token}",
    "requests": "{request}",
    "items": "{item}",
}

# A name's last segment that spells a unit (after an underscore, or as the whole segment).
_UNIT_TOKENS = (
    "seconds",
    "second",
    "secs",
    "sec",
    "s",
    "ms",
    "millis",
    "milliseconds",
    "us",
    "ns",
    "bytes",
    "by",
    "mb",
    "gb",
    "kb",
    "pct",
    "percent",
    "per_second",
    "per_sec",
)

# Open attribute keys that carry per-event values. Matched on the key's last dotted segment.
_UNBOUNDED = re.compile(
    r"(^|_)(id|ids|uuid|guid|step|steps|iteration|iter|epoch|index|idx|path|file|filename|"
    r"dir|url|uri|query|prompt|text|message|msg|error_message|detail|details|timestamp|"
    r"time|ts|token_ids|sequence|seed|pid|tid|trace|span)$"
)
#: Resource attributes: stable for the whole run, so never a metric attribute.
RESOURCE_ATTRIBUTES = frozenset(
    {
        "service.name",
        "service.instance.id",
        "service.version",
        "service.namespace",
        "rlmetrics.run.id",
        "nemo.run.id",
        "rl.run.id",
        "rl.algorithm",
        "rl.model",
        "process.pid",
        "process.runtime.name",
        "host.id",
        "telemetry.sdk.version",
    }
)


def _name_findings(item: Declared, names: Iterable[str]) -> list[tuple[str, str, str | None]]:
    name = item.spec.name
    out: list[tuple[str, str, str | None]] = []
    segments = name.split(".")
    if len(segments) < 2:
        out.append((ERROR, f"{name!r} has no namespace: name it <namespace>.<name>", None))
    bad = [s for s in segments if not _SEGMENT.fullmatch(s)]
    if bad:
        out.append(
            (ERROR, f"segments {bad} are not lower-case [a-z][a-z0-9_]* (dots separate them)", None)
        )
    for other in names:
        if other.startswith(name + "."):
            out.append((ERROR, f"{name!r} is also the namespace of {other!r}", None))
            break
    return out


#: The metric names the proposed RL conventions define (semantic-conventions-genai #88) beyond
#: the five duration histograms ``naming="rl_proposal"`` declares: reserved, so no plugin
#: takes one (or sits under one) with another meaning.
RL_PROPOSAL_NAMES: frozenset[str] = frozenset(
    {
        "rl.step.duration",
        "rl.sample.samples",
        "rl.sample.episodes",
        "rl.train.steps",
        "rl.train.tokens",
        "rl.train.loss",
        "rl.train.mfu",
        "rl.tokens.rate",
        "rl.tokens.rate_per_gpu",
        "rl.samples.rate",
        "rl.samples.rate_per_gpu",
        "rl.environment.reward.mean",
        "rl.environment.episode.length.mean",
    }
)


def _proposal_problem(name: str) -> str | None:
    """Why ``name`` collides with the proposed RL conventions, else None."""
    lowered = name.lower()
    for reserved in RL_PROPOSAL_NAMES:
        if lowered == reserved:
            return (
                f"{name!r} is a name the proposed RL conventions define (semantic-conventions-"
                "genai #88), which naming='rl_proposal' speaks: choose another name"
            )
        if lowered.startswith(reserved + "."):
            return (
                f"{name!r} sits under {reserved!r}, a series of the proposed RL conventions "
                "(semantic-conventions-genai #88): a series cannot also be a namespace"
            )
    return None


def _unit_problem(unit: str) -> str | None:
    parts = unit.split("/")
    if len(parts) > 2:
        return f"unit {unit!r} has more than one '/'"
    for part in parts:
        rest = _ANNOTATION.sub("", part)
        if rest in _ATOMS or (rest == "" and part):
            continue
        word = _WORDS.get(rest.lower())
        hint = f" (UCUM writes it {word!r})" if word else ""
        return f"unit {unit!r} is not UCUM: {rest!r} is not a unit atom{hint}"
    return None


def _unit_in_name(item: Declared) -> str | None:
    last = item.spec.name.rsplit(".", 1)[-1].lower()
    for token in _UNIT_TOKENS:
        if last == token or last.endswith("_" + token):
            exposed = prometheus_name(item.spec)
            return (
                f"the name ends in {token!r}, a unit (unit {item.spec.unit!r}); the exporter "
                f"adds {prometheus_unit(item.spec.unit)!r} itself and Prometheus shows "
                f"{exposed!r}: drop it from the name"
            )
    return None


def _total_suffix(item: Declared) -> str | None:
    spec = item.spec
    if spec.kind.monotonic and spec.name.endswith("_total"):
        return "a counter's name ends in _total: that is Prometheus' suffix, which it adds itself"
    if not spec.kind.monotonic and prometheus_name(spec).endswith("_total"):
        return (
            f"a {spec.kind.value} exposed as {prometheus_name(spec)!r}: Prometheus tools read "
            "a _total name as a counter"
        )
    return None


def _attribute_findings(item: Declared) -> list[tuple[str, str, str | None]]:
    out: list[tuple[str, str, str | None]] = []
    for key, allowed in item.spec.attributes:
        if key in RESOURCE_ATTRIBUTES:
            out.append(
                (
                    ERROR,
                    f"{key!r} is stable for the whole run: a resource attribute "
                    "(rlmetrics.start(resource=...)), not a metric attribute",
                    key,
                )
            )
        elif allowed is None and _UNBOUNDED.search(key.rsplit(".", 1)[-1].lower()):
            out.append(
                (
                    ERROR,
                    f"open attribute {key!r} looks unbounded (an id, step, path or free text): "
                    "one series per value. Keep it on a span or a log, or close its values",
                    key,
                )
            )
    return out


#: The reductions each instrument's values can be merged by, with why (the message's reason).
_FITTING: Mapping[Kind, tuple[frozenset[Reduce], str]] = {
    kind: fit
    for kinds, fit in (
        (
            (Kind.COUNTER, Kind.OBSERVABLE_COUNTER),
            (frozenset({Reduce.SUM}), "a counter's increments from every rank add up"),
        ),
        (
            (Kind.HISTOGRAM,),
            (frozenset({Reduce.SUM}), "a histogram's counts and buckets from every rank add up"),
        ),
        (
            (Kind.UP_DOWN_COUNTER, Kind.OBSERVABLE_UP_DOWN_COUNTER),
            (
                frozenset({Reduce.SUM, Reduce.MIN, Reduce.MAX, Reduce.LAST}),
                "an up-down counter is a total: ranks' totals add up, or one of them stands",
            ),
        ),
        (
            (Kind.GAUGE, Kind.OBSERVABLE_GAUGE),
            (frozenset(Reduce), "a gauge takes any reduction"),
        ),
    )
    for kind in kinds
}
_SECONDS = frozenset({"s", "ms", "us", "ns", "min", "h"})


def _reduction_problem(spec: MetricSpec, by_name: Mapping[str, MetricSpec]) -> str | None:
    """Why ``spec``'s reduction across ranks cannot be right, or None."""
    reduction = spec.reduction
    allowed, why = _FITTING[spec.kind]
    if reduction.kind not in allowed:
        choices = ", ".join(sorted(r.value for r in allowed))
        return (
            f"reduce={reduction.describe()} does not fit a {spec.kind.value}: {why}; declare "
            f"reduce= one of {choices} (or make it a gauge)"
        )
    if reduction.kind is Reduce.STRAGGLER and spec.unit not in _SECONDS:
        return (
            f"reduce=straggler is for phase times, and the unit is {spec.unit!r}: declare the "
            "seconds of a phase (unit 's'), or reduce by max"
        )
    if reduction.kind is Reduce.WEIGHTED_MEAN:
        weight = by_name.get(str(reduction.weight))
        if weight is None:
            return (
                f"reduce={reduction.describe()} weighs by a series nobody declared: name a "
                "declared series holding each rank's count (samples, tokens), or reduce by mean"
            )
        if weight.name == spec.name:
            return "a weighted mean cannot weigh by itself: name the series of its counts"
        if weight.reduction.kind is not Reduce.SUM:
            return (
                f"the weight {weight.name!r} reduces by {weight.reduction.describe()}; a weight "
                "is a count that sums across ranks: declare it reduce=SUM"
            )
    return None


def check_declared(
    declared: Sequence[Declared],
    plugin_of: Callable[[Declared], str],
    exemptions: Iterable[Exemption] = (),
    failed: Iterable[PluginInfo] = (),
) -> CheckResult:
    """Lint ``declared``; ``plugin_of`` names the plugin each declaration came from."""
    exemptions = list(exemptions)
    raw: list[Finding] = []
    names = [item.spec.name for item in declared]
    by_name = {item.spec.name: item.spec for item in declared}

    def add(item: Declared, rule: str, severity: str, message: str, attribute: str | None) -> None:
        raw.append(Finding(severity, rule, plugin_of(item), item.spec.name, message, attribute))

    for item in declared:
        spec = item.spec
        for severity, message, attribute in _name_findings(item, names):
            add(item, "name", severity, message, attribute)
        problem = _proposal_problem(spec.name)
        if problem:
            add(item, "rl-proposal", ERROR, problem, None)
        problem = _unit_problem(spec.unit)
        if problem:
            add(item, "unit", ERROR, problem, None)
        problem = _unit_in_name(item)
        if problem:
            add(item, "unit-in-name", ERROR, problem, None)
        problem = _total_suffix(item)
        if problem:
            add(item, "total-suffix", ERROR, problem, None)
        if spec.kind is Kind.HISTOGRAM:
            if not spec.buckets:
                add(
                    item,
                    "histogram-buckets",
                    ERROR,
                    "no buckets: the SDK default (0…10000) "
                    "fits neither seconds nor tokens; declare buckets=[...]",
                    None,
                )
            elif any(a >= b for a, b in itertools.pairwise(spec.buckets)):
                add(item, "histogram-buckets", ERROR, "buckets are not strictly increasing", None)
        for severity, message, attribute in _attribute_findings(item):
            add(item, "unbounded-attribute", severity, message, attribute)
        problem = _reduction_problem(spec, by_name)
        if problem:
            add(item, "reduce", ERROR, problem, None)
        if not spec.description.strip():
            add(item, "description", WARNING, "no description: say what it measures", None)
    for one, two in itertools.combinations(declared, 2):
        a, b = one.spec, two.spec
        if a.name.lower() == b.name.lower():
            message = f"declared twice (also by {plugin_of(two)} in group {two.group!r})"
        elif prometheus_name(a) == prometheus_name(b):
            message = f"{b.name!r} is exposed under the same Prometheus name {prometheus_name(a)!r}"
        else:
            continue
        add(one, "duplicate-name", ERROR, message, None)
    for info in failed:
        raw.append(
            Finding(
                ERROR,
                "load",
                _plugin_label(info),
                "-",
                f"the plugin failed to load, so nothing it declares is checked: {info.summary}",
            )
        )
    findings: list[Finding] = []
    exempt: list[Finding] = []
    for finding in raw:
        waiver = next((e for e in exemptions if e.covers(finding)), None)
        if waiver is None:
            findings.append(finding)
        else:
            exempt.append(attrs.evolve(finding, exempt_because=waiver.reason))
    return CheckResult(tuple(findings), tuple(exempt), tuple(names))


def new_series_problems(spec: MetricSpec, declared: Iterable[MetricSpec]) -> list[str]:
    """The errors this lint would find if ``spec`` were declared beside ``declared``: its name,
    unit, a unit or ``_total`` in its name, a name taken (also once translated to Prometheus)
    or a namespace clash either way. ``rlmetrics check --run`` offers only lines that pass."""
    item = Declared("-", spec, "-")
    others = list(declared)
    names = [other.name for other in others]
    problems = [m for severity, m, _ in _name_findings(item, names) if severity == ERROR]
    problems += [
        p
        for p in (
            _proposal_problem(spec.name),
            _unit_problem(spec.unit),
            _unit_in_name(item),
            _total_suffix(item),
        )
        if p
    ]
    exposed = prometheus_name(spec)
    for other in others:
        if other.name.lower() == spec.name.lower() or prometheus_name(other) == exposed:
            problems.append(f"{other.name!r} is declared (exposed as {prometheus_name(other)!r})")
        elif spec.name.startswith(other.name + "."):
            problems.append(f"{other.name!r} is a series, so it cannot be a namespace")
    return problems


def _plugin_label(info: PluginInfo) -> str:
    return f"{info.distribution or '(in process)'}:{info.name}"


def _owning_plugin(plugins: Plugins) -> Callable[[Declared], str]:
    by_series: dict[str, PluginInfo] = {}
    for info in plugins.infos:
        for series in info.series:
            by_series.setdefault(series, info)

    def plugin_of(item: Declared) -> str:
        info = by_series.get(item.spec.name)
        return _plugin_label(info) if info is not None else f"(module {item.owner})"

    return plugin_of


def check_plugins(
    plugins: Plugins, declared: Sequence[Declared], only: str | None = None
) -> CheckResult:
    """Check what ``plugins`` declared (``declared`` is the registry's list); ``only`` keeps
    the plugins whose entry point or distribution has that name. A registration hook that
    raises meanwhile is an error: what it registers goes unchecked."""
    from .hooks import recording_failures

    with recording_failures() as failures:
        result = _check_plugins(plugins, declared, only)
    labels = {info.name: _plugin_label(info) for info in plugins.infos}
    raised = tuple(
        Finding(
            ERROR,
            "load",
            labels.get(failure.plugin, failure.plugin),
            "-",
            f"hook {failure.hook!r} raised {failure.error}: what it registers is not checked",
        )
        for failure in dict.fromkeys(failures)  # once each, in order
        if only is None or normalize(only) in plugins.names_of(failure.plugin)
    )
    return attrs.evolve(result, findings=result.findings + raised)


def _check_plugins(plugins: Plugins, declared: Sequence[Declared], only: str | None) -> CheckResult:
    exemptions: list[Exemption] = []

    def exempt(exemption: Exemption) -> None:
        # Raised into the offering plugin's hook, whose guard reports it naming the plugin.
        if not isinstance(exemption, Exemption):
            raise TypeError(
                "register_check_exemptions takes rlmetrics.check.Exemption objects, got "
                f"{type(exemption).__name__}"
            )
        exemptions.append(exemption)

    plugins.hooks.register_check_exemptions(exempt)
    plugin_of = _owning_plugin(plugins)
    failed = [info for info in plugins.infos if info.status == FAILED]
    from .keymaps import available_key_maps

    maps = available_key_maps(plugins)
    every = declared
    if only is not None:
        wanted = normalize(only)
        chosen = {
            info.name
            for info in plugins.infos
            if normalize(info.name) == wanted or normalize(info.distribution or "") == wanted
        }
        keep = {s for info in plugins.infos if info.name in chosen for s in info.series}
        declared = [item for item in declared if item.spec.name in keep]
        failed = [info for info in failed if info.name in chosen]
        maps = {name: offer for name, offer in maps.items() if offer[0] in chosen}
    result = check_declared(declared, plugin_of, exemptions, failed)
    labels = {info.name: _plugin_label(info) for info in plugins.infos}
    offered = [(labels.get(owner, owner), key_map) for owner, key_map in maps.values()]
    findings = check_key_maps(offered, every, efficiency_categories(plugins))
    return attrs.evolve(
        result,
        findings=result.findings + tuple(findings),
        key_maps=tuple(sorted(maps)),
    )


# -- key maps ----------------------------------------------------------------------------------


def efficiency_categories(plugins: Plugins) -> frozenset[str]:
    """The categories a key map may name: every phase a plugin offers to ``rlmetrics.phase``
    (``register_phases``; the efficiency family offers each category it exports) and the two
    wall times of a summary."""
    from .hooks import collect_offers
    from .keymaps import EFFICIENCY_TARGETS

    return frozenset(collect_offers("phase", plugins.hooks.register_phases)) | EFFICIENCY_TARGETS


#: The series every efficiency category lands in; a map with categories needs it declared.
_EFFICIENCY_SERIES = "rl.efficiency.seconds"


def _series_problems(rule: KeyRule, item: Declared | None, names: Iterable[str] = ()) -> list[str]:
    if item is None:
        meant = suggest(rule.series or "", names, cutoff=0.8)
        return [f"maps to {rule.series!r}, which no loaded plugin declares{meant}"]
    spec = item.spec
    if spec.kind.observable:
        return [
            f"maps to {spec.name!r}, an observable {spec.kind.value}: its callback reports "
            "it, nothing can be recorded into it"
        ]
    allowed = dict(spec.attributes)
    problems = []
    for key, value in rule.attributes:
        if key not in allowed:
            problems.append(f"attribute {key!r} is not declared on {spec.name!r}")
        elif allowed[key] is not None and value not in (allowed[key] or ()):
            problems.append(f"{spec.name!r} does not allow {key}={value!r}")
    if rule.attribute is not None:
        if rule.attribute not in allowed:
            problems.append(
                f"the part '*' matches becomes attribute {rule.attribute!r}, which "
                f"{spec.name!r} does not declare"
            )
        elif allowed[rule.attribute] is not None:
            problems.append(
                f"{spec.name!r} closes {rule.attribute!r} to "
                f"{sorted(allowed[rule.attribute] or ())}: a key whose '*' part is another "
                "name would be dropped"
            )
    return problems


def check_key_maps(
    offered: Iterable[tuple[str, KeyMap]],
    declared: Sequence[Declared],
    categories: Collection[str],
) -> list[Finding]:
    """Lint key maps (``(offering plugin, map)`` pairs) against the declared series and the
    known efficiency ``categories``: every target exists and can take the map's points, and
    no two keys of a map land on one series (with the same attributes) or one category."""
    by_name = {item.spec.name: item for item in declared}
    findings: list[Finding] = []
    for plugin, key_map in offered:
        subject = f"keymap:{key_map.name}"
        taken: dict[tuple[Any, ...], str] = {}

        def add(rule: KeyRule, message: str) -> None:
            findings.append(Finding(ERROR, "key-map", plugin, subject, message, rule.key))  # noqa: B023

        for rule in key_map.rules:
            if rule.series is not None:
                for problem in _series_problems(rule, by_name.get(rule.series), by_name):
                    add(rule, problem)
                target: tuple[Any, ...] = ("series", rule.series, rule.attributes, rule.attribute)
            elif rule.category is not None:
                if rule.category not in categories:
                    add(
                        rule,
                        f"category {rule.category!r} is no phase a plugin offers (the "
                        "efficiency family offers the categories it exports: "
                        f"{sorted(categories)})",
                    )
                elif _EFFICIENCY_SERIES not in by_name:
                    add(
                        rule,
                        f"maps to a category, but no loaded plugin declares {_EFFICIENCY_SERIES!r}",
                    )
                target = ("category", rule.category)
            else:
                continue
            if target in taken:
                add(
                    rule,
                    f"{rule.target()!r} is also the target of key {taken[target]!r}: "
                    "one series, one key",
                )
            else:
                taken[target] = rule.key
    return findings
