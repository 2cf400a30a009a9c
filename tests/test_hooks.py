"""The typed hook caller: tee implementations run only while telemetry is exporting, and a
hook that only tees implement is not even parsed for while it is off."""

from __future__ import annotations

from typing import Any

import pytest

import rlmetrics
from rlmetrics.events import EfficiencySummary
from rlmetrics.plugins import register
from rlmetrics.testing import in_memory_telemetry


class _Both:
    def __init__(self) -> None:
        self.calls: list[str] = []

    @rlmetrics.hookimpl(tee=True)
    def log_metrics(self) -> None:
        self.calls.append("tee")


class _Plain:
    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    @rlmetrics.hookimpl
    def log_metrics(self) -> None:
        self.calls.append("plain")


def test_a_tee_implementation_runs_only_while_exporting() -> None:
    tee = _Both()
    register(tee, "tee")
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"x": 1}, step=1)
    assert tee.calls == []
    with in_memory_telemetry():
        logger.log_metrics({"x": 1}, step=2)
    assert tee.calls == ["tee"]


def test_a_plain_implementation_runs_whether_or_not_telemetry_is_on() -> None:
    calls: list[str] = []
    register(_Plain(calls), "plain")
    rlmetrics.Logger(backends={}).log_metrics({"x": 1}, step=1)
    assert calls == ["plain"]


def test_a_hook_only_tees_implement_is_not_parsed_while_telemetry_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[Any] = []
    real = EfficiencySummary.from_metrics.__func__  # type: ignore[attr-defined]

    def counting(cls: type[EfficiencySummary], metrics: Any) -> EfficiencySummary:
        parsed.append(dict(metrics))
        return real(cls, metrics)  # type: ignore[no-any-return]

    monkeypatch.setattr(EfficiencySummary, "from_metrics", classmethod(counting))
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"efficiency/idle/validation_s": 1.0, "loss": 0.5}, step=1)
    assert parsed == []  # only the built-in efficiency family (a tee) implements the hook
    with in_memory_telemetry():
        logger.log_metrics({"efficiency/idle/validation_s": 1.0, "loss": 0.5}, step=2)
    # Parsed once, while exporting.
    assert parsed == [{"efficiency/idle/validation_s": 1.0, "loss": 0.5}]
