"""The fast paths must export exactly what the fully checked paths do: ``record``'s for an
unlabelled finite number, and an observable callback's for attribute sets already checked."""

from __future__ import annotations

from typing import Any

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
    {"host": 3},  # not a string
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


@given(observed=_observed, kind=st.sampled_from([Kind.OBSERVABLE_GAUGE, Kind.OBSERVABLE_COUNTER]))
@example(  # a set checked in the first collection turns negative: a counter still drops it
    observed=[(1.0, {"host": "a"}), (-1.0, {"host": "a"})], kind=Kind.OBSERVABLE_COUNTER
)
@example(  # every set is checked by the second collection; the cap still holds there
    observed=[(1.0, {"host": "a"}), (2.0, {"host": "b"}), (3.0, {"host": "c"})],
    kind=Kind.OBSERVABLE_GAUGE,
)
def test_later_collections_export_what_the_first_did(observed: list[Any], kind: Kind) -> None:
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
            first = _exported(reader)
            assert _exported(reader) == first
            assert _exported(reader) == first
    # max_series caps the labelled sets (the unlabelled point is not one of them).
    assert len({attributes for attributes, _value in first if attributes}) <= 2
    assert all(dict(attributes).keys() <= {"host"} for attributes, _value in first)


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
