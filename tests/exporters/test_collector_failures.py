"""An OTLP collector that is dead, comes back, restarts mid-run or refuses our data.

The training path must never wait on the network, no exception may reach the caller,
``handle.shutdown(timeout_s=T)`` must return within T, and each distinct failure is reported
once through ``warn_once``.

No assertion here depends on the machine's speed: where a call must not wait for an export,
the export is made to hang for :data:`EXPORT_HANG_S` (a collector that never answers, an
exporter timeout that long), so a call that waited would take a minute, and the bound allows
the call :data:`LOAD_SLACK_S` of scheduling delay on top of what the code promises — far more
than a loaded machine adds, far less than the wait it rules out.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

import rlmetrics
from rlmetrics.exporters import otlp
from rlmetrics.plugins import register
from rlmetrics.testing import BlackHole, CapturedLog, OtlpReceiver, points, single
from rlmetrics.testing.peers import flatten_trace_request

from ._peers import (
    COUNTER,
    GAUGE,
    GROUP,
    INTERVAL_S,
    UP_DOWN,
    WAIT_S,
    declare_test_series,
    record_test_series,
    wait_until,
)

# An exception escaping any thread (the reader's, the receiver's) fails the test.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

#: How long an export that the collector never answers hangs here: the exporter's timeout,
#: set for the tests whose failure would be a wait on that export.
EXPORT_HANG_S = 60.0
#: Scheduling delay allowed on top of a bound the code promises (a shutdown's), or for a call
#: that must not wait at all: generous for a loaded machine, a quarter of EXPORT_HANG_S.
LOAD_SLACK_S = 15.0
TIMEOUT_ENV = ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT")


def _failed(peer: OtlpReceiver, status: str) -> str:
    """The text of rlmetrics' report that an export to ``peer`` failed with ``status``."""
    return f"OTLP export to 127.0.0.1:{peer.port} failed ({status}"


@pytest.fixture
def default_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OTLP timeout in the environment: rlmetrics' own default applies."""
    for name in TIMEOUT_ENV:
        monkeypatch.delenv(name, raising=False)


def _start(endpoint: str, **kwargs: Any) -> rlmetrics.Telemetry:
    return rlmetrics.start(
        "failures-test",
        run_id=kwargs.pop("run_id", "run-failures"),
        exporters=("otlp",),
        otlp_endpoint=endpoint,
        export_interval_s=INTERVAL_S,
        **kwargs,
    )


class _Tee:
    """A family plugin: mirrors the ``tokens`` and ``step_time`` keys a loop logs."""

    @rlmetrics.hookimpl
    def log_metrics(self, metrics: dict[str, Any], step: int, prefix: str) -> None:
        if "tokens" in metrics:
            rlmetrics.record(GROUP, {"tokens": metrics["tokens"]}, {"gen_ai.token.type": "input"})
        if "step_time" in metrics:
            rlmetrics.record(GROUP, {"step_time": metrics["step_time"]}, {"rl.phase": "train"})


def _exporter_timeout(handle: rlmetrics.Telemetry) -> float:
    """The timeout the running OTLP exporter was built with (white box, for the record)."""
    return float(_exporter(handle)._timeout)


def _exporter(handle: rlmetrics.Telemetry) -> Any:
    """The running OTLP exporter (white box)."""
    return handle._built.exporters["otlp"].reader._exporter  # type: ignore[union-attr]


def test_default_otlp_timeout_only_when_the_environment_sets_none(
    monkeypatch: pytest.MonkeyPatch, default_timeout: None, dead_endpoint: OtlpReceiver
) -> None:
    assert otlp.otlp_timeout_s() == otlp.DEFAULT_OTLP_TIMEOUT_S
    with _start(dead_endpoint.endpoint) as handle:
        assert _exporter_timeout(handle) == otlp.DEFAULT_OTLP_TIMEOUT_S
        handle.shutdown(timeout_s=1)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "7")
    assert otlp.otlp_timeout_s() is None
    with _start(dead_endpoint.endpoint) as handle:
        assert _exporter_timeout(handle) == 7.0
        handle.shutdown(timeout_s=1)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "4")
    with _start(dead_endpoint.endpoint) as handle:
        assert _exporter_timeout(handle) == 4.0  # the signal-specific variable wins
        handle.shutdown(timeout_s=1)


