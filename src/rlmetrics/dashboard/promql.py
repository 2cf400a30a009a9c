"""Prometheus names of declared series, and the PromQL pieces every panel shares.

The OpenTelemetry Prometheus exporter renames what it exposes: dots become underscores, the
unit is appended as a word (``s`` → ``_seconds``, ``ms`` → ``_milliseconds``, ``By`` →
``_bytes``, ``%`` → ``_percent``, ``{token}/s`` → ``_per_second``; an annotation such as
``{token}`` and the unit ``1`` add nothing) unless the name already ends with it, and a counter's
samples end in ``_total``. A name ending in its unit's abbreviation (``gym.rollout.duration_ms``,
unit ``ms``) is exposed by rlmetrics' Prometheus exporter with the word in its place
(``gym_rollout_duration_milliseconds``), not with both. A panel that spelled names by hand
would break silently when a spec's unit changes; :class:`Names` derives them from the
declared specs instead, and a test checks the translation against the exporter itself for
every declared unit.

Resource attributes (the run id) are not labels of each series: the exporter puts them on
``target_info``. :func:`for_run` joins a vector with it on ``job`` and ``instance``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ..spec import Kind, MetricSpec

__all__ = [
    "RUN_ENDED",
    "RUN_ID_LABEL",
    "Names",
    "for_run",
    "prometheus_label",
    "prometheus_name",
    "prometheus_unit",
    "sample_names",
    "unit_named",
]

#: The label ``target_info`` carries the resource attribute ``rlmetrics.run.id`` under.
RUN_ID_LABEL = "rlmetrics_run_id"
#: The series the Prometheus endpoint serves beside the run's: 0 while the run goes, 1 once
#: it ended cleanly (its telemetry shut down), served to one last scrape before the endpoint
#: goes, so an endpoint that is gone can be told from one that died.
RUN_ENDED = "rlmetrics_run_ended"

# The exporter's unit words (opentelemetry-exporter-prometheus 0.65b0 and 0.66b*, identical).
_UNIT_WORDS = {
    "d": "days",
    "h": "hours",
    "min": "minutes",
    "s": "seconds",
    "ms": "milliseconds",
    "us": "microseconds",
    "ns": "nanoseconds",
    "By": "bytes",
    "KiBy": "kibibytes",
    "MiBy": "mebibytes",
    "GiBy": "gibibytes",
    "TiBy": "tibibytes",
    "KBy": "kilobytes",
    "MBy": "megabytes",
    "GBy": "gigabytes",
    "TBy": "terabytes",
    "m": "meters",
    "V": "volts",
    "A": "amperes",
    "J": "joules",
    "W": "watts",
    "g": "grams",
    "Cel": "celsius",
    "Hz": "hertz",
    "1": "",
    "%": "percent",
}
_PER_UNIT_WORDS = {
    "s": "second",
    "m": "minute",
    "h": "hour",
    "d": "day",
    "w": "week",
    "mo": "month",
    "y": "year",
}
_ANNOTATION = re.compile(r"{.*}")
_NOT_NAME = re.compile(r"[^a-zA-Z0-9:]+")
_NOT_LABEL = re.compile(r"[^a-zA-Z0-9]+")


def prometheus_unit(unit: str) -> str:
    """The word the exporter appends for ``unit`` (empty for none)."""
    unit = _ANNOTATION.sub("", unit)
    if unit in _UNIT_WORDS:
        return _UNIT_WORDS[unit]
    top, slash, bottom = unit.partition("/")
    if slash:
        bottom = _NOT_NAME.sub("_", bottom)
        if bottom:
            top = _NOT_NAME.sub("_", top)
            top = _UNIT_WORDS.get(top, top)
            bottom = _PER_UNIT_WORDS.get(bottom, bottom)
            return f"{top}_per_{bottom}" if top else f"per_{bottom}"
    return _NOT_NAME.sub("_", unit).strip("_")


def _sanitize(name: str) -> str:
    if name and name[0].isdigit():
        name = "_" + name[1:]
    return _NOT_NAME.sub("_", name)


def prometheus_label(key: str) -> str:
    """The label an attribute key becomes (``rl.efficiency.category`` →
    ``rl_efficiency_category``)."""
    if key and key[0].isdigit():
        key = "_" + key[1:]
    return _NOT_LABEL.sub("_", key)


def unit_named(name: str, unit: str, counter: bool = False) -> str:
    """``name`` with a last segment ending in ``unit``'s abbreviation (``duration_ms``, unit
    ``ms``; a counter's before its ``_total``) ending in the unit's word instead
    (``duration_milliseconds``), so the exporter, which appends the word unless the name ends
    with it, does not repeat the unit. Any other name as it is."""
    word = prometheus_unit(unit)
    if not word or word == unit:
        return name
    total = "_total" if counter and name.endswith("_total") else ""
    stem = name[: len(name) - len(total)]
    if stem.endswith(("_" + unit, "." + unit)):
        return stem[: -len(unit)] + word + total
    return name


def prometheus_name(spec: MetricSpec) -> str:
    """The metric family name a spec is exposed as: a counter's samples add ``_total`` and a
    histogram's ``_bucket``/``_sum``/``_count`` (see :meth:`Names.counter` and friends)."""
    counter = spec.kind in (Kind.COUNTER, Kind.OBSERVABLE_COUNTER)
    name = _sanitize(unit_named(spec.name, spec.unit, counter))
    if counter and name.endswith("_total"):
        name = name[: -len("_total")]  # prometheus_client strips it and adds it back per sample
    word = prometheus_unit(spec.unit)
    if word and not name.endswith("_" + word):
        name += "_" + word
    return name


