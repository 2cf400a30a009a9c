"""The Prometheus names the dashboard queries are the ones the real exporter serves: for every
declared series (over HTTP, through ``rlmetrics.start``), and for generated names and units
(hypothesis, against the SDK's exporter in process). Grafana variable substitution too."""

from __future__ import annotations

import re
import urllib.request
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

import rlmetrics
from rlmetrics.dashboard.grafana import substitute
from rlmetrics.dashboard.promql import (
    RUN_ENDED,
    Names,
    for_run,
    prometheus_label,
    prometheus_unit,
    sample_names,
)
from rlmetrics.registry import MetricRegistry, default_registry
from rlmetrics.spec import Kind, MetricSpec
from rlmetrics.testing import isolated_state

# The exported shape does not depend on how a value arrives: an observable exports as its
# synchronous twin (rlmetrics' gauge is an observable over its own table anyway).
_SYNC = {
    Kind.OBSERVABLE_GAUGE: Kind.GAUGE,
    Kind.OBSERVABLE_COUNTER: Kind.COUNTER,
    Kind.OBSERVABLE_UP_DOWN_COUNTER: Kind.UP_DOWN_COUNTER,
}


def _sample_names(text: str) -> set[str]:
    return {
        sample.name
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if not sample.name.startswith("target_info")
    }


def test_every_declared_series_is_served_under_the_names_the_dashboard_queries() -> None:
    declared = [item.spec for item in default_registry().declared()]
    mirrors = [
        MetricSpec(
            s.name,
            _SYNC.get(s.kind, s.kind),
            unit=s.unit,
            description=s.description,
            buckets=s.buckets,
        )
        for s in declared
    ]
    expected = {name for spec in mirrors for name in sample_names(spec)}
    with isolated_state(MetricRegistry()):
        rlmetrics.declare("mirror", mirrors)
        with rlmetrics.start(exporters={"prometheus": {"port": 0}}) as telemetry:
            for spec in mirrors:
                rlmetrics.record("mirror", {spec.key: 1})
            host, port = telemetry.prometheus_address or ("", 0)
            with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as answer:
                served = _sample_names(answer.read().decode())
    served -= {n for n in served if n.endswith("_created")}
    # The endpoint's own series beside the declared ones: whether the run ended cleanly.
    assert served == expected | {RUN_ENDED}
    assert len(declared) >= 90  # every installed family took part


_WORDS = [
    "s",
    "ms",
    "us",
    "ns",
    "min",
    "h",
    "d",
    "By",
    "KiBy",
    "MiBy",
    "GBy",
    "1",
    "%",
    "Hz",
    "W",
    "m",
    "g",
    "Cel",
    "{token}",
    "{request}",
    "{token}/s",
    "By/s",
    "m/s",
    "1/s",
    "{x}/{y}",
    "kg",
    "ratio",
    "count",
    "{a.b}",
    "per/hour",
    "s/d",
]
_NAMES = st.from_regex(r"[a-z][a-z0-9]{0,5}(\.[a-z][a-z0-9_]{0,6}){1,3}", fullmatch=True)


@settings(max_examples=60)
@given(
    name=_NAMES,
    unit=st.sampled_from(_WORDS),
    kind=st.sampled_from([Kind.COUNTER, Kind.GAUGE, Kind.HISTOGRAM, Kind.UP_DOWN_COUNTER]),
    total=st.booleans(),
    unit_in_name=st.booleans(),
)
# A stem that ends in the unit's own word: "a.s_s" is served as a_s_seconds_total.
@example(name="a.s", unit="s", kind=Kind.COUNTER, total=False, unit_in_name=True)
def test_the_translation_matches_the_exporter(
    name: str, unit: str, kind: Kind, total: bool, unit_in_name: bool
) -> None:
    """Against rlmetrics' own Prometheus reader, the one users scrape (names that end in
    their unit, as NeMo Gym's do, included)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import CollectorRegistry, generate_latest

    from rlmetrics.exporters.prometheus import make_reader

    unit_in_name = unit_in_name and re.fullmatch(r"[a-z]+", unit) is not None
    if unit_in_name:
        name += "_" + unit
    named_with_unit = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if total:
        name += "_total"
    spec = MetricSpec(name, kind, unit=unit, buckets=[1.0] if kind is Kind.HISTOGRAM else None)
    registry = CollectorRegistry()
    reader = make_reader(registry)
    provider = MeterProvider(metric_readers=[reader])
    try:
        meter = provider.get_meter("t")
        make: dict[Kind, Any] = {
            Kind.COUNTER: meter.create_counter,
            Kind.GAUGE: meter.create_gauge,
            Kind.HISTOGRAM: meter.create_histogram,
            Kind.UP_DOWN_COUNTER: meter.create_up_down_counter,
        }
        instrument = make[kind](name, unit=unit)
        (
            instrument.set
            if kind is Kind.GAUGE
            else instrument.record
            if kind is Kind.HISTOGRAM
            else instrument.add
        )(1)
        served = _sample_names(reader.scrape(lambda: generate_latest(registry)).decode())
    finally:
        provider.shutdown()
    assert served == set(sample_names(spec))
    word = prometheus_unit(unit)
    if unit_in_name and word and word != unit:
        # The unit is said once: the name's own unit word is replaced, not followed by the
        # Prometheus one (a stem that merely ends in the word, as "a.s" does, may stay).
        assert not any(n.startswith(f"{named_with_unit}_{word}") for n in served), served


def test_names_refuse_what_nobody_declared_and_the_wrong_kind() -> None:
    names = Names([MetricSpec("rl.x", Kind.COUNTER, unit="s")])
    assert names.counter("rl.x") == "rl_x_seconds_total"
    with pytest.raises(KeyError, match=r"no installed plugin declares 'rl\.y'"):
        names.gauge("rl.y")
    with pytest.raises(ValueError, match="is a counter"):
        names.gauge("rl.x")
    with pytest.raises(ValueError, match="_bucket, _sum and _count"):
        names.histogram("rl.x", "total")
    assert prometheus_label("gen_ai.token.type") == "gen_ai_token_type"


def test_substitute_replaces_grafana_variables_as_grafana_does() -> None:
    expr = f"rate(x[$__rate_interval]) + {for_run('y')} + ${{host}}"
    assert substitute(expr, {"__rate_interval": "1m", "run_id": "r1", "host": "h"}) == (
        'rate(x[1m]) + (y and on(job, instance) target_info{rlmetrics_run_id=~"r1"}) + h'
    )
    with pytest.raises(KeyError, match=r"\$host"):
        substitute("$host", {})