@pytest.mark.parametrize("exporter", ["otlp", "otlp_http"])
@pytest.mark.parametrize("variable", TIMEOUT_ENV)
@pytest.mark.parametrize("value", ["abc", "-1", "nan", "0"])
def test_a_timeout_variable_that_is_no_timeout_names_itself(
    monkeypatch: pytest.MonkeyPatch,
    default_timeout: None,
    exporter: str,
    variable: str,
    value: str,
) -> None:
    """Before: the SDK's bare ``ValueError: could not convert string to float: 'abc'`` out
    of start(), naming no variable (and -1, NaN or 0 taken as a bound)."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(rlmetrics.ConfigurationError) as raised:
        rlmetrics.start(exporters=[exporter])
    assert f"{variable}={value!r} must be a positive number of seconds" in str(raised.value)
    assert rlmetrics.current() is None


#: The files TLS takes, for both signals or one (the OpenTelemetry specification's variables).
TLS_FILE_ENV = (
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_KEY",
    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
)


@pytest.mark.parametrize("exporter", ["otlp", "otlp_http"])
@pytest.mark.parametrize("variable", TLS_FILE_ENV)
def test_a_tls_file_variable_naming_no_file_names_itself(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, exporter: str, variable: str
) -> None:
    """Before: over gRPC the SDK logged a traceback ("Failed to read file") and went on with
    the system's roots, so every export to a collector with a private CA failed with a
    message naming the endpoint only; over HTTP each export failed naming nothing. A path
    that is a folder is no file either."""
    for path in (tmp_path / "ca.pem", tmp_path):
        monkeypatch.setenv(variable, str(path))
        with pytest.raises(rlmetrics.ConfigurationError) as raised:
            rlmetrics.start(exporters=[exporter], otlp_endpoint="https://127.0.0.1:9")
        message = str(raised.value)
        assert message.startswith(f"{variable}={str(path)!r} is no file that can be read"), message
        assert "fix the path or unset it" in message
        assert rlmetrics.current() is None


@pytest.mark.parametrize("exporter", ["otlp", "otlp_http"])
@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION"]
)
def test_a_compression_that_is_none_names_the_variable_and_the_choices(
    monkeypatch: pytest.MonkeyPatch, exporter: str, variable: str
) -> None:
    """Before: the SDK's ``InvalidCompressionValueException`` out of start() over gRPC,
    without the choices; over HTTP, silently no compression."""
    monkeypatch.setenv(variable, "zip")
    with pytest.raises(rlmetrics.ConfigurationError) as raised:
        rlmetrics.start(exporters=[exporter])
    # The gRPC exporter takes gzip only (it refuses "deflate" and the specification's "none").
    choices = "'gzip'" if exporter == "otlp" else "'gzip', 'deflate', 'none'"
    assert str(raised.value) == (
        f"{variable}='zip' is none of the compressions this OTLP exporter takes: {choices} "
        "(unset: none)"
    )
    assert rlmetrics.current() is None
    for taken in ("GZIP", "gzip"):  # as the SDK's exporters read it
        monkeypatch.setenv(variable, taken)
        rlmetrics.start(exporters=[exporter], otlp_endpoint="http://127.0.0.1:9").shutdown(
            timeout_s=1
        )


#: The SDK's own numeric variables start() reads, a value each that is none, and what the
#: refusal says it must be. Before: a bare ValueError naming no variable out of start() (-5,
#: -1, 0), or the SDK's traceback and its default (abc).
SDK_NUMBER_CASES = [
    ("OTEL_METRIC_EXPORT_INTERVAL", "-5", "a positive number of milliseconds"),
    ("OTEL_METRIC_EXPORT_INTERVAL", "abc", "a positive number of milliseconds"),
    ("OTEL_METRIC_EXPORT_TIMEOUT", "0", "a positive number of milliseconds"),
    ("OTEL_BSP_SCHEDULE_DELAY", "abc", "a positive integer of milliseconds"),
    ("OTEL_BSP_EXPORT_TIMEOUT", "-3", "a positive integer of milliseconds"),
    ("OTEL_BSP_MAX_QUEUE_SIZE", "-1", "a positive integer"),
    ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0", "a positive integer"),
    ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "abc", "an integer of 0 or more"),
    ("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "-2", "an integer of 0 or more"),
]


@pytest.mark.parametrize(("variable", "value", "what"), SDK_NUMBER_CASES)
def test_an_sdk_number_variable_that_is_none_names_itself(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, what: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(rlmetrics.ConfigurationError) as raised:
        rlmetrics.start(exporters=["otlp"], otlp_endpoint="http://127.0.0.1:9")
    assert str(raised.value) == (
        f"{variable}={value!r} must be {what}; unset it for the SDK's default"
    )
    assert rlmetrics.current() is None


def test_the_sdk_number_variables_that_are_numbers_are_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the SDK takes is taken: the interval is a float of milliseconds there."""
    for variable, value in (
        ("OTEL_METRIC_EXPORT_INTERVAL", "1500.5"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "4096"),
        ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "0"),
    ):
        monkeypatch.setenv(variable, value)
    handle = rlmetrics.start(exporters=["otlp"], otlp_endpoint="http://127.0.0.1:9")
    handle.shutdown(timeout_s=1)


def test_a_tls_file_that_exists_is_taken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The check refuses only what cannot be read: a file that is there starts (whether it
    is a good certificate is the TLS handshake's to say)."""
    certificate = tmp_path / "ca.pem"
    certificate.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(certificate))
    handle = rlmetrics.start(exporters=["otlp_http"], otlp_endpoint="https://127.0.0.1:9")
    handle.shutdown(timeout_s=1)