def sample_names(spec: MetricSpec) -> tuple[str, ...]:
    """The sample names a spec's points are stored under in Prometheus."""
    name = prometheus_name(spec)
    if spec.kind in (Kind.COUNTER, Kind.OBSERVABLE_COUNTER):
        return (name + "_total",)
    if spec.kind is Kind.HISTOGRAM:
        if spec.buckets and spec.buckets[0] < 0:
            # prometheus_client serves neither _sum nor _count for a histogram whose first
            # bucket is negative (its sum is no counter): only the buckets.
            return (name + "_bucket",)
        return (name + "_bucket", name + "_sum", name + "_count")
    return (name,)


def for_run(vector: str) -> str:
    """``vector`` restricted to the runs the ``$run_id`` variable selects: the run id is a
    resource attribute, which the exporter publishes on ``target_info``, not on each series."""
    return f'({vector} and on(job, instance) target_info{{{RUN_ID_LABEL}=~"$run_id"}})'


class Names:
    """The Prometheus names of the declared series, by OpenTelemetry name.

    Asking for a series nobody declared raises ``KeyError`` naming it, so a panel cannot
    query a name that no installed plugin exports.
    """

    def __init__(self, specs: Iterable[MetricSpec]) -> None:
        self._specs: Mapping[str, MetricSpec] = {spec.name: spec for spec in specs}

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def spec(self, name: str) -> MetricSpec:
        try:
            return self._specs[name]
        except KeyError:
            raise KeyError(
                f"no installed plugin declares {name!r}; a dashboard row may only read "
                "declared series"
            ) from None

    def gauge(self, name: str) -> str:
        """A gauge's (or up-down counter's) series name."""
        return self._kind(
            name,
            Kind.GAUGE,
            Kind.OBSERVABLE_GAUGE,
            Kind.UP_DOWN_COUNTER,
            Kind.OBSERVABLE_UP_DOWN_COUNTER,
        )

    def counter(self, name: str) -> str:
        """A counter's sample name, ``_total`` included (read it through ``rate``/``increase``)."""
        return self._kind(name, Kind.COUNTER, Kind.OBSERVABLE_COUNTER) + "_total"

    def histogram(self, name: str, suffix: str = "bucket") -> str:
        """A histogram's ``_bucket`` (or ``_sum``/``_count``) series name."""
        if suffix not in ("bucket", "sum", "count"):
            raise ValueError(f"a histogram has _bucket, _sum and _count series, not _{suffix}")
        return f"{self._kind(name, Kind.HISTOGRAM)}_{suffix}"

    def label(self, key: str) -> str:
        return prometheus_label(key)

    def _kind(self, name: str, *kinds: Kind) -> str:
        spec = self.spec(name)
        if spec.kind not in kinds:
            raise ValueError(
                f"{name} is a {spec.kind.value}, not a {' or '.join(k.value for k in kinds)}"
            )
        return prometheus_name(spec)
