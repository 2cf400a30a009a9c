"""The fast paths must export exactly what the fully checked paths do: ``record``'s for an
unlabelled finite number, and an observable callback's for attribute sets already checked."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec
from rlmetrics.testing import in_memory_telemetry, isolated_state, points

_ATTRIBUTES: list[Any] = [
    {"host": "a"},
    {"host": "b"},
    {"host": "c"},  # the third distinct set: past max_series=2
    {},
    {"other": "x"},  # undeclared
    {"host": 3.5},  # neither a string nor an int
    {"host": ["x"]},  # unhashable
    "host=a",  # not a mapping
]
_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([None, "1.5", True]),
)
_observed = st.lists(
    st.one_of(st.tuples(_values, st.sampled_from(_ATTRIBUTES)), st.just(1.0)), max_size=12
)


def _exported(reader: Any) -> list[tuple[tuple[tuple[str, Any], ...], float]]:
    return sorted(
        (tuple(sorted(p.attributes.items())), p.value)
        for p in points(reader)
        if p.name == "t.observed"
    )


def _collections(observed: list[Any], kind: Kind) -> list[Any]:
    """Three collections of a series whose callback yields ``observed``."""
    with isolated_state():
        rlmetrics.declare(
            "t",
            [
                MetricSpec(
                    "t.observed",
                    kind,
                    key="observed",
                    attributes={"host": OPEN},
                    max_series=2,
                    callback=lambda: observed,
                )
            ],
        )
        with in_memory_telemetry() as (_handle, reader):
            return [_exported(reader) for _ in range(3)]


def _prepared(observed: list[Any]) -> list[Any]:
    """``observed`` with each hashable mapping given as the frozenset its owner would build
    once (an unhashable one stays a mapping: no frozenset can hold it)."""
    out = []
    for item in observed:
        if isinstance(item, tuple) and isinstance(item[1], dict):
            with contextlib.suppress(TypeError):
                item = (item[0], frozenset(item[1].items()))
        out.append(item)
    return out


@given(observed=_observed, kind=st.sampled_from([Kind.OBSERVABLE_GAUGE, Kind.OBSERVABLE_COUNTER]))
@example(  # a set checked in the first collection turns negative: a counter still drops it
    observed=[(1.0, {"host": "a"}), (-1.0, {"host": "a"})], kind=Kind.OBSERVABLE_COUNTER
)
@example(  # every set is checked by the second collection; the cap still holds there
    observed=[(1.0, {"host": "a"}), (2.0, {"host": "b"}), (3.0, {"host": "c"})],
    kind=Kind.OBSERVABLE_GAUGE,
)
def test_later_collections_export_what_the_first_did(observed: list[Any], kind: Kind) -> None:
    first, *later = _collections(observed, kind)
    assert later == [first, first]
    # max_series caps the labelled sets (the unlabelled point is not one of them); past it,
    # one overflow set.
    overflow = (("otel.metric.overflow", True),)
    labelled = {attributes for attributes, _value in first if attributes}
    assert len(labelled - {overflow}) <= 2
    assert all(dict(attributes).keys() <= {"host"} for attributes in labelled - {overflow})


@given(observed=_observed, kind=st.sampled_from([Kind.OBSERVABLE_GAUGE, Kind.OBSERVABLE_COUNTER]))
def test_prepared_attribute_sets_export_what_their_mappings_do(
    observed: list[Any], kind: Kind
) -> None:
    assert _collections(_prepared(observed), kind) == _collections(observed, kind)


_RECORDED_KINDS = [Kind.GAUGE, Kind.COUNTER, Kind.UP_DOWN_COUNTER, Kind.HISTOGRAM]


def _by_attributes(reader: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for point in points(reader):
        if point.name == "t.recorded":
            shown = point.value if point.kind != "histogram" else (point.count, point.sum)
            out[point.attributes.get("host", "unlabelled")] = shown
    return out


@given(value=_values, kind=st.sampled_from(_RECORDED_KINDS))
@example(value=2**30 - 1, kind=Kind.COUNTER)  # the largest int the fast path compares
@example(value=2**30, kind=Kind.COUNTER)  # the smallest it leaves to the checked path
@example(value=-(2**30) + 1, kind=Kind.UP_DOWN_COUNTER)
@example(value=-(2**30), kind=Kind.UP_DOWN_COUNTER)
@example(value=2**63 - 1, kind=Kind.GAUGE)  # int64's edges, checked there
@example(value=2**63, kind=Kind.GAUGE)
@example(value=-(2**63) - 1, kind=Kind.HISTOGRAM)
def test_an_unlabelled_point_exports_what_a_checked_one_does(value: Any, kind: Kind) -> None:
    """The same two records, unlabelled (after the first, written without a check call) and
    under an attribute set (every one checked), must export the same thing."""
    with isolated_state():
        spec = MetricSpec("t.recorded", kind, key="recorded", attributes={"host": {"a"}})
        rlmetrics.declare("t", [spec])
        with in_memory_telemetry() as (_handle, reader):
            for attributes in (None, {"host": "a"}):
                rlmetrics.record("t", {"recorded": 1}, attributes)  # binds the instrument
                rlmetrics.record("t", {"recorded": value}, attributes)
            exported = _by_attributes(reader)
    assert exported["unlabelled"] == exported["a"]


# -- past max_series: one overflow attribute set, as the OTel SDK records it --------------------

OVERFLOW = {"otel.metric.overflow": True}


def _capped(kind: Kind, max_series: int, callback: Any = None) -> None:
    rlmetrics.declare(
        "t",
        [
            MetricSpec(
                "t.capped",
                kind,
                key="capped",
                attributes={"host": OPEN},
                max_series=max_series,
                buckets=[1, 10] if kind is Kind.HISTOGRAM else None,
                callback=callback,
            )
        ],
    )


def _capped_points(reader: Any) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for point in points(reader):
        if point.name == "t.capped":
            key = "overflow" if point.attributes == OVERFLOW else point.attributes["host"]
            out[key] = point.value if point.kind != "histogram" else (point.count, point.sum)
    return out


# (what the five points 1..5 under five hosts export past a cap of 3: the overflow set holds
# what the SDK's own overflow holds, a sum for a sum, the last value for a gauge)
_OVERFLOWED = {
    Kind.COUNTER: 4.0 + 5.0,
    Kind.UP_DOWN_COUNTER: 4.0 + 5.0,
    Kind.HISTOGRAM: (2, 9.0),
    Kind.GAUGE: 5.0,
}


@pytest.mark.parametrize("prepared", [False, True], ids=["mapping", "prepared"])
@pytest.mark.parametrize("kind", _RECORDED_KINDS, ids=lambda kind: kind.value)
def test_a_recorded_series_past_its_cap_records_the_rest_as_overflow(
    kind: Kind, prepared: bool
) -> None:
    with isolated_state():
        _capped(kind, max_series=3)
        with in_memory_telemetry() as (_handle, reader):
            for i in range(1, 6):
                attributes = {"host": f"h{i}"}
                if prepared:  # the every-step path of a dimensioned series
                    points_ = [(float(i), frozenset(attributes.items()))]
                    rlmetrics.record_points("t", "capped", points_)
                else:
                    rlmetrics.record("t", {"capped": float(i)}, attributes)
            first = _capped_points(reader)
            assert _capped_points(reader) == first  # and in every later collection
    kept = {f"h{i}": (1, float(i)) if kind is Kind.HISTOGRAM else float(i) for i in (1, 2, 3)}
    assert first == {**kept, "overflow": _OVERFLOWED[kind]}


def test_overflow_keeps_a_counters_sum_whole_and_warns_once(caplog: Any) -> None:
    with isolated_state():
        _capped(Kind.COUNTER, max_series=2)
        with (
            caplog.at_level(logging.DEBUG, logger="rlmetrics"),
            in_memory_telemetry() as (
                _handle,
                reader,
            ),
        ):
            for _step in range(10):
                for host in ("a", "b", "c", "d"):
                    rlmetrics.record("t", {"capped": 1}, {"host": host})
            exported = _capped_points(reader)
    # The sum over the attribute no longer undercounts: 40 increments, 40 counted.
    assert exported == {"a": 10, "b": 10, "overflow": 20}
    overflow = [r for r in caplog.records if "otel.metric.overflow" in r.getMessage()]
    assert [r.levelno for r in overflow][:1] == [logging.WARNING]
    assert all(r.levelno == logging.DEBUG for r in overflow[1:])
    assert "max_series=2" in overflow[0].getMessage()


@pytest.mark.parametrize(
    "kind", [Kind.OBSERVABLE_GAUGE, Kind.OBSERVABLE_COUNTER], ids=lambda kind: kind.value
)
def test_an_observed_series_past_its_cap_observes_the_rest_as_overflow(kind: Kind) -> None:
    observed = [(float(i), {"host": f"h{i}"}) for i in range(1, 6)]
    with isolated_state():
        _capped(kind, max_series=3, callback=lambda: observed)
        with in_memory_telemetry() as (_handle, reader):
            first = _capped_points(reader)
            assert _capped_points(reader) == first
    overflowed = 5.0 if kind is Kind.OBSERVABLE_GAUGE else 4.0 + 5.0
    assert first == {"h1": 1.0, "h2": 2.0, "h3": 3.0, "overflow": overflowed}


def test_a_cap_above_the_sdks_own_limit_exports_the_same_on_every_sdk() -> None:
    """SDK 1.45.2 caps a stream at 2000 attribute sets of its own; 1.44 and 1.45.1 have no
    limit. A series declared with a larger cap exports every set up to it on all three."""
    with isolated_state():
        _capped(Kind.COUNTER, max_series=2500)
        with in_memory_telemetry() as (_handle, reader):
            for i in range(2600):
                rlmetrics.record("t", {"capped": 1}, {"host": f"h{i}"})
            exported = _capped_points(reader)
    assert exported == {**{f"h{i}": 1 for i in range(2500)}, "overflow": 100}


def test_record_declared_reads_a_dict_shorter_than_its_group(caplog: Any) -> None:
    # A dict with fewer keys than the group declares is scanned from its own side: the same
    # keys found, None dropped and said, keys the group never declared left alone.
    rlmetrics.declare(
        "test.declared",
        [MetricSpec(f"test.declared.{name}", Kind.GAUGE, key=name) for name in "abcdef"],
    )
    with in_memory_telemetry() as (_handle, reader), caplog.at_level(logging.WARNING):
        found = rlmetrics.record_declared("test.declared", {"b": 2.0, "z": 9.0, "e": None})
        assert found == {"b": 2.0}
        assert "test.declared.e (key 'e') dropped a value: None" in caplog.text
        wide = {name: float(i) for i, name in enumerate("abcdefgh")}
        assert rlmetrics.record_declared("test.declared", wide) == {
            name: float(i) for i, name in enumerate("abcdef")
        }
        exported = {p.name: p.value for p in points(reader) if p.name.startswith("test.")}
    assert exported == {f"test.declared.{name}": float(i) for i, name in enumerate("abcdef")}


@pytest.mark.parametrize("exemplar_filter", ["trace_based", "always_on"])
def test_a_gauge_collected_inside_a_span_exports_the_same_with_either_filter(
    monkeypatch: pytest.MonkeyPatch, exemplar_filter: str
) -> None:
    # A gauge's points are made at collection from its last values. Under always_on each
    # keeps an exemplar of its value with no span: an observable gauge's named whatever span
    # the collecting thread was in, never the one the value was recorded in.
    from opentelemetry.sdk.trace import TracerProvider

    monkeypatch.setenv("OTEL_METRICS_EXEMPLAR_FILTER", exemplar_filter)
    rlmetrics.declare("test.spanned", [MetricSpec("test.spanned.g", Kind.GAUGE, key="g")])
    tracer = TracerProvider().get_tracer("test")
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.record("test.spanned", {"g": 3.0})
        with tracer.start_as_current_span("collecting"):
            data = reader.get_metrics_data()
    (point,) = [
        p
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "test.spanned.g"
        for p in m.data.data_points
    ]
    assert point.value == 3.0
    exemplars = [(e.value, e.span_id, e.trace_id) for e in point.exemplars]
    assert exemplars == ([(3.0, None, None)] if exemplar_filter == "always_on" else [])