def test_log_metrics_never_waits_for_an_export_in_flight(
    monkeypatch: pytest.MonkeyPatch, blackhole: BlackHole
) -> None:
    """The calls a loop makes while an export hangs (a collector that accepts and never
    answers) all return while it still hangs: none waited for it. A call that did would take
    the export's whole minute; the bound leaves a loaded machine LOAD_SLACK_S per call."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", str(EXPORT_HANG_S))
    declare_test_series()
    handle = _start(blackhole.endpoint)
    register(_Tee(), "exporters-test-tee")
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"tokens": 10, "step_time": 0.5}, step=0, prefix="train")
    assert blackhole.connected.wait(WAIT_S), "no export reached the collector"
    exporter = _exporter(handle)
    latencies: list[float] = []
    for step in range(1, 201):
        started = time.perf_counter()
        logger.log_metrics({"tokens": 10, "step_time": 0.5}, step=step, prefix="train")
        latencies.append(time.perf_counter() - started)
    # The export the calls overlapped has not failed yet: it still hangs.
    assert exporter._rlmetrics_last_error is None
    print(f"log_metrics during a hanging export: max {max(latencies) * 1000:.2f} ms")
    assert max(latencies) < LOAD_SLACK_S
    started = time.monotonic()
    handle.shutdown(timeout_s=5)
    assert time.monotonic() - started < 5 + LOAD_SLACK_S


def test_a_dead_collector_is_reported_once_and_a_returning_one_gets_later_points(
    default_timeout: None, dead_endpoint: OtlpReceiver, rlmetrics_log: CapturedLog
) -> None:
    unavailable = _failed(dead_endpoint, "UNAVAILABLE")
    declare_test_series()
    handle = _start(dead_endpoint.endpoint)
    register(_Tee(), "exporters-test-tee")
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"tokens": 10, "step_time": 0.5}, step=0, prefix="train")
    rlmetrics_log.wait_for(unavailable)  # exports are failing now

    # Log steps while exports keep failing, until another failed export has come and gone.
    failures_before = len(rlmetrics_log.matching(unavailable))
    steps = 0
    deadline = time.monotonic() + 60
    while (
        len(rlmetrics_log.matching(unavailable)) < failures_before + 1
        and time.monotonic() < deadline
        and steps < 2000
    ):
        steps += 1
        logger.log_metrics({"tokens": 10, "step_time": 0.5}, step=steps, prefix="train")
        rlmetrics_log.wait_for_any(0.02)
    assert len(rlmetrics_log.matching(unavailable)) > failures_before, "no failed export?"
    # Reported once at WARNING, one line naming the condition and what to check (a dead
    # collector is no bug: no traceback on the user's stderr); the RPC error's traceback and
    # the repetitions went to DEBUG.
    (warning,) = rlmetrics_log.matching(unavailable, logging.WARNING)
    assert warning.exc_info is None
    assert "and that a collector listens there" in warning.getMessage()
    assert any(
        r.exc_info is not None and isinstance(r.exc_info[1], grpc.RpcError)
        for r in rlmetrics_log.matching(unavailable, logging.DEBUG)
    )

    # The collector comes back on the same address; what is recorded after it returned
    # arrives, and the cumulative counter carries every token logged while it was away.
    dead_endpoint.start()
    logger.log_metrics({"tokens": 10, "step_time": 42.0}, step=10_000, prefix="train")
    total = 10 * (steps + 2)
    dead_endpoint.wait_for(
        lambda r: (
            getattr(r.find(GAUGE, **{"rl.phase": "train"}), "value", None) == 42.0
            and getattr(r.find(COUNTER, **{"gen_ai.token.type": "input"}), "value", None) == total
        ),
        what="the step logged after the collector came back",
    )
    started = time.monotonic()
    handle.shutdown(timeout_s=5)
    assert time.monotonic() - started < 5 + LOAD_SLACK_S


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({}, id="rlmetrics-default-timeout"),
        pytest.param({"OTEL_EXPORTER_OTLP_TIMEOUT": str(EXPORT_HANG_S)}, id="long"),
        pytest.param({"OTEL_EXPORTER_OTLP_METRICS_TIMEOUT": "0.5"}, id="short-0.5s"),
    ],
)
@pytest.mark.parametrize("bound_s", [1.0, 3.0])
def test_shutdown_returns_within_its_bound_with_a_dead_collector(
    env: dict[str, str],
    bound_s: float,
    default_timeout: None,
    monkeypatch: pytest.MonkeyPatch,
    dead_endpoint: OtlpReceiver,
    rlmetrics_log: CapturedLog,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    declare_test_series()
    handle = _start(dead_endpoint.endpoint)
    record_test_series()
    exporter = _exporter(handle)
    # An export is under way and has met the dead collector (it is retrying or giving up).
    wait_until(lambda: exporter._rlmetrics_last_error is not None, what="a failed attempt")
    started = time.monotonic()
    handle.shutdown(timeout_s=bound_s)
    elapsed = time.monotonic() - started
    print(f"shutdown(timeout_s={bound_s}) with a dead collector, env {env}: {elapsed:.2f} s")
    # With the long exporter timeout, a shutdown that did not keep its bound would wait out
    # the exporter's retries (a minute).
    assert elapsed < bound_s + LOAD_SLACK_S
    assert not handle.exporting
    handle.shutdown(timeout_s=bound_s)  # idempotent, and immediate the second time
    assert time.monotonic() - started < bound_s + LOAD_SLACK_S
    rlmetrics.record(GROUP, {"tokens": 1}, {"gen_ai.token.type": "input"})  # a no-op now


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({}, id="rlmetrics-default-timeout"),
        pytest.param({"OTEL_EXPORTER_OTLP_TIMEOUT": str(EXPORT_HANG_S)}, id="long"),
    ],
)
def test_shutdown_bound_holds_when_the_collector_never_answers(
    env: dict[str, str],
    default_timeout: None,
    monkeypatch: pytest.MonkeyPatch,
    blackhole: BlackHole,
) -> None:
    """The worst case: every RPC hangs until the exporter's deadline, which no interrupt
    shortens, so only the handle's own bound ends shutdown."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    declare_test_series()
    handle = _start(blackhole.endpoint)
    record_test_series()
    assert blackhole.connected.wait(WAIT_S), "the exporter never connected"
    started = time.monotonic()
    handle.shutdown(timeout_s=1.0)
    elapsed = time.monotonic() - started
    print(f"shutdown(timeout_s=1.0), collector never answers, env {env}: {elapsed:.2f} s")
    # With the long exporter timeout, an unbounded shutdown would hang for EXPORT_HANG_S.
    assert elapsed < 1.0 + LOAD_SLACK_S


