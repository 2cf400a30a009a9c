"""What an alert rule is made of, and what a rule builder is given to write one.

A family offers rules through the ``register_alert_rules`` hook, as it offers dashboard rows:
``register(build)``, where ``build(context)`` returns its :class:`AlertRule` objects. The
context carries the Prometheus name of every declared series (:class:`~rlmetrics.dashboard.
promql.Names`: a rule never spells a declared series' Prometheus name by hand), the thresholds
the user may tune (:meth:`AlertContext.threshold`) and the ``for:`` override that lets a test or
a demo run an alert in seconds.

Each rule carries examples: series and the alerts they must (or must not) raise, which
``rlmetrics alerts --tests`` turns into a ``promtool test rules`` file, so every rule, a
plugin's included, is tested firing and not firing by Prometheus' own rule engine.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from ..dashboard.promql import RUN_ENDED, RUN_ID_LABEL, Names

__all__ = [
    "SCOPE_LABELS",
    "SEVERITIES",
    "AlertContext",
    "AlertExample",
    "AlertRule",
    "AlertSettings",
    "RuleBuilder",
    "Threshold",
    "counted",
    "duration",
    "parse_seconds",
    "threshold_problem",
    "while_running",
    "with_run_id",
]

#: The labels the Prometheus exporter gives every series of a meter's scope.
SCOPE_LABELS = ("otel_scope_name", "otel_scope_version", "otel_scope_schema_url")

#: The ``severity`` label values a rule may carry: ``page`` wakes someone up, ``warning``
#: waits for working hours.
SEVERITIES = frozenset({"page", "warning"})

_ALERT_NAME = re.compile(r"[A-Z][A-Za-z0-9]*")
_THRESHOLD_NAME = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")


def duration(seconds: float) -> str:
    """``seconds`` as a Prometheus duration (``90`` → ``"90s"``, ``600`` → ``"10m"``)."""
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"a duration must be a non-negative number of seconds, got {seconds}")
    millis = round(seconds * 1000)
    if millis == 0:
        return "0s"
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if millis % size == 0:
            return f"{millis // size}{unit}"
    return f"{millis}ms"


_DURATION = re.compile(r"(?P<number>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h|d)?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_seconds(text: str) -> float:
    """A duration (``"90s"``, ``"2m"``, ``"500ms"``, ``"7d"``, or a number of seconds) as
    seconds; the inverse of :func:`duration`. Anything else raises ``ValueError``."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration (such as 30s, 5m, 1h, 7d)")
    return float(match["number"]) * _UNIT_SECONDS[match["unit"]]


def counted(counter: str, window: str = "5m") -> str:
    """Whether ``counter`` (a selector of a counter's samples) counted anything within
    ``window``, including a series that first appeared within it: a counter rlmetrics records
    when something happens starts at its first count, which ``increase`` alone never sees."""
    return f"(increase({counter}[{window}]) > 0 or ({counter} unless {counter} offset {window}))"


#: The targets whose run ended cleanly: each served ``rlmetrics_run_ended`` 1 to a last scrape
#: before its endpoint went (a range selector skips the staleness markers that followed); a run
#: started again on the same port serves 0 again, and is no longer one of them.
ENDED_RUNS = f"last_over_time({RUN_ENDED}[1h]) == 1"


def while_running(vector: str) -> str:
    """``vector`` without the targets whose run ended cleanly (:data:`ENDED_RUNS`). A rule
    over a window of a counter or a histogram (``increase(...[5m])``) still sees a run for
    the whole window after its end, and fired about a run that was over (without its run id
    once ``target_info`` went stale); an ended run's alerts resolve at its end instead."""
    return f"({vector}) unless on(job, instance) ({ENDED_RUNS})"


def with_run_id(vector: str) -> str:
    """``vector`` with the ``rlmetrics_run_id`` label of the process that exported it (a
    resource attribute, which the exporter publishes on ``target_info`` only), so an alert
    names the run it is about and Alertmanager groups a run's alerts together.

    A target without ``target_info`` (an exporter told not to publish it) keeps its alert,
    without a run id: a missing label must never silence a page.

    The labels of the meter's scope the exporter puts on every series (``otel_scope_name``,
    ``otel_scope_version``) are left out: they say nothing to the person paged, and with the
    version in its labels an alert would resolve and fire anew across an rlmetrics upgrade."""
    vector = f"max without ({', '.join(SCOPE_LABELS)}) ({vector})"
    named = (
        f"({vector}) * on(job, instance) group_left({RUN_ID_LABEL}) "
        f"max by (job, instance, {RUN_ID_LABEL}) (target_info)"
    )
    return f"{named} or on(job, instance) ({vector})"


