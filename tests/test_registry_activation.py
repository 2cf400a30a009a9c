"""A group declared ``on_use`` costs nothing at collection until the process uses it: its
observable instruments are created by ``activate``, after the registry froze, without a
late-declaration error."""

from __future__ import annotations

import pytest

import rlmetrics
from rlmetrics import DeclarationError, Kind, MetricSpec
from rlmetrics.testing import in_memory_telemetry, points

GROUP = "test.on_use"
calls: list[str] = []


def _observed() -> list[tuple[float, dict[str, str]]]:
    calls.append("called")
    return [(3.0, {})]


@pytest.fixture(autouse=True)
def _declared() -> None:
    calls.clear()
    rlmetrics.declare(
        GROUP,
        [MetricSpec("test.on_use.level", Kind.OBSERVABLE_GAUGE, callback=_observed)],
        on_use=True,
    )


def _names(reader: object) -> set[str]:
    return {point.name for point in points(reader)}


def test_an_unused_group_exports_nothing_and_runs_no_callback() -> None:
    with in_memory_telemetry() as (_handle, reader):
        for _ in range(3):
            assert "test.on_use.level" not in _names(reader)
    assert calls == []


def test_the_first_use_after_start_creates_the_instruments() -> None:
    with in_memory_telemetry() as (_handle, reader):
        assert "test.on_use.level" not in _names(reader)
        rlmetrics.activate(GROUP)  # the registry is frozen: no LateDeclarationError
        rlmetrics.activate(GROUP)  # idempotent
        assert "test.on_use.level" in _names(reader)
        assert calls == ["called"]


def test_a_use_before_start_counts_for_this_and_later_sessions() -> None:
    rlmetrics.activate(GROUP)
    for _ in range(2):
        with in_memory_telemetry() as (_handle, reader):
            assert "test.on_use.level" in _names(reader)


def test_a_group_is_activated_one_way() -> None:
    with pytest.raises(DeclarationError, match="on_use"):
        rlmetrics.declare(GROUP, [MetricSpec("test.on_use.other", Kind.GAUGE, key="other")])


def test_activating_an_undeclared_group_is_harmless() -> None:
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.activate("test.nobody.declared.this")
        assert "test.on_use.level" not in _names(reader)