def test_shutdown_at_its_default_bound_when_the_collector_never_answers(
    monkeypatch: pytest.MonkeyPatch, blackhole: BlackHole
) -> None:
    """The default bound (5 s) against an export that would hang a minute."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", str(EXPORT_HANG_S))
    declare_test_series()
    handle = _start(blackhole.endpoint)
    record_test_series()
    assert blackhole.connected.wait(WAIT_S), "the exporter never connected"
    started = time.monotonic()
    handle.shutdown()
    elapsed = time.monotonic() - started
    print(f"shutdown() (default bound), collector never answers: {elapsed:.2f} s")
    assert elapsed < 5.0 + LOAD_SLACK_S


def test_receiver_restart_mid_run(
    default_timeout: None, otlp_receiver: OtlpReceiver, rlmetrics_log: CapturedLog
) -> None:
    unavailable = _failed(otlp_receiver, "UNAVAILABLE")
    declare_test_series()
    with _start(otlp_receiver.endpoint, run_id="run-restart") as handle:
        rlmetrics.record(GROUP, {"in_flight": 1})
        otlp_receiver.wait_for(lambda r: getattr(r.find(UP_DOWN), "value", None) == 1)

        otlp_receiver.stop()
        rlmetrics.record(GROUP, {"in_flight": 1})  # recorded while the receiver is down
        rlmetrics_log.wait_for(unavailable)
        received_before = len(otlp_receiver.requests)

        otlp_receiver.start()  # same port
        rlmetrics.record(GROUP, {"in_flight": 1})
        otlp_receiver.wait_for(
            lambda r: (
                len(r.requests) > received_before and getattr(r.find(UP_DOWN), "value", None) == 3
            ),
            what="the restarted receiver to get the cumulative value",
        )
        handle.force_flush(timeout_s=2)
    assert len(rlmetrics_log.matching(unavailable, logging.WARNING)) == 1
    assert {p.resource["rlmetrics.run.id"] for p in otlp_receiver.points()} == {"run-restart"}


def test_receiver_that_answers_with_an_error(
    default_timeout: None,
    otlp_receiver: OtlpReceiver,
    rlmetrics_log: CapturedLog,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    rejected = _failed(otlp_receiver, "INVALID_ARGUMENT")
    otlp_receiver.reject_with = grpc.StatusCode.INVALID_ARGUMENT
    declare_test_series()
    with _start(otlp_receiver.endpoint) as handle:
        for _ in range(3):
            record_test_series()  # never raises
        otlp_receiver.wait_for(lambda r: r.rejected >= 4, what="four rejected exports")
        rlmetrics_log.wait_for(rejected, count=3)
        warnings = rlmetrics_log.matching(rejected, logging.WARNING)
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "rlmetrics test receiver rejects this request" in warnings[0].getMessage()
        assert rlmetrics_log.matching(rejected, logging.DEBUG)
        # Not retryable: one RPC per export, not a retry storm.
        assert otlp_receiver.rejected <= len(rlmetrics_log.matching(rejected)) + 1

        otlp_receiver.reject_with = None  # the collector accepts again
        otlp_receiver.wait_for(
            lambda r: (
                getattr(r.find(COUNTER, **{"gen_ai.token.type": "input"}), "value", None) == 300
            ),
            what="the accepted export with every recorded token",
        )
        handle.shutdown(timeout_s=2)
    assert not [r for r in caplog.records if "Exception while exporting" in r.getMessage()]


def test_an_exporter_that_raises_is_reported_once_and_contained(
    monkeypatch: pytest.MonkeyPatch,
    otlp_receiver: OtlpReceiver,
    rlmetrics_log: CapturedLog,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

    def broken(self: Any, data: Any) -> Any:
        raise RuntimeError("translation exploded")

    monkeypatch.setattr(OTLPMetricExporter, "_translate_data", broken)
    caplog.set_level(logging.DEBUG)
    declare_test_series()
    with _start(otlp_receiver.endpoint) as handle:
        record_test_series()
        rlmetrics_log.wait_for("translation exploded", count=2)
        handle.shutdown(timeout_s=2)
    warnings = rlmetrics_log.matching("translation exploded", logging.WARNING)
    assert len(warnings) == 1
    assert "RuntimeError" in warnings[0].getMessage()
    assert warnings[0].exc_info is not None  # the first report carries the traceback
    assert not [r for r in caplog.records if "Exception while exporting" in r.getMessage()]
    assert otlp_receiver.requests == []


QUICKSTART = """
import sys
import threading
import time

