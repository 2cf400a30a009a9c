"""The in-process stall rule's thread runs exactly while telemetry exports (steps reach the
liveness state only then; without a reader every silence would look like a stall), and a
stall is said once while it lasts. Its alerts end to end: tests/test_hookspecs.py
(test_hook_on_alert) and rlmetrics-trackio's tests."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import rlmetrics
from rlmetrics import liveness, stall_watch


def _running() -> bool:
    watch = stall_watch._watch
    return watch is not None and watch._thread is not None and watch._thread.is_alive()


def test_the_watch_runs_while_telemetry_exports_and_only_then() -> None:
    with rlmetrics.start():  # no reader: not exporting
        assert not _running()
    with rlmetrics.start(readers=[InMemoryMetricReader()]):
        assert _running()
    assert not _running()


def test_a_stall_before_the_first_step_fires_once(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [50.0]
    monkeypatch.setattr(liveness, "clock", lambda: now[0])
    monkeypatch.setattr(stall_watch, "CHECK_INTERVAL_S", 3600.0)
    with rlmetrics.start(readers=[InMemoryMetricReader()]):
        watch = stall_watch.StallWatch()
        now[0] += 600.5  # the bound before a median interval is known is 600 s
        fired = watch.check()
        assert fired is not None and fired.step is None and "telemetry started" in fired.summary
        now[0] += 100.0
        assert watch.check() is None
