"""An observable callback that returns the same tuple as at the last collection (a snapshot its
owner replaces when it has new readings) is checked once; a new tuple, or any list, is checked
afresh, so what is exported always follows what the callback returns."""

from __future__ import annotations

from typing import Any

import pytest

import rlmetrics
from rlmetrics import OPEN, Kind, MetricSpec
from rlmetrics.testing import in_memory_telemetry, points

returned: list[Any] = [()]


@pytest.fixture(autouse=True)
def _declared() -> None:
    rlmetrics.declare(
        "test.observed",
        [
            MetricSpec(
                "test.observed.used",
                Kind.OBSERVABLE_GAUGE,
                attributes={"host": OPEN},
                max_series=2,
                callback=lambda: returned[0],
            )
        ],
    )


def _exported(reader: Any) -> dict[str, float]:
    return {p.attributes["host"]: p.value for p in points(reader) if p.name == "test.observed.used"}


def test_the_same_tuple_exports_the_same_points_and_a_new_one_its_own() -> None:
    snapshot = ((1.0, {"host": "a"}), (2.0, {"host": "b"}), (3.0, {"host": "c"}))
    returned[0] = snapshot
    with in_memory_telemetry() as (_handle, reader):
        # Checked once, cap included (the third host folds into the overflow point).
        first = points(reader)
        assert points(reader) == first
        assert {p.attributes.get("host") for p in first} == {"a", "b", None}
        returned[0] = ((5.0, {"host": "a"}),)
        assert _exported(reader) == {"a": 5.0}
        listed = [(7.0, {"host": "b"})]
        returned[0] = listed
        assert _exported(reader) == {"b": 7.0}
        listed[0] = (8.0, {"host": "b"})  # a list changed in place is read again
        assert _exported(reader) == {"b": 8.0}
        returned[0] = ((float("nan"), {"host": "a"}),)  # a bad value in a tuple: still dropped
        assert _exported(reader) == {}
        assert _exported(reader) == {}


def test_an_attribute_set_prepared_by_the_owner_exports_as_its_mapping_would() -> None:
    # A monitor hands back one frozenset per host, built once: the same points as the dicts,
    # checked the same way (an undeclared attribute in one is dropped, the cap still holds).
    prepared = {host: frozenset({("host", host)}) for host in "abc"}
    stray = frozenset({("host", "a"), ("zone", "x")})
    with in_memory_telemetry() as (_handle, reader):
        for attributes in (prepared, {host: {"host": host} for host in "abc"}):
            returned[0] = [(1.0, attributes["a"]), (2.0, attributes["b"]), (4.0, stray)]
            assert _exported(reader) == {"a": 1.0, "b": 2.0}
            returned[0] = [(1.0, attributes["a"]), (2.0, attributes["b"])]
            assert _exported(reader) == {"a": 1.0, "b": 2.0}
            returned[0] = [(1.0, attributes["c"]), (5.0, attributes["a"]), (6.0, attributes["b"])]
            found = {p.attributes.get("host"): p.value for p in points(reader)}
            assert found == {"c": 1.0, "a": 5.0, None: 6.0}  # b past the cap of 2: the overflow