import rlmetrics

telemetry = rlmetrics.start(
    service_name="grpo", exporters=["otlp"], otlp_endpoint=sys.argv[1], export_interval_s=0.2
)
logger = rlmetrics.Logger(backends={"jsonl": {"path": sys.argv[2]}})
logger.log_setup_timing({"policy_init_time_s": 12.5, "total_setup_time_s": 44.0})
for step in range(1, 4):
    logger.log_metrics({"reward": 0.5, "loss": 0.1, "kl_penalty": 0.01}, step=step, prefix="train")
    time.sleep(0.5)  # a step's work: the reader exports (and fails) meanwhile
logger.finish()
telemetry.shutdown(timeout_s=5)
"""


def test_a_dead_collector_is_one_warning_line_as_the_docs_say(tmp_path: Any) -> None:
    """The README's quickstart with no collector: troubleshooting.md promises one WARNING line
    on the rlmetrics logger. It printed the SDK's retry lines and errors too (and once, a
    gRPC traceback), which read like a crash; those are now at DEBUG, while the export is
    rlmetrics' own. An exporter of the user's own keeps the SDK's lines."""
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:  # a port nothing listens on once closed: a dead collector
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-c", QUICKSTART, f"http://127.0.0.1:{port}", str(tmp_path / "m.jsonl")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"rlmetrics: OTLP export to 127.0.0.1:{port} failed (UNAVAILABLE")


def test_the_sdks_lines_about_other_exports_pass_as_they_are(caplog: Any) -> None:
    otlp._exporter_class()  # installs the filter, as building the exporter does
    sdk = logging.getLogger(otlp.SDK_EXPORTER_LOGGER)
    with caplog.at_level(logging.DEBUG):
        sdk.warning("Transient error of an exporter the user built")
        otlp._exporting.active = True
        try:
            sdk.warning("Transient error of rlmetrics' own export")
        finally:
            otlp._exporting.active = False
    levels = {(r.name, r.levelno, r.getMessage()) for r in caplog.records}
    assert (
        otlp.SDK_EXPORTER_LOGGER,
        logging.WARNING,
        "Transient error of an exporter the user built",
    ) in levels
    assert (
        otlp.SDK_LINES_LOGGER,
        logging.DEBUG,
        "Transient error of rlmetrics' own export",
    ) in levels
    assert not any(
        r.levelno >= logging.WARNING and "own export" in r.getMessage() for r in caplog.records
    )


