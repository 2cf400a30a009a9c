"""The in-process stall rule's thread runs only while telemetry exports (steps reach the
liveness state only then; without a reader every silence would look like a stall) and
something listens for its alerts (an ``on_alert`` implementation, a Logger's backend that
takes alerts): a process where nothing would hear it runs no thread (issue 37). A stall is
said once while it lasts. Its alerts end to end: tests/test_hookspecs.py (test_hook_on_alert)
and rlmetrics-trackio's tests (the Trackio backend as the listener)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import rlmetrics
from rlmetrics import liveness, stall_watch
from rlmetrics.plugins import register


def _running() -> bool:
    return any(t.name == "rlmetrics-stall-watch" for t in threading.enumerate())


class _Listens:
    @rlmetrics.hookimpl
    def on_alert(self, alert: Any) -> None:
        pass


class _TakesAlerts:
    inline = True

    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        pass

    def log_alert(self, alert: Any) -> None:
        pass

    def finish(self) -> None:
        pass


class _OffersAlertBackend:
    @rlmetrics.hookimpl
    def register_backends(self, register: Any) -> None:
        register("takes-alerts", _TakesAlerts)


def test_an_exporting_process_with_nothing_listening_runs_no_watch_thread() -> None:
    with rlmetrics.start(readers=[InMemoryMetricReader()]):
        logger = rlmetrics.Logger(backends={})
        logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
        assert not _running()
        logger.finish()


def test_the_watch_runs_while_telemetry_exports_and_a_plugin_listens() -> None:
    assert register(_Listens(), "listens")
    with rlmetrics.start():  # no reader: not exporting
        assert not _running()
    with rlmetrics.start(readers=[InMemoryMetricReader()]):
        assert _running()
    assert not _running()


def test_a_plugin_registered_on_alert_while_exporting_starts_the_watch() -> None:
    with rlmetrics.start(readers=[InMemoryMetricReader()]):
        assert not _running()
        assert register(_Listens(), "listens-later")
        assert _running()
    assert not _running()


def test_a_logger_whose_backend_takes_alerts_starts_the_watch() -> None:
    assert register(_OffersAlertBackend(), "offers-alert-backend")
    with rlmetrics.start(readers=[InMemoryMetricReader()]):
        rlmetrics.Logger(backends={}).finish()  # takes no alerts: nothing listens yet
        assert not _running()
        logger = rlmetrics.Logger(backends={"takes-alerts": {}})
        assert _running()
        logger.finish()
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


def test_a_stall_bound_variable_that_is_no_number_is_said_not_silently_replaced(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: with no Prometheus exporter to refuse it, RLMETRICS_STALL_AFTER_S="1800s" was
    dropped unsaid and the watch fired after the default 600 s, where the run had asked for
    1800. The default still serves (the watch must not stop), and the variable is named."""
    import logging

    monkeypatch.setenv("RLMETRICS_STALL_AFTER_S", "1800s")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        rule = stall_watch._current_rule()
    assert rule == liveness.StallRule()
    assert "RLMETRICS_STALL_AFTER_S" in caplog.text and "600" in caplog.text


def test_a_prometheus_exporter_that_cannot_listen_leaves_the_stall_rule_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the exporter set the process's stall rule before it bound its port, so a
    start() refused for a taken port left its rule to the in-process RLStepStalled alert of
    every later telemetry of the process (and to the next test: CI run 15's one failure, an
    ordering where RLMETRICS_STALL_AFTER_S was never read again)."""
    import socket

    from rlmetrics.telemetry import TelemetryError

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(TelemetryError, match="cannot listen"):
            rlmetrics.start(
                exporters={
                    "prometheus": {"host": "127.0.0.1", "port": port, "stall_after_s": 1234.0}
                }
            )
    monkeypatch.setenv("RLMETRICS_STALL_AFTER_S", "77")
    assert stall_watch._current_rule().bound_s == 77.0


def test_the_rule_an_exporter_configured_is_process_state_the_next_test_does_not_see(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rlmetrics.testing import reset_process_state

    stall_watch.configure_rule(liveness.StallRule(bound_s=1234.0))
    reset_process_state()
    monkeypatch.setenv("RLMETRICS_STALL_AFTER_S", "77")
    assert stall_watch._current_rule().bound_s == 77.0
