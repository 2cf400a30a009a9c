"""OTLP over HTTP/protobuf against a real HTTP receiver on 127.0.0.1: chosen by
``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`` (the specification's variable) or by name, every
kind and the spans arrive; a dead or black-holed endpoint is reported once and bounded at
shutdown."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from hypothesis import example, given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics.exporters.otlp import dropped_headers
from rlmetrics.exporters.otlp_http import _reporting, _session_class, failure_advice
from rlmetrics.testing import BlackHole, CapturedLog, OtlpHttpReceiver, OtlpReceiver

from ._peers import (
    COUNTER,
    GAUGE,
    HISTOGRAM,
    INTERVAL_S,
    UP_DOWN,
    certificate_for_localhost,
    declare_test_series,
    record_test_series,
)

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

PROTOCOL_ENV = (
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
)
TIMEOUT_ENV = ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT")
#: Scheduling delay allowed on top of shutdown's bound (see test_collector_failures).
LOAD_SLACK_S = 15.0


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROTOCOL_ENV + TIMEOUT_ENV:
        monkeypatch.delenv(name, raising=False)


def _serving(peer: OtlpHttpReceiver) -> Iterator[OtlpHttpReceiver]:
    """``peer``, started, until the test's telemetry has stopped (or it would wait on a
    stopped peer)."""
    peer.start()
    try:
        yield peer
    finally:
        handle = rlmetrics.current()
        if handle is not None:
            handle.shutdown(timeout_s=2)
        peer.stop()


@pytest.fixture
def receiver() -> Iterator[OtlpHttpReceiver]:
    yield from _serving(OtlpHttpReceiver())


def _all_arrived(receiver: OtlpHttpReceiver) -> bool:
    hist = receiver.find(HISTOGRAM, worker="w0")
    return (
        getattr(receiver.find(GAUGE, **{"rl.phase": "train"}), "value", None) == 1.5
        and getattr(receiver.find(COUNTER, **{"gen_ai.token.type": "output"}), "value", None) == 40
        and getattr(receiver.find(UP_DOWN), "value", None) == 3
        and hist is not None
        and hist.count == 4
    )


def _start(receiver_endpoint: str, chosen_by: str, **kwargs: object) -> rlmetrics.Telemetry:
    """Telemetry exporting over OTLP/HTTP, chosen the way ``chosen_by`` says: the protocol
    variable with ``otlp_endpoint``, the exporter's name with its ``endpoint`` option, or its
    name with ``otlp_endpoint`` (the docs' "otlp_endpoint (or the otlp_http exporter's
    endpoint)")."""
    exporters: object = {
        "protocol-variable": ("otlp",),
        "name": {"otlp_http": {"endpoint": receiver_endpoint}},
        "name-and-otlp-endpoint": ("otlp_http",),
    }[chosen_by]
    return rlmetrics.start(
        "otlp-http-test",
        run_id="run-otlp-http",
        exporters=exporters,  # type: ignore[arg-type]
        otlp_endpoint=None if chosen_by == "name" else receiver_endpoint,
        export_interval_s=INTERVAL_S,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("chosen_by", ["protocol-variable", "name", "name-and-otlp-endpoint"])
def test_metrics_and_spans_arrive_over_http(
    receiver: OtlpHttpReceiver, chosen_by: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if chosen_by == "protocol-variable":
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    declare_test_series()
    with _start(receiver.endpoint, chosen_by):
        record_test_series()
        with rlmetrics.run(), rlmetrics.step(7), rlmetrics.phase("idle/refit_bubble"):
            pass
        receiver.wait_for(_all_arrived, what="every recorded value")
        spans = receiver.wait_for(
            lambda r: (found := r.spans()) and len(found) == 3 and found, what="three spans"
        )
    resource = {k: v for attributes, _ in receiver.resources() for k, v in attributes.items()}
    assert resource["rlmetrics.run.id"] == "run-otlp-http"
    by_id = {span.span_id: span for span in spans}
    phase = next(span for span in spans if span.name == "rl.idle.refit_bubble")
    assert by_id[phase.parent_id].name == "rl.step"  # type: ignore[index]


@pytest.mark.parametrize("peer", ["dead", "black-hole"])
def test_a_dead_or_silent_endpoint_is_bounded_at_shutdown_and_said_once(
    peer: str, rlmetrics_log: CapturedLog
) -> None:
    if peer == "dead":
        dead = OtlpHttpReceiver().start()
        dead.stop()
        endpoint, closer = dead.endpoint, dead.stop
    else:
        hole = BlackHole()
        endpoint, closer = hole.endpoint, hole.close
    try:
        declare_test_series()
        handle = _start(endpoint, "name")
        record_test_series()
        with rlmetrics.run(), rlmetrics.step(1), rlmetrics.phase("idle/refit_bubble"):
            pass
        # This endpoint's failure: a black hole of an earlier test, closed while its export
        # was still waiting, may fail (past its shutdown, at DEBUG) while this one starts.
        this_endpoint = f"OTLP/HTTP metrics export to {endpoint}"
        if peer == "dead":
            rlmetrics_log.wait_for(this_endpoint)
        started = time.monotonic()
        handle.shutdown(timeout_s=1.0)
        elapsed = time.monotonic() - started
        print(f"shutdown(timeout_s=1.0), {peer} OTLP/HTTP endpoint: {elapsed:.2f} s")
        assert elapsed < 1.0 + LOAD_SLACK_S
        assert not handle.exporting
    finally:
        closer()
    said = rlmetrics_log.matching(this_endpoint, level=logging.WARNING)
    assert len(said) <= 1 and (peer != "dead" or len(said) == 1)


def test_a_refusing_receiver_is_one_warning(
    receiver: OtlpHttpReceiver, rlmetrics_log: CapturedLog
) -> None:
    receiver.reject_with = 400
    declare_test_series()
    with _start(receiver.endpoint, "name"):
        record_test_series()
        receiver.wait_for(lambda r: r.rejected >= 2, what="two refused exports")
    said = rlmetrics_log.matching("OTLP/HTTP metrics export to", level=logging.WARNING)
    assert len(said) == 1 and receiver.endpoint + "/v1/metrics" in said[0].getMessage()


def test_an_export_larger_than_the_collector_takes_names_the_limit(
    receiver: OtlpHttpReceiver, rlmetrics_log: CapturedLog
) -> None:
    """HTTP 413 is a request above the collector's size limit (max_request_body_size), not a
    refusal its log explains: the warning names the limit, and for spans the batch size."""
    receiver.reject_with = 413
    with _start(receiver.endpoint, "name") as handle:
        handle.tracer_provider.get_tracer("big").start_span("turn").end()  # type: ignore[union-attr]
        handle.tracer_provider.force_flush()  # type: ignore[union-attr]
        receiver.wait_for(lambda r: r.rejected >= 2, what="refused metrics and spans")
        for signal in ("metrics", "traces"):
            rlmetrics_log.wait_for(f"OTLP/HTTP {signal} export to {receiver.endpoint}")
    for signal in ("metrics", "traces"):
        this = f"OTLP/HTTP {signal} export to {receiver.endpoint}"
        (said,) = [r.getMessage() for r in rlmetrics_log.matching(this, logging.WARNING)]
        assert "HTTP 413" in said and "max_request_body_size" in said, said
        assert ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE" in said) == (signal == "traces"), said


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL='http/json'"),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
            "choose different protocols",
        ),
    ],
)
def test_a_protocol_rlmetrics_cannot_use_is_a_configuration_mistake(
    env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        rlmetrics.start("otlp-http-test", exporters=("otlp",), otlp_endpoint="http://127.0.0.1:9")


@pytest.fixture
def tls_http_receiver(tmp_path: Path) -> Iterator[OtlpHttpReceiver]:
    """An OTLP/HTTP receiver serving HTTPS with a self-signed certificate for 127.0.0.1."""
    key, certificate = certificate_for_localhost(tmp_path)
    yield from _serving(OtlpHttpReceiver(tls=(key.read_bytes(), certificate.read_bytes())))


@pytest.mark.parametrize("bundle_variable", [None, "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
def test_over_https_the_points_arrive_when_the_variable_names_the_collector_s_ca(
    bundle_variable: str | None,
    tls_http_receiver: OtlpHttpReceiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Also where ``requests``' own bundle variables are set, as conda, Nix and many hosts
    set them. Before: on SDK 1.45 the bundle they name replaced the certificate
    ``OTEL_EXPORTER_OTLP_CERTIFICATE`` names (``requests`` lets them override a session's
    ``verify``, and 1.45 sets ``verify`` on the session only), so every export failed
    CERTIFICATE_VERIFY_FAILED."""
    import certifi

    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    if bundle_variable is not None:
        monkeypatch.setenv(bundle_variable, certifi.where())
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(tmp_path / "collector.pem"))
    assert tls_http_receiver.endpoint.startswith("https://127.0.0.1:")
    declare_test_series()
    with _start(tls_http_receiver.endpoint, "name"):
        record_test_series()
        with rlmetrics.run(), rlmetrics.step(3):
            pass
        tls_http_receiver.wait_for(_all_arrived, what="every recorded value, over HTTPS")
        tls_http_receiver.wait_for(lambda r: r.spans(), what="the spans, over HTTPS")


#: What went wrong, as the failure names it, and what to change, for each first-hour mistake.
_FAILURES = {
    "untrusted": ("CERTIFICATE_VERIFY_FAILED", "name its CA's certificate in"),
    "plaintext to tls": ("Connection aborted", "closes a plaintext connection so: give it as"),
    "tls to plaintext": ("WRONG_VERSION_NUMBER", "The collector there does not serve TLS"),
    "nothing listens": ("Connection refused", "that a collector listens there"),
    "a path in the base url": ("HTTP 404", "give the collector's base URL"),
    "refused data": ("HTTP 400", "refuses these requests"),
    "no credentials": ("HTTP 401", "OTEL_EXPORTER_OTLP_HEADERS"),
    "a grpc port": ("BadStatusLine", "The collector there speaks OTLP over gRPC"),
    "a slow collector": ("ReadTimeout", "did not answer within the export timeout"),
}


@pytest.mark.parametrize("mistake", list(_FAILURES))
def test_a_failed_export_says_what_went_wrong_and_what_to_change(
    mistake: str,
    receiver: OtlpHttpReceiver,
    tls_http_receiver: OtlpHttpReceiver,
    rlmetrics_log: CapturedLog,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: every failure said "check the endpoint and that a collector takes OTLP over
    HTTP there", naming no cause: true of each, and no help with any but one."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_CERTIFICATE", raising=False)
    plain, secure = receiver.endpoint, tls_http_receiver.endpoint
    dead = OtlpHttpReceiver().start()
    dead.stop()
    grpc_port = OtlpReceiver().start()
    endpoint = {
        "untrusted": secure,
        "plaintext to tls": secure.replace("https://", "http://"),
        "tls to plaintext": plain.replace("http://", "https://"),
        "nothing listens": dead.endpoint,
        "a path in the base url": plain + "/v1/metrics",
        "refused data": plain,
        "no credentials": plain,
        "a grpc port": grpc_port.endpoint,
        "a slow collector": plain,
    }[mistake]
    receiver.reject_with = {"refused data": 400, "no credentials": 401}.get(mistake)
    if mistake == "a slow collector":  # it takes the points and answers past the timeout
        receiver.answer_after_s = 2.0
    cause, advice = _FAILURES[mistake]
    declare_test_series()
    handle = rlmetrics.start(
        "otlp-http-test",
        exporters={"otlp_http": {"endpoint": endpoint, "timeout_s": 1.0}},
        export_interval_s=INTERVAL_S,
    )
    record_test_series()
    failed = f"OTLP/HTTP metrics export to {endpoint}/v1/metrics failed"
    try:
        rlmetrics_log.wait_for(failed)
    finally:
        handle.shutdown(timeout_s=2)
        grpc_port.stop()
    (said,) = [r.getMessage() for r in rlmetrics_log.matching(failed, level=logging.WARNING)]
    assert cause in said and advice in said, said
    if mistake != "a slow collector":
        assert receiver.requests == [] and tls_http_receiver.requests == []


def test_an_error_escaping_the_sdk_does_not_hide_the_request_s_cause(
    receiver: OtlpHttpReceiver, rlmetrics_log: CapturedLog
) -> None:
    """Before (CI, SDK 1.44, under load): a TLS-to-plaintext export retried after its backoff
    with the deadline already past; SDK 1.44 handed ``requests`` the negative remainder, and
    urllib3's ``ValueError`` (no ``RequestException``, so the SDK let it out) replaced
    ``WRONG_VERSION_NUMBER`` in the warning, with the advice for neither. The stand-in export
    makes the SDK's two requests, the second with the negative timeout, through the real
    session to the real receiver."""
    from opentelemetry.sdk.metrics.export import MetricExportResult

    url = receiver.endpoint.replace("http://", "https://") + "/v1/metrics"

    class RetriedPastItsDeadline:
        def export(self, data: object) -> object:
            session = _session_class()()
            with contextlib.suppress(requests.exceptions.SSLError):
                session.post(url, data=b"", timeout=1.0)
            return session.post(url, data=b"", timeout=-0.0034)

    class Mixin:
        pass

    cls = _reporting(RetriedPastItsDeadline, Mixin, MetricExportResult, "metrics", url)
    assert cls().export(b"") is MetricExportResult.FAILURE
    (said,) = [r.getMessage() for r in rlmetrics_log.matching(url, level=logging.WARNING)]
    cause, advice = _FAILURES["tls to plaintext"]
    assert cause in said and advice in said, said
    assert "ValueError" not in said and receiver.requests == []


@example(status=413, reason="Request Entity Too Large", signal="traces")
@example(status=429, reason="Too Many Requests", signal="metrics")
@example(status=503, reason="Service Unavailable", signal="traces")
@given(
    status=st.integers(min_value=400, max_value=599),
    reason=st.text(max_size=40),
    signal=st.sampled_from(["metrics", "traces"]),
)
def test_every_refusal_is_advised_by_its_status(status: int, reason: str, signal: str) -> None:
    advice = failure_advice(signal, f"HTTP {status}: {reason}")
    if status in (401, 403):
        assert f"OTEL_EXPORTER_OTLP_{signal.upper()}_HEADERS" in advice
    elif status == 404:
        assert f"/v1/{signal} is added" in advice
    elif status == 413:
        assert "max_request_body_size" in advice
    elif status in (429, 503):
        assert "overloaded" in advice and "Nothing in this process is to change" in advice
    else:
        assert advice == "The collector refuses these requests: its own log says why"


def test_a_header_variable_s_pairs_are_sent(
    receiver: OtlpHttpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A value with a space, as the SDK takes it unencoded, and an encoded one."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer abc, x-team=rl%2Cops")
    declare_test_series()
    with _start(receiver.endpoint, "name"):
        record_test_series()
        receiver.wait_for(lambda r: r.requests, what="a request")
    sent = {k.lower(): v for k, v in receiver.headers[0].items()}
    assert sent["authorization"] == "Bearer abc" and sent["x-team"] == "rl,ops"


@pytest.mark.parametrize("exporter", ["otlp", "otlp_http"])
@pytest.mark.parametrize(
    "headers", ["Authorization: Bearer abc", "x-team=rl, api-key", 'x-key="a;b"']
)
def test_a_header_the_sdk_would_drop_names_itself(
    monkeypatch: pytest.MonkeyPatch, exporter: str, headers: str
) -> None:
    """Before: the SDK dropped that pair with a line of its own, sent the others, and the
    collector answered 401 to a run that had set its credentials."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", headers)
    with pytest.raises(rlmetrics.ConfigurationError) as raised:
        rlmetrics.start(exporters=[exporter], otlp_endpoint="http://127.0.0.1:9")
    message = str(raised.value)
    assert message.startswith("OTEL_EXPORTER_OTLP_HEADERS holds "), message
    assert "name=value" in message
    assert rlmetrics.current() is None


@given(
    text=st.text(
        alphabet=st.sampled_from([*map(chr, range(0x20, 0x7F)), "\t", "é", "\x7f", ",", "="]),
        max_size=40,
    )
)
def test_the_headers_check_refuses_exactly_the_pairs_the_sdk_drops(text: str) -> None:
    from opentelemetry.util.re import parse_env_headers

    pieces = re.split(r"[ \t]*,[ \t]*", text)
    sdk_drops = [p for p in pieces if p and not parse_env_headers(p, liberal=True)]
    assert dropped_headers(text) == sdk_drops


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"option": "127.0.0.1:4318"}, "the OTLP/HTTP endpoint '127.0.0.1:4318'"),
        ({"option": "localhost"}, "the OTLP/HTTP endpoint 'localhost'"),
        ({"option": "ftp://127.0.0.1:4318"}, "the OTLP/HTTP endpoint 'ftp://127.0.0.1:4318'"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"},
            "OTEL_EXPORTER_OTLP_ENDPOINT='collector:4317'",
        ),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "127.0.0.1:4318/v1/traces"},
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT='127.0.0.1:4318/v1/traces'",
        ),
    ],
)
def test_an_endpoint_that_is_no_http_url_names_itself(
    monkeypatch: pytest.MonkeyPatch, given: dict[str, str], named: str
) -> None:
    """Switching OTEL_EXPORTER_OTLP_PROTOCOL to http/protobuf and keeping gRPC's host:port.
    Before: start() took it, and every export failed (InvalidSchema), or failed naming
    nothing ("localhost")."""
    for name in ("ENDPOINT", "METRICS_ENDPOINT", "TRACES_ENDPOINT"):
        monkeypatch.delenv(f"OTEL_EXPORTER_OTLP_{name}", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    option = given.pop("option", None)
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(rlmetrics.ConfigurationError) as raised:
        rlmetrics.start(exporters={"otlp_http": {} if option is None else {"endpoint": option}})
    message = str(raised.value)
    assert message.startswith(named), message
    assert "http://host:4318" in message
    assert rlmetrics.current() is None


def test_a_signal_s_own_headers_variable_is_the_one_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the SDK reads them: a signal's own variable, where set, and the shared one is not
    read for that signal."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization: Bearer abc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "authorization=Bearer abc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Bearer abc")
    handle = rlmetrics.start(exporters=["otlp"], otlp_endpoint="http://127.0.0.1:9")
    handle.shutdown(timeout_s=1)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization")
    with pytest.raises(rlmetrics.ConfigurationError, match="OTEL_EXPORTER_OTLP_TRACES_HEADERS"):
        rlmetrics.start(exporters=["otlp"], otlp_endpoint="http://127.0.0.1:9")


def test_a_new_cause_of_failure_is_said_though_another_was_said_before(
    rlmetrics_log: CapturedLog,
) -> None:
    """Exports failed while the collector was down (said once); it came back refusing every
    export with 413, and that was logged at DEBUG only: the one warning of the run named a
    connection that had long been fixed. Each cause is now said once, as over gRPC."""
    peer = OtlpHttpReceiver().start()
    peer.stop()  # down at start
    try:
        declare_test_series()
        with _start(peer.endpoint, "name") as handle:
            record_test_series()
            this = f"OTLP/HTTP metrics export to {peer.endpoint}/v1/metrics failed"
            rlmetrics_log.wait_for(f"{this} (ConnectionError")
            peer.reject_with = 413
            peer.start()
            handle.force_flush(timeout_s=5)
            peer.wait_for(lambda r: r.rejected >= 1, what="a refused export")
            rlmetrics_log.wait_for(f"{this} (HTTP 413")
        warned = [r.getMessage() for r in rlmetrics_log.matching(this, logging.WARNING)]
        assert [w for w in warned if "(HTTP 413" in w], warned
        assert len([w for w in warned if "(ConnectionError" in w]) == 1, warned
    finally:
        peer.stop()


def test_points_and_spans_the_collector_took_but_rejected_are_said(
    receiver: OtlpHttpReceiver, rlmetrics_log: CapturedLog
) -> None:
    """OTLP's partial_success over HTTP, as over gRPC: the SDK reads nothing of the answer."""
    receiver.partly_rejects = (2, "too old")
    declare_test_series()
    with _start(receiver.endpoint, "name") as handle:
        record_test_series()
        handle.tracer_provider.get_tracer("t").start_span("s").end()  # type: ignore[union-attr]
        handle.force_flush(timeout_s=5)
        for what in ("points", "spans"):
            rlmetrics_log.wait_for(f"but rejected 2 {what} of it (too old)")
    for signal, what in (("metrics", "points"), ("traces", "spans")):
        (said,) = rlmetrics_log.matching(f"rejected 2 {what}", logging.WARNING)
        assert f"OTLP/HTTP {signal} export" in said.getMessage()
        assert f"{receiver.endpoint}/v1/{signal}" in said.getMessage()