def _pairs(items: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    return tuple(items)


def _labels(items: Iterable[Mapping[str, str]]) -> tuple[Mapping[str, str], ...]:
    return tuple(dict(item) for item in items)


def _strings(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


def _examples(items: Iterable[AlertExample]) -> tuple[AlertExample, ...]:
    return tuple(items)


@attrs.frozen
class AlertExample:
    """Series, and the alerts a rule raises from them (none: it must stay quiet).

    :param series: ``(series selector, promtool values)`` pairs, such as
        ``('rl_step_number{job="run",instance="a"}', "0+1x10")``; one sample per ``interval_s``
        from time 0 (Unix time 0: ``time()`` in a rule is seconds since then).
    :param at_s: when the rule is evaluated.
    :param alerts: the labels of each alert expected at ``at_s`` (the rule's own ``severity``
        is added); empty for an example that must not fire.
    """

    title: str
    series: tuple[tuple[str, str], ...] = attrs.field(converter=_pairs)
    at_s: float
    alerts: tuple[Mapping[str, str], ...] = attrs.field(default=(), converter=_labels)
    interval_s: float = 60.0


@attrs.frozen
class AlertRule:
    """One Prometheus alerting rule.

    :param name: the alert's name, CamelCase (``RLStepStalled``).
    :param expr: the PromQL that fires it, built from :class:`Names`.
    :param summary: one line for the notification (Prometheus templates allowed:
        ``{{ $labels.instance }}``, ``{{ $value }}``).
    :param runbook: one line: what to do (the operations page has the longer version).
    :param for_s: how long ``expr`` must hold before the alert fires (it is *pending* until).
    :param reads: the OpenTelemetry names of the declared series ``expr`` reads (checked
        against the registry; a rule on another system's series, such as vLLM's own, reads
        none of ours).
    :param examples: at least one that fires and one that does not.
    :param group: the rule group, one per distribution (``rlmetrics``, ``rlmetrics-vllm``).
    """

    name: str = attrs.field()
    expr: str
    summary: str
    runbook: str
    for_s: float = attrs.field()
    severity: str = attrs.field(default="warning")
    description: str = ""
    reads: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    examples: tuple[AlertExample, ...] = attrs.field(default=(), converter=_examples)
    group: str = "rlmetrics"

    @name.validator
    def _check_name(self, _attribute: object, value: str) -> None:
        if not isinstance(value, str) or not _ALERT_NAME.fullmatch(value):
            raise ValueError(f"alert name {value!r}: use CamelCase ([A-Z][A-Za-z0-9]*)")

    @for_s.validator
    def _check_for(self, _attribute: object, value: float) -> None:
        duration(value)

    @severity.validator
    def _check_severity(self, _attribute: object, value: str) -> None:
        if value not in SEVERITIES:
            raise ValueError(f"alert {self.name}: severity {value!r} not in {sorted(SEVERITIES)}")


@attrs.frozen
class Threshold:
    """A number a rule builder asked for: its default, what it means, and the value used."""

    name: str
    default: float
    description: str
    value: float


def threshold_problem(name: str, value: float) -> str | None:
    """Why ``value`` cannot be threshold ``name``'s, or None. Every threshold is a share, a
    factor, a count or seconds: a finite number, 0 or more (a negative factor fires on every
    run); a share (a name ending in ``share``) is a fraction of 1 (90 for 90% never fires)."""
    if not (math.isfinite(value) and value >= 0):
        return f"{name}={value:g}: a threshold is a finite number, 0 or more"
    if name.endswith("share") and value > 1:
        return f"{name}={value:g}: a share is a fraction of 1 ({value / 100:g} for {value:g}%)"
    return None


def _check_thresholds(
    _settings: AlertSettings, _attribute: attrs.Attribute[Any], thresholds: Mapping[str, float]
) -> None:
    for name, value in thresholds.items():
        problem = threshold_problem(name, float(value))
        if problem is not None:
            raise ValueError(problem)


@attrs.frozen
class AlertSettings:
    """What the user tuned: thresholds by name (``--set stall.factor=5``) and a ``for:`` that
    replaces every rule's own (``--for 5s``, for tests and demos). A value out of its range
    (:func:`threshold_problem`) raises ``ValueError``: a rule built from it would never fire,
    or always."""

    thresholds: Mapping[str, float] = attrs.field(factory=dict, validator=_check_thresholds)
    for_s: float | None = None


class AlertContext:
    """What a rule builder is given: the declared series' Prometheus names, the thresholds."""

    def __init__(self, names: Names, settings: AlertSettings | None = None) -> None:
        self.names = names
        self.settings = settings or AlertSettings()
        #: Every threshold a builder asked for, by name (``rlmetrics alerts --list``).
        self.thresholds: dict[str, Threshold] = {}

    def threshold(self, name: str, default: float, description: str) -> float:
        """The value of threshold ``name`` (dotted, lower-case: ``host_memory.share``): the
        user's setting, else ``default``."""
        if not _THRESHOLD_NAME.fullmatch(name):
            raise ValueError(f"threshold {name!r}: use dotted lower-case names (stall.factor)")
        value = float(self.settings.thresholds.get(name, default))
        self.thresholds[name] = Threshold(name, float(default), description, value)
        return value

    def for_(self, seconds: float) -> float:
        """A rule's ``for:``: ``seconds``, unless the settings replace every rule's."""
        return seconds if self.settings.for_s is None else self.settings.for_s


#: What a plugin registers: its rules, from the context.
RuleBuilder = Callable[[AlertContext], "Iterable[AlertRule] | None"]
