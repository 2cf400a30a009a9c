"""The ``otlp_http`` exporter: OTLP over HTTP/protobuf, metrics and spans to one collector,
with bounded, reported failures; and the protocol choice the ``otlp`` exporter makes.

The OpenTelemetry specification chooses the OTLP transport with
``OTEL_EXPORTER_OTLP_PROTOCOL`` (``grpc`` or ``http/protobuf``;
``OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`` per signal): ``exporters=["otlp"]`` follows it (gRPC
when unset, as rlmetrics always did), and ``exporters=["otlp_http"]`` asks for HTTP whatever
it says.

What the ``otlp`` exporter adds to the SDK's, this one adds too, without any private SDK
attribute (the HTTP exporter's internals differ between SDK 1.44 and 1.45):

- a 3 s export timeout, retries included, when no timeout variable of the signal is set, so
  the last export against a dead or black-holed collector gives up inside ``shutdown()``'s
  bound;
- each failed export reported once per signal and endpoint through ``warn_once``, with its
  cause (the HTTP status, or the connection's or TLS's error) and what to change; the SDK's
  own lines about it at DEBUG (``rlmetrics.otlp.sdk``);
- the certificate ``OTEL_EXPORTER_OTLP_CERTIFICATE`` names is the one trusted, also where
  ``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE`` is set (see :func:`_export_session`).

``endpoint`` is the collector's base URL (``http://host:4318``): the signal paths
``/v1/metrics`` and ``/v1/traces`` are added, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` is treated;
the per-signal variables are used as they are. The SDK is imported only when it is built.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

from .. import hookimpl
from .._warn import logger, warn_once
from ..configuration import POSITIVE_NUMBER, TEXT, ConfigurationError, declare_options
from . import Exporter, ForkSafe, ForkSafeSpans, batch_span_processor, periodic_reader
from .otlp import (
    HTTP_COMPRESSIONS,
    REFUSAL_ADVICE,
    SDK_LINES_LOGGER,
    check_compression,
    check_headers,
    check_metric_preferences,
    check_tls_files,
    credentials_advice,
    export_advice,
    histogram_preference,
    otlp_timeout_s,
    overloaded_advice,
    say_rejected,
    signal_variables,
    size_advice,
)

__all__ = [
    "HTTP_PROTOBUF",
    "SDK_HTTP_EXPORTER_LOGGERS",
    "check_endpoint",
    "chosen_protocol",
    "failure_advice",
    "make_exporter",
    "protocol",
    "register_exporters",
]

INSTALL_HINT = "pip install 'rlmetrics[otlp-http]'"
#: The protocol value that chooses this transport.
HTTP_PROTOBUF = "http/protobuf"
_PROTOCOLS = ("grpc", HTTP_PROTOBUF)
#: The SDK's HTTP exporter loggers: a line per retry and per failed export.
SDK_HTTP_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http._common._http",
)
_PATHS = {"metrics": "/v1/metrics", "traces": "/v1/traces"}


def protocol(signal: str = "metrics") -> str:
    """The OTLP protocol ``signal`` is to use: its own variable, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else ``grpc``. Any other value (``http/json``, which the
    Python SDK does not export) is a configuration mistake, raised with the variable named."""
    for name in signal_variables(signal, "PROTOCOL"):
        value = os.environ.get(name, "").strip()
        if value:
            if value not in _PROTOCOLS:
                raise ConfigurationError(
                    f"{name}={value!r} is not an OTLP protocol rlmetrics exports with; use one "
                    f"of {list(_PROTOCOLS)}"
                ) from None
            return value
    return "grpc"


def chosen_protocol() -> str:
    """The one OTLP protocol both signals are to use (see :func:`protocol`): rlmetrics sends
    them to one collector over one, so a different protocol per signal is refused."""
    chosen = {protocol("metrics"), protocol("traces")}
    if len(chosen) > 1:
        raise ConfigurationError(
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL and OTEL_EXPORTER_OTLP_TRACES_PROTOCOL choose "
            "different protocols; rlmetrics sends both signals to one collector over one: set "
            "OTEL_EXPORTER_OTLP_PROTOCOL only"
        )
    return chosen.pop()


_exporting = threading.local()


class _OwnExportLines(logging.Filter):
    """The SDK's lines about an export rlmetrics makes on this thread go to DEBUG (the
    failure is reported once, below); lines about any other export pass as they are."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(_exporting, "active", False):
            return True
        logging.getLogger(SDK_LINES_LOGGER).debug(
            "%s", record.getMessage(), exc_info=record.exc_info
        )
        return False