#: A value of every other SDK variable start() refuses, and the start of what it says.
SDK_CHOICE_CASES = [
    ("OTEL_METRICS_EXEMPLAR_FILTER", "always", "OTEL_METRICS_EXEMPLAR_FILTER='always' is none"),
    ("OTEL_EXPORTER_OTLP_COMPRESSION", "zip", "OTEL_EXPORTER_OTLP_COMPRESSION='zip' is none"),
    ("OTEL_TRACES_SAMPLER", "always", "OTEL_TRACES_SAMPLER='always' is none of the samplers"),
    (
        "OTEL_EXPORTER_OTLP_METRICS_INSECURE",
        "1",
        "OTEL_EXPORTER_OTLP_METRICS_INSECURE='1' is neither true nor false",
    ),
    ("OTEL_EXPORTER_OTLP_INSECURE", "yes", "OTEL_EXPORTER_OTLP_INSECURE='yes' is neither"),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "abc", "OTEL_EXPORTER_OTLP_TIMEOUT='abc' must be a positive"),
    (
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
        "deltaa",
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE='deltaa' is none of",
    ),
    (
        "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION",
        "expo",
        "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION='expo' is none of",
    ),
    (
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "http/json",
        "OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not an OTLP protocol",
    ),
    (
        "OTEL_RESOURCE_ATTRIBUTES",
        "rl.algorithm=grpo,rl.system",
        "OTEL_RESOURCE_ATTRIBUTES holds 'rl.system', which is no key=value pair",
    ),
    (
        "OTEL_EXPORTER_OTLP_HEADERS",
        "Authorization: Bearer abc",
        "OTEL_EXPORTER_OTLP_HEADERS holds 'Authorization: Bearer abc', which is no name=value",
    ),
    (
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
        "/nonexistent/ca.pem",
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE='/nonexistent/ca.pem' is no file",
    ),
]


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        *(
            (variable, value, f"{variable}={value!r} must be {what}")
            for variable, value, what in (SDK_NUMBER_CASES)
        ),
        *SDK_CHOICE_CASES,
    ],
)
def test_the_config_command_refuses_what_start_refuses_of_the_sdk_variables(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    said: str,
) -> None:
    """`rlmetrics config` is run before a long job to learn what start() would refuse.
    Before: each of these passed it (exit 0), and the job then stopped at start()."""
    from rlmetrics.cli import main

    monkeypatch.delenv("RLMETRICS_CONFIG", raising=False)
    monkeypatch.setenv(variable, value)
    assert main(["config"]) == 2
    assert said in capsys.readouterr().err
    with pytest.raises(rlmetrics.ConfigurationError, match=re.escape(said)):
        rlmetrics.start(exporters=["otlp"], otlp_endpoint="http://127.0.0.1:9")
    assert rlmetrics.current() is None


@pytest.mark.parametrize("argument", ["2", "-0.1", "half", "nan"])
def test_a_sampling_ratio_that_is_none_names_itself(
    monkeypatch: pytest.MonkeyPatch, argument: str
) -> None:
    """Before: 2 or -0.1 raised the SDK's bare "Probability must be in range [0.0, 1.0]." out
    of start(); "half" sampled every trace after a line of the SDK's."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", argument)
    with pytest.raises(rlmetrics.ConfigurationError) as raised:
        rlmetrics.start(exporters=["otlp"], otlp_endpoint="http://127.0.0.1:9")
    assert str(raised.value) == (
        f"OTEL_TRACES_SAMPLER_ARG={argument!r} must be a ratio from 0 to 1 (the share of "
        "traces parentbased_traceidratio samples); unset it to sample every trace"
    )
    assert rlmetrics.current() is None


def test_the_samplers_the_sdk_knows_are_taken_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "TraceIdRatio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    handle = rlmetrics.start(exporters=["otlp"], otlp_endpoint="http://127.0.0.1:9")
    handle.shutdown(timeout_s=1)


def test_an_export_larger_than_the_collector_takes_names_the_limit_and_the_batch_size(
    default_timeout: None, otlp_receiver: OtlpReceiver, rlmetrics_log: CapturedLog
) -> None:
    """A collector refuses a request above its size limit (max_recv_msg_size_mib, 4 MiB
    unless set) with RESOURCE_EXHAUSTED: a batch of trajectory spans carrying their text goes
    over it. The warning said "the collector refuses these requests: its own log says why",
    which it does not; it now names the limit, and for spans the batch size that keeps an
    export under it."""
    otlp_receiver.stop()
    otlp_receiver.max_receive_bytes = 1000
    otlp_receiver.start()
    declare_test_series()
    with _start(otlp_receiver.endpoint) as handle:
        record_test_series()
        tracer = handle.tracer_provider.get_tracer("big")  # type: ignore[union-attr]
        for n in range(40):
            tracer.start_span(f"turn {n} " + "text " * 20).end()
        handle.tracer_provider.force_flush()  # type: ignore[union-attr]
        metrics = _failed(otlp_receiver, "RESOURCE_EXHAUSTED")
        spans = f"OTLP trace export to 127.0.0.1:{otlp_receiver.port} failed (RESOURCE_EXHAUSTED"
        rlmetrics_log.wait_for(metrics)
        rlmetrics_log.wait_for(spans)
    (said_metrics,) = [r.getMessage() for r in rlmetrics_log.matching(metrics, logging.WARNING)]
    (said_spans,) = [r.getMessage() for r in rlmetrics_log.matching(spans, logging.WARNING)]
    for said in (said_metrics, said_spans):
        assert otlp.REFUSAL_ADVICE not in said, said
        assert "larger than the collector takes" in said and "max_recv_msg_size_mib" in said
    assert "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" in said_spans
    assert "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" not in said_metrics


def _the_first_failure_said(peer: OtlpReceiver, log: CapturedLog, status: str) -> str:
    """The one warning that a metrics export to ``peer`` failed (with ``status``, when given),
    once the test series were recorded and sent there."""
    declare_test_series()
    with _start(peer.endpoint, traces=False):
        record_test_series()
        failed = f"OTLP export to 127.0.0.1:{peer.port} failed ({status}"
        log.wait_for(failed)
        (said,) = [r.getMessage() for r in log.matching(failed, logging.WARNING)]
        if isinstance(peer, _RefusesThenHangs):
            peer.release.set()  # the hung export ends before shutdown waits on it
    return said


class _RefusesThenHangs(OtlpReceiver):
    """A collector that refuses the first request (``status``, which the exporter retries)
    and answers no later one until :attr:`release` is set."""

    def __init__(self, status: grpc.StatusCode) -> None:
        super().__init__()
        self.status = status
        self.calls = 0
        self.release = threading.Event()

    def _handle(self, request: Any, context: Any, into: list[Any] | None = None) -> None:
        with self._cond:
            self.calls += 1
            first = self.calls == 1
            self._cond.notify_all()
        if first:
            context.abort(self.status, "collector overloaded, retry later")
        self.release.wait(EXPORT_HANG_S)


@pytest.mark.parametrize(
    "status", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED]
)
def test_a_retry_that_runs_out_of_time_does_not_hide_why_the_export_was_retried(
    default_timeout: None, rlmetrics_log: CapturedLog, status: grpc.StatusCode
) -> None:
    """The exporter retries a refused export until its timeout: the last attempt, given what
    was left of it, ended DEADLINE_EXCEEDED, and the one warning said the collector "did not
    answer within the export timeout" (raise it), not that it refused the export."""
    peer = _RefusesThenHangs(status).start()
    try:
        said = _the_first_failure_said(peer, rlmetrics_log, "")
        assert peer.calls >= 2  # refused, then retried into the silence
        assert f"failed ({status.name}: collector overloaded" in said, said
        assert "DEADLINE_EXCEEDED" not in said, said
    finally:
        peer.release.set()
        peer.stop()


