"""Prometheus recording rules that merge ranks at query time, one per declared series and its
reduction (:class:`~rlmetrics.spec.Reduction`), for runs in which every rank exports its own
series (no :class:`~rlmetrics.ranks.RankMerger`).

Each rule aggregates the processes of a run (``job``/``instance`` pairs, the run id joined
from their ``target_info``) into ``rlmetrics_run:<series>:<kind>``, keeping the series' own
declared labels: gauges and totals by their kind (``sum``, ``avg``, ``min``, ``max``; ``last``
is the ``max``, as every rank holds that one value), counters and histograms as the sum of
their per-rank rates over ``window``, a weighted mean as ``sum(value * weight) / sum(weight)``
over the ranks that export the value (the plain mean for a run that exports no weight), and a
straggler as its ``max``, ``min`` and ``avg`` across ranks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..dashboard.promql import RUN_ID_LABEL, Names, prometheus_label
from ..spec import Kind, MetricSpec, Reduce

__all__ = ["GROUP", "PREFIX", "recording_rules", "recording_rules_yaml"]

GROUP = "rlmetrics-ranks"
PREFIX = "rlmetrics_run"
_RUN_INFO = f"max by (job, instance, {RUN_ID_LABEL}) (target_info)"
_AGGREGATE = {
    Reduce.SUM: "sum",
    Reduce.MEAN: "avg",
    Reduce.MIN: "min",
    Reduce.MAX: "max",
    Reduce.LAST: "max",
}


def _with_run(vector: str) -> str:
    return f"({vector}) * on(job, instance) group_left({RUN_ID_LABEL}) {_RUN_INFO}"


def _by(spec: MetricSpec, *extra: str) -> str:
    labels = [RUN_ID_LABEL, *extra, *(prometheus_label(key) for key, _ in spec.attributes)]
    return ", ".join(labels)


def _sample(names: Names, spec: MetricSpec, window: str) -> str:
    """The per-rank vector a spec merges: a gauge's value, a counter's rate."""
    if spec.kind in (Kind.COUNTER, Kind.OBSERVABLE_COUNTER):
        return f"rate({names.counter(spec.name)}[{window}])"
    return names.gauge(spec.name)


def _rules_for(names: Names, spec: MetricSpec, window: str) -> list[dict[str, Any]]:
    reduction = spec.reduction
    kind = reduction.kind
    record = f"{PREFIX}:{_base(names, spec)}"
    if spec.kind is Kind.HISTOGRAM:
        bucket = names.histogram(spec.name)
        return [
            {
                "record": f"{record}_bucket:rate{window}",
                "expr": f"sum by ({_by(spec, 'le')}) ({_with_run(f'rate({bucket}[{window}])')})",
            }
        ]
    sample = _sample(names, spec, window)
    if spec.kind in (Kind.COUNTER, Kind.OBSERVABLE_COUNTER):
        return [
            {
                "record": f"{record}:rate{window}",
                "expr": f"sum by ({_by(spec)}) ({_with_run(sample)})",
            }
        ]
    if kind is Reduce.STRAGGLER:
        return [
            {
                "record": f"{record}:{agg}",
                "expr": f"{agg} by ({_by(spec)}) ({_with_run(sample)})",
            }
            for agg in ("max", "min", "avg")
        ]
    if kind is Reduce.WEIGHTED_MEAN:
        if reduction.weight not in names:
            return []
        weight_spec = names.spec(str(reduction.weight))
        weight = _sample(names, weight_spec, window)
        by = _by(spec)
        weighted = f"{sample} * on(job, instance) group_left() ({weight})"
        # The weights of the ranks that export this value (each set of its labels), as the
        # merger weighs a key over the ranks that logged it: a rank's weight beside each of
        # its value's series, not every rank's weight of the run.
        weights = f"{sample} * 0 + on(job, instance) group_left() ({weight})"
        # A run that exports no weight (a trainer logging no num_samples) is the plain mean
        # of its ranks, as the in-process merger takes it: without it the rule matched
        # nothing for that run.
        return [
            {
                "record": f"{record}:weighted_mean",
                "expr": f"(sum by ({by}) ({_with_run(weighted)}) / "
                f"sum by ({by}) ({_with_run(weights)})) "
                f"or avg by ({by}) ({_with_run(sample)})",
            }
        ]
    agg = _AGGREGATE[kind]
    return [
        {
            "record": f"{record}:{kind.value}",
            "expr": f"{agg} by ({_by(spec)}) ({_with_run(sample)})",
        }
    ]


def _base(names: Names, spec: MetricSpec) -> str:
    if spec.kind is Kind.HISTOGRAM:
        return names.histogram(spec.name).removesuffix("_bucket")
    if spec.kind in (Kind.COUNTER, Kind.OBSERVABLE_COUNTER):
        return names.counter(spec.name).removesuffix("_total")
    return names.gauge(spec.name)


def recording_rules(specs: Iterable[MetricSpec], window: str = "5m") -> list[dict[str, Any]]:
    """Every spec's recording rules, in declaration order."""
    specs = list(specs)
    names = Names(specs)
    rules: list[dict[str, Any]] = []
    for spec in specs:
        rules.extend(_rules_for(names, spec, window))
    return rules


def recording_rules_yaml(specs: Iterable[MetricSpec], window: str = "5m") -> str:
    """The rules as a Prometheus rule file (one group)."""
    from .._yaml import render_yaml

    return render_yaml({"groups": [{"name": GROUP, "rules": recording_rules(specs, window)}]})