@functools.cache
def _quiet_own_exports() -> None:
    for name in SDK_HTTP_EXPORTER_LOGGERS:
        logging.getLogger(name).addFilter(_OwnExportLines())


def failure_advice(signal: str, cause: str) -> str:
    """What to change after an OTLP/HTTP export failed with ``cause``."""
    status = cause.split(":", 1)[0]
    if status in ("HTTP 401", "HTTP 403"):
        return credentials_advice(signal)
    if status == "HTTP 404":
        return (
            f"Nothing takes OTLP at that path: give the collector's base URL "
            f"(http://host:4318), to which {_PATHS[signal]} is added; "
            f"{signal_variables(signal, 'ENDPOINT')[0]} alone is used as it is"
        )
    if status == "HTTP 413":
        return size_advice(signal, "max_request_body_size of its OTLP/HTTP receiver, 20 MiB")
    if status in ("HTTP 429", "HTTP 503"):
        return overloaded_advice()
    if status.startswith("HTTP "):
        return REFUSAL_ADVICE
    return export_advice(signal, cause)


def _reporting(base: type, fork_safe: type, result: Any, signal: str, endpoint: str) -> type:
    """``base`` (an SDK OTLP HTTP exporter) reporting each failed export once per signal and
    endpoint: the SDK drops a failed batch and only logs."""
    what = "points" if signal == "metrics" else "spans"

    class Reporting(fork_safe, base):  # type: ignore[misc,valid-type]
        def export(self, data: Any, *args: Any, **kwargs: Any) -> Any:
            _exporting.active, _exporting.cause, _exporting.answer = True, None, None
            self.rlmetrics_rejected = 0
            try:
                outcome = super().export(data, *args, **kwargs)
            except Exception as exc:
                outcome = exc
            finally:
                _exporting.active = False
            if outcome is result.SUCCESS:
                self._say_rejected(_exporting.answer)
                return outcome
            # A request's failure outranks what escaped the SDK after it: SDK 1.44 retries
            # past its deadline with a negative timeout, and urllib3's ValueError then hid
            # the first request's cause.
            cause = _exporting.cause
            if cause is None and isinstance(outcome, Exception):
                cause = f"{type(outcome).__name__}: {outcome}"
            if cause is None:
                said, advice = (
                    "",
                    "Check the endpoint and that a collector takes OTLP over HTTP there",
                )
            else:
                said, advice = f" ({cause})", failure_advice(signal, cause)
            message = (
                f"rlmetrics: OTLP/HTTP {signal} export to {endpoint} failed{said}; these "
                f"{what} are dropped and training goes on. {advice}. Later failures with this "
                "cause are logged at DEBUG."
            )
            # Said once per cause (its HTTP status, or the error's type), as over gRPC: a
            # collector down at start that came back refusing the exports is a new warning.
            kind = "unknown" if cause is None else cause.split(":", 1)[0]
            if getattr(self, "_shutdown", False):
                logger.debug(message)  # past shutdown's bound, which telemetry reported
            else:
                warn_once(f"otlp_http:{signal}:{endpoint}:{kind}", message, expected=True)
            return result.FAILURE

        def _say_rejected(self, answer: bytes | None) -> None:
            if not answer:
                return
            try:
                response = _response_type(signal).FromString(answer)
            except Exception:
                return  # an answer that is no OTLP response: nothing to read of it
            self.rlmetrics_rejected = say_rejected(
                response, f"an OTLP/HTTP {signal} export", endpoint, "otlp_http"
            )

    Reporting.__name__ = Reporting.__qualname__ = f"Reporting{base.__name__}"
    _quiet_own_exports()
    return Reporting