@pytest.mark.parametrize("preference", ["DELTA", "lowmemory"])
def test_with_delta_counters_a_failed_export_is_not_said_to_be_sent_again(
    default_timeout: None,
    dead_endpoint: OtlpReceiver,
    rlmetrics_log: CapturedLog,
    monkeypatch: pytest.MonkeyPatch,
    preference: str,
) -> None:
    """With delta temporality a failed export's counts are lost for good (the next export
    carries only what was recorded since); the warning said "cumulative totals are sent again
    by the next export that succeeds", which only cumulative points are."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", preference)
    unavailable = _failed(dead_endpoint, "UNAVAILABLE")
    declare_test_series()
    with _start(dead_endpoint.endpoint, traces=False):
        rlmetrics.record(GROUP, {"tokens": 5}, attributes={"gen_ai.token.type": "input"})
        rlmetrics_log.wait_for(unavailable)
        (said,) = [r.getMessage() for r in rlmetrics_log.matching(unavailable, logging.WARNING)]
    assert "cumulative totals are sent again" not in said, said
    assert "lost for good" in said and "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE" in said


class _Overloaded(OtlpReceiver):
    """A collector that refuses every request with ``status``, as its memory limiter does
    under load, asking (``retry_after_s``) to be sent the data again later."""

    def __init__(self, status: grpc.StatusCode, retry_after_s: int | None) -> None:
        super().__init__()
        self.status, self.retry_after_s = status, retry_after_s

    def _handle(self, request: Any, context: Any, into: list[Any] | None = None) -> None:
        from google.protobuf.duration_pb2 import Duration
        from google.rpc.error_details_pb2 import RetryInfo

        with self._cond:
            self.rejected += 1
            self._cond.notify_all()
        if self.retry_after_s is not None:
            delay = RetryInfo(retry_delay=Duration(seconds=self.retry_after_s))
            context.set_trailing_metadata(
                (("google.rpc.retryinfo-bin", delay.SerializeToString()),)
            )
        context.abort(self.status, "data refused due to high memory usage")


@pytest.mark.parametrize(
    ("status", "retry_after_s"),
    [
        (grpc.StatusCode.UNAVAILABLE, 30),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, 30),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, None),
    ],
)
def test_a_collector_that_is_overloaded_is_said_to_be_so_not_missing_or_refusing(
    default_timeout: None,
    rlmetrics_log: CapturedLog,
    status: grpc.StatusCode,
    retry_after_s: int | None,
) -> None:
    """A collector's memory limiter refuses data under load, asking for it again later: the
    warning said "check the endpoint and that a collector listens there" (UNAVAILABLE) or
    "the collector refuses these requests: its own log says why" (RESOURCE_EXHAUSTED), though
    it listens, and nothing here is to be changed. It now says the collector is overloaded,
    and when it asked to be sent the data again."""
    peer = _Overloaded(status, retry_after_s).start()
    try:
        said = _the_first_failure_said(peer, rlmetrics_log, status.name)
    finally:
        peer.stop()
    assert "a collector listens there" not in said and otlp.REFUSAL_ADVICE not in said, said
    assert "overloaded" in said, said
    assert ("retry after 30 s" in said) == (retry_after_s is not None), said


def test_a_span_queue_smaller_than_the_default_batch_sends_batches_that_fit_it(
    monkeypatch: pytest.MonkeyPatch, otlp_receiver: OtlpReceiver
) -> None:
    """OTEL_BSP_MAX_QUEUE_SIZE=100 alone (spans kept in memory, bounded lower) made start()
    raise the SDK's bare "max_export_batch_size must be less than or equal to max_queue_size"
    (the batch's own default is 512): a batch now takes at most the queue."""
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100")
    monkeypatch.delenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", raising=False)
    with _start(otlp_receiver.endpoint) as handle:
        tracer = handle.tracer_provider.get_tracer("small queue")  # type: ignore[union-attr]
        for n in range(60):
            tracer.start_span(f"span {n}").end()
        handle.tracer_provider.force_flush()  # type: ignore[union-attr]
        otlp_receiver.wait_for(lambda r: len(r.spans()) == 60, what="the 60 spans")


@pytest.mark.parametrize(
    ("env", "said"),
    [
        (
            {"OTEL_BSP_MAX_QUEUE_SIZE": "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "200"},
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE='200' is more spans than the span queue holds "
            "(OTEL_BSP_MAX_QUEUE_SIZE, 100)",
        ),
        (
            {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4096"},
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE='4096' is more spans than the span queue holds "
            "(OTEL_BSP_MAX_QUEUE_SIZE, 2048 unless set)",
        ),
    ],
)
def test_a_span_batch_larger_than_the_queue_names_both_variables(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], said: str
) -> None:
    monkeypatch.delenv("OTEL_BSP_MAX_QUEUE_SIZE", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(rlmetrics.ConfigurationError) as raised:
        rlmetrics.start(exporters=["otlp"], otlp_endpoint="http://127.0.0.1:9")
    assert said in str(raised.value)
    assert rlmetrics.current() is None


def test_a_collector_that_comes_back_overloaded_is_said_though_its_absence_was(
    default_timeout: None, rlmetrics_log: CapturedLog
) -> None:
    """Down at start (UNAVAILABLE, connection refused: said), then back but overloaded
    (UNAVAILABLE with a retry delay): the second condition shared the first's status, so it
    went to DEBUG and the run's one warning said to check an endpoint that was right."""
    peer = _Overloaded(grpc.StatusCode.UNAVAILABLE, 30).start()
    peer.stop()
    try:
        declare_test_series()
        with _start(peer.endpoint, traces=False) as handle:
            record_test_series()
            failed = _failed(peer, "UNAVAILABLE")
            rlmetrics_log.wait_for(failed)
            peer.start()
            handle.force_flush(timeout_s=5)
            peer.wait_for(lambda r: r.rejected >= 1, what="a refused export")
            rlmetrics_log.wait_for("asked to retry after 30 s")
        said = [r.getMessage() for r in rlmetrics_log.matching(failed, logging.WARNING)]
        assert len([s for s in said if "a collector listens there" in s]) == 1, said
        assert len([s for s in said if "asked to retry after 30 s" in s]) == 1, said
    finally:
        peer.stop()


def test_points_and_spans_a_collector_took_but_rejected_are_said(
    default_timeout: None, otlp_receiver: OtlpReceiver, rlmetrics_log: CapturedLog
) -> None:
    """A collector (or the backend behind it) answers an export it partly refused as a
    success with OTLP's partial_success: the SDK reads nothing of it, so those points and
    spans were lost without a word. Each signal's rejections are now said once."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    otlp_receiver.partly_rejects = (3, "out of order samples")
    declare_test_series()
    reader = InMemoryMetricReader()
    with _start(otlp_receiver.endpoint, readers=[reader]) as handle:
        record_test_series()
        tracer = handle.tracer_provider.get_tracer("t")  # type: ignore[union-attr]
        for n in range(5):
            tracer.start_span(f"s{n}").end()
        handle.force_flush(timeout_s=5)
        for what in ("points", "spans"):
            rlmetrics_log.wait_for(f"but rejected 3 {what} of it (out of order samples)")
        # The spans it rejected are lost as a failed export's are, and counted so: 3 of
        # each request (of fewer, all).
        handle.force_flush(timeout_s=5)  # each export has returned, and been counted
        rejected = sum(min(3, len(flatten_trace_request(r))) for r in otlp_receiver.trace_requests)
        lost = single(
            points(reader),
            "rlmetrics.exporter.spans.dropped",
            **{"rlmetrics.exporter": "otlp", "rlmetrics.drop.reason": "export_failed"},
        )
        assert lost.value == rejected >= 3
    for what in ("points", "spans"):
        said = rlmetrics_log.matching(f"rejected 3 {what}", logging.WARNING)
        assert len(said) == 1, said
        assert f"127.0.0.1:{otlp_receiver.port}" in said[0].getMessage()
