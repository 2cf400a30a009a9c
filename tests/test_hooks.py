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
    # The route parses with in_metrics (from_metrics' form that answers None for a dict
    # with no efficiency/* key).
    real = EfficiencySummary.in_metrics.__func__  # type: ignore[attr-defined]

    def counting(cls: type[EfficiencySummary], metrics: Any) -> EfficiencySummary | None:
        parsed.append(dict(metrics))
        return real(cls, metrics)  # type: ignore[no-any-return]

    monkeypatch.setattr(EfficiencySummary, "in_metrics", classmethod(counting))
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"efficiency/idle/validation_s": 1.0, "loss": 0.5}, step=1)
    assert parsed == []  # only the built-in efficiency family (a tee) implements the hook
    with in_memory_telemetry():
        logger.log_metrics({"efficiency/idle/validation_s": 1.0, "loss": 0.5}, step=2)
    # Parsed once, while exporting.
    assert parsed == [{"efficiency/idle/validation_s": 1.0, "loss": 0.5}]


def test_plain_implementations_run_in_pluggys_order_with_the_arguments_they_name() -> None:
    calls: list[tuple[str, tuple[Any, ...]]] = []

    class First:
        @rlmetrics.hookimpl(tryfirst=True)
        def log_metrics(self, prefix: str) -> None:
            calls.append(("first", (prefix,)))

    class Middle:
        @rlmetrics.hookimpl
        def log_metrics(self, step: int, metrics: Any) -> None:
            calls.append(("middle", (step, dict(metrics))))

    class Last:
        @rlmetrics.hookimpl(trylast=True)
        def log_metrics(self) -> None:
            calls.append(("last", ()))

    for plugin, name in ((Last(), "last"), (Middle(), "middle"), (First(), "first")):
        register(plugin, name)
    rlmetrics.Logger(backends={}).log_metrics({"x": 1}, step=7, prefix="val")
    expected = [("first", ("val",)), ("middle", (7, {"x": 1})), ("last", ())]
    assert calls == expected
    # pluggy's own caller, asked directly, agrees on order and arguments.
    calls.clear()
    rlmetrics.plugins.get_plugins().pm.hook.log_metrics(metrics={"x": 1}, step=7, prefix="val")
    assert calls == expected


def test_a_wrapper_registered_after_the_first_call_runs_on_the_next() -> None:
    order: list[str] = []

    class Plain:
        @rlmetrics.hookimpl
        def log_metrics(self) -> None:
            order.append("plain")

    class Wrapper:
        @rlmetrics.hookimpl(wrapper=True)
        def log_metrics(self) -> Any:
            order.append("before")
            result = yield
            order.append("after")
            return result

    register(Plain(), "plain")
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"x": 1}, step=1)
    register(Wrapper(), "wrapper")
    logger.log_metrics({"x": 1}, step=2)
    assert order == ["plain", "before", "plain", "after"]