def _response_type(signal: str) -> Any:
    """The protobuf type of the collector's answer to an export of ``signal``."""
    if signal == "metrics":
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

        return metrics_service_pb2.ExportMetricsServiceResponse
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    return trace_service_pb2.ExportTraceServiceResponse


def _signal_endpoint(endpoint: str | None, signal: str) -> str | None:
    """The URL ``signal`` is sent to: ``endpoint`` with its path added; None lets the SDK
    read the variables (and default to ``http://localhost:4318``)."""
    if endpoint is None:
        return None
    return endpoint.rstrip("/") + _PATHS[signal]


def _given_endpoint(endpoint: str | None, signal: str) -> tuple[str, str] | None:
    """Where the collector of ``signal`` was given, as a report names it, and what was given:
    the exporter's ``endpoint``, else the signal's variable, else the shared one; None when
    none is (the SDK's ``http://localhost:4318``)."""
    if endpoint is not None:
        return "the OTLP/HTTP endpoint ", endpoint
    for name in signal_variables(signal, "ENDPOINT"):
        value = os.environ.get(name, "").strip()
        if value:
            return f"{name}=", value
    return None


def _described(endpoint: str | None, signal: str) -> str:
    """The URL ``signal`` goes to, for reports (what the SDK resolves when given none): a
    signal's own variable is used as it is, the others get the signal's path."""
    given = _given_endpoint(endpoint, signal)
    if given is None:
        return "http://localhost:4318" + _PATHS[signal]
    source, value = given
    if source == f"{signal_variables(signal, 'ENDPOINT')[0]}=":
        return value
    return value.rstrip("/") + _PATHS[signal]


#: The SDK's (experimental) variables naming a session factory of the user's: where one is
#: set, the session is theirs.
_CREDENTIAL_PROVIDERS = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_METRICS_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
)


def _export_session() -> Any:
    """The ``requests`` session each exporter is given, or None where a credential provider
    variable names the session (the SDK then builds the user's). It does two things:

    - it keeps its own ``verify`` (the certificate the OTLP variables name) against
      ``REQUESTS_CA_BUNDLE`` and ``CURL_CA_BUNDLE``. ``requests`` lets those variables replace
      a session's ``verify`` (it merges them into each request's settings, which outrank the
      session's). SDK 1.45 sets the certificate on the session only, so wherever one of them
      is set (conda, Nix and many hosts set them) the collector's private CA was not trusted
      and every export failed. SDK 1.44 passes it with each request, where it wins already;
    - it remembers, on the exporting thread, why the export's first request failed (its HTTP
      status, or the connection's or TLS's error), for the one warning that reports it. The
      SDK's own lines say it only when it retries, in words that change between releases.
    """
    if any(os.environ.get(name, "").strip() for name in _CREDENTIAL_PROVIDERS):
        return None
    return _session_class()()


def _first_cause(cause: str) -> None:
    """Remember why a request of this thread's export failed, the first time in the export:
    a retry's failure is often only its deadline running out (a read timeout of a few ms
    after a TLS failure), which would hide the cause."""
    if getattr(_exporting, "cause", None) is None:
        _exporting.cause = cause


@functools.cache
def _session_class() -> type:
    import requests

    class ExportSession(requests.Session):
        def merge_environment_settings(
            self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
        ) -> Any:
            if verify is None and self.verify is not True:
                verify = self.verify  # the exporter's certificate (or False), not the bundle's
            return super().merge_environment_settings(url, proxies, stream, verify, cert)

        def send(self, request: Any, **kwargs: Any) -> Any:
            try:
                response = super().send(request, **kwargs)
            except Exception as error:
                _first_cause(f"{type(error).__name__}: {error}")
                raise
            if response.status_code >= 400:
                _first_cause(f"HTTP {response.status_code}: {response.reason}")
            elif getattr(_exporting, "active", False):
                _exporting.answer = response.content  # what it rejected of it, if anything
            return response

    return ExportSession


def check_endpoint(endpoint: str | None, signal: str) -> None:
    """Refuse, naming where it was given, an endpoint that is no http(s) URL: gRPC's
    ``host:port``, kept when ``OTEL_EXPORTER_OTLP_PROTOCOL`` switched to HTTP, failed every
    export (``InvalidSchema``), or named no cause at all (``localhost``)."""
    given = _given_endpoint(endpoint, signal)
    if given is None:
        return
    source, value = given
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigurationError(
            f"{source}{value!r} is no URL OTLP/HTTP can send to: give the collector's as "
            "http://host:4318 (https:// for TLS)"
        )


def _timeout(timeout_s: float | None, signal: str) -> float | None:
    return timeout_s if timeout_s is not None else otlp_timeout_s(signal)


@declare_options(
    endpoint=TEXT.read_from(
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ),
    timeout_s=POSITIVE_NUMBER.read_from(
        "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ),
    histogram_aggregation=TEXT.read_from(
        "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION"
    ),
)
def make_exporter(
    export_interval_s: float | None = None,
    endpoint: str | None = None,
    timeout_s: float | None = None,
    histogram_aggregation: str | None = None,
    *,
    named: str = "otlp_http",
) -> Exporter:
    """An OTLP/HTTP metric exporter on a periodic reader and a span exporter behind a batch
    processor, both to one collector.

    :param endpoint: the collector's base URL (``http://host:4318``); default from
        ``OTEL_EXPORTER_OTLP_{METRICS,TRACES}_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``.
    :param timeout_s: seconds per export, retries included; default
        :data:`~rlmetrics.exporters.otlp.DEFAULT_OTLP_TIMEOUT_S` unless a timeout variable
        is set.
    :param histogram_aggregation: as the ``otlp`` exporter's (exponential or explicit
        histograms); default from the standard variable, which the SDK reads.
    :param named: the exporter's name in ``start()``, for a mistake to name (``otlp`` when
        the protocol variable chose HTTP for it).
    """
    try:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ImportError(
            f"exporter 'otlp_http' needs the OTLP HTTP exporter: {INSTALL_HINT}"
        ) from None
    from opentelemetry.sdk.metrics.export import MetricExportResult
    from opentelemetry.sdk.trace.export import SpanExportResult

    check_metric_preferences()
    preference = histogram_preference(histogram_aggregation, named)
    built = []
    for signal, base, fork_safe, result in (
        ("metrics", OTLPMetricExporter, ForkSafe, MetricExportResult),
        ("traces", OTLPSpanExporter, ForkSafeSpans, SpanExportResult),
    ):
        kwargs: dict[str, Any] = {}
        url = _signal_endpoint(endpoint, signal)
        if url is not None:
            kwargs["endpoint"] = url
        timeout = _timeout(timeout_s, signal)
        if timeout is not None:
            kwargs["timeout"] = timeout
        check_tls_files(signal)
        check_compression(signal, HTTP_COMPRESSIONS)
        check_headers(signal)
        check_endpoint(endpoint, signal)
        session = _export_session()
        if session is not None:
            kwargs["session"] = session
        if signal == "metrics":
            kwargs.update(preference)
        cls = _reporting(base, fork_safe, result, signal, _described(endpoint, signal))
        built.append(cls(**kwargs))
    metrics, spans = built
    reader = periodic_reader(metrics, export_interval_s)
    try:
        processor = batch_span_processor(spans, export_interval_s)
    except BaseException:
        reader.shutdown(timeout_millis=1000)
        raise
    return Exporter(reader, span_processor=processor)


@hookimpl
def register_exporters(register: Callable[[str, Callable[..., Exporter]], None]) -> None:
    register("otlp_http", make_exporter)
