"""The ``otlp`` exporter: OTLP over gRPC to a collector, metrics and spans to one endpoint,
with bounded, reported failures.

Configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables (the ``_METRICS_`` and
``_TRACES_`` ones per signal), or by ``start(otlp_endpoint=...)``, which both signals use.
Three things the SDK's exporters do not do are added here, for both:

- a 3 s export timeout when no timeout variable of the signal is set (the SDK's 10 s would
  outlive ``shutdown()``'s bound against a dead collector);
- each failed export reported through ``warn_once``, once per signal, endpoint and gRPC
  status;
- ``shutdown()`` cutting the exporter's retry backoff short;
- the SDK's own lines about an export rlmetrics made (a WARNING per retry, an ERROR per failed
  export) logged at DEBUG, as ``rlmetrics.otlp.sdk``, since the report above says it once:
  a dead collector is one warning line, as the docs promise. An OTLP exporter the user built
  keeps the SDK's lines.

They need the private SDK attributes listed in :data:`PRIVATE_SDK_ATTRIBUTES` — every private
attribute rlmetrics touches is in this module, and a test on each supported SDK asserts that
each still exists, so an SDK release that removes one fails CI instead of silently changing
behaviour. The SDK is imported only when the exporter is built.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import re
import threading
from typing import TYPE_CHECKING, Any

from .. import hookimpl
from .._warn import logger, warn_once
from ..configuration import POSITIVE_NUMBER, TEXT, ConfigurationError, declare_options
from . import Exporter, ForkSafe, ForkSafeSpans, batch_span_processor, periodic_reader

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "histogram_preference",
    "DEFAULT_OTLP_TIMEOUT_S",
    "GRPC_COMPRESSIONS",
    "HTTP_COMPRESSIONS",
    "PRIVATE_SDK_ATTRIBUTES",
    "REFUSAL_ADVICE",
    "SDK_EXPORTER_LOGGER",
    "SDK_LINES_LOGGER",
    "TEMPORALITY_PREFERENCES",
    "check_compression",
    "check_headers",
    "check_insecure",
    "check_metric_preferences",
    "check_tls_files",
    "credentials_advice",
    "dropped_headers",
    "export_advice",
    "make_exporter",
    "otlp_timeout_s",
    "overloaded_advice",
    "retry_after_s",
    "register_exporters",
    "signal_variables",
    "say_rejected",
    "size_advice",
]

INSTALL_HINT = "pip install 'rlmetrics[otlp]'"

#: Every private SDK attribute this module touches: ``(owner, attribute, why)``. The owner
#: ``exporter`` is ``OTLPMetricExporter``, ``span_exporter`` ``OTLPSpanExporter`` (the same
#: gRPC mixin underneath); ``reader`` is ``PeriodicExportingMetricReader``.
PRIVATE_SDK_ATTRIBUTES: tuple[tuple[str, str, str], ...] = (
    *(
        (owner, attribute, why)
        for owner in ("exporter", "span_exporter")
        for attribute, why in (
            ("_initialize_channel_and_stub", "rebuilt stubs must stay wrapped"),
            ("_client", "the gRPC stub, wrapped to learn why an export failed"),
            ("_endpoint", "named in failure reports"),
            ("_shutdown", "a failure after shutdown's bound is logged at DEBUG only"),
            ("_shutdown_in_progress", "set early so shutdown cuts the retry backoff"),
        )
    ),
    ("reader", "_exporter", "the reader's exporter, to interrupt its retries"),
)

#: Seconds one OTLP export may take, retries included, unless OTEL_EXPORTER_OTLP_TIMEOUT or
#: OTEL_EXPORTER_OTLP_METRICS_TIMEOUT says otherwise (the SDK's own default is 10 s). Shorter
#: than the default shutdown bound (5 s), so the last export of a run against a dead collector
#: gives up inside ``shutdown()`` instead of being abandoned mid-retry; long enough for a live
#: collector across a cluster network, and for one retry after a collector restart.
DEFAULT_OTLP_TIMEOUT_S = 3.0


def signal_variables(signal: str, setting: str) -> tuple[str, str]:
    """The variables that give ``setting`` (``HEADERS``, ``TIMEOUT``...) for ``signal``
    (``metrics`` or ``traces``), in the order the SDK reads them: the signal's own
    (``OTEL_EXPORTER_OTLP_METRICS_HEADERS``), then the shared one."""
    return f"OTEL_EXPORTER_OTLP_{signal.upper()}_{setting}", f"OTEL_EXPORTER_OTLP_{setting}"


def otlp_timeout_s(signal: str = "metrics") -> float | None:
    """The ``timeout=`` rlmetrics passes to the OTLP exporter of ``signal`` (``metrics`` or
    ``traces``): None (let the SDK read the environment) when ``OTEL_EXPORTER_OTLP_TIMEOUT``
    or the signal's own variable is set, else :data:`DEFAULT_OTLP_TIMEOUT_S`."""
    given = [(n, os.environ.get(n, "").strip()) for n in signal_variables(signal, "TIMEOUT")]
    for name, text in given:
        # Checked here, naming the variable: the SDK's float() would raise a bare ValueError
        # out of start() (and take -1, NaN or 0 as a bound).
        if text and not _positive_seconds(text):
            raise ConfigurationError(
                f"{name}={text!r} must be a positive number of seconds (the OTLP exporter's "
                "timeout per export); unset it for rlmetrics' default "
                f"({DEFAULT_OTLP_TIMEOUT_S:g} s)"
            )
    if any(text for _, text in given):
        return None
    return DEFAULT_OTLP_TIMEOUT_S


#: What ``OTEL_EXPORTER_OTLP_[SIGNAL_]COMPRESSION`` takes, any case: over gRPC the SDK's
#: exporter takes only gzip (it refuses the specification's "none": unset it instead).
GRPC_COMPRESSIONS = ("gzip",)
HTTP_COMPRESSIONS = ("gzip", "deflate", "none")


def check_compression(
    signal: str = "metrics", choices: tuple[str, ...] = GRPC_COMPRESSIONS
) -> None:
    """Refuse, naming the variable and the ``choices``, a compression variable of ``signal``
    that is none: the gRPC exporter raised the SDK's own exception out of ``start()`` without
    the choices, the HTTP one sent uncompressed."""
    for name in signal_variables(signal, "COMPRESSION"):
        text = os.environ.get(name, "").strip()
        if text and text.lower() not in choices:
            raise ConfigurationError(
                f"{name}={text!r} is none of the compressions this OTLP exporter takes: "
                f"{', '.join(map(repr, choices))} (unset: none)"
            )


#: One header as the SDK takes it from a variable (``parse_env_headers(..., liberal=True)``,
#: 1.44 and 1.45 alike): a name of the specification's token characters, ``=``, a value of
#: printable ASCII and spaces but ``",;\``; the pairs are split at commas. A pair that is
#: not one the SDK drops with a line of its own, and sends the others.
_HEADER = re.compile(
    r"[ \t]*[\x21\x23-\x27\x2a\x2b\x2d\x2e\x30-\x39\x41-\x5a\x5e-\x7a\x7c\x7e]+[ \t]*="
    r"[ \t]*[\x20\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*[ \t]*"
)
_HEADER_DELIMITER = re.compile(r"[ \t]*,[ \t]*")


def dropped_headers(text: str) -> list[str]:
    """The pairs of a headers variable's ``text`` the SDK would drop."""
    return [h for h in _HEADER_DELIMITER.split(text) if h and not _HEADER.fullmatch(h.strip())]


def check_headers(signal: str = "metrics") -> None:
    """Refuse, naming the variable, a headers variable of ``signal`` holding a pair the SDK
    would drop: it sent the others without it, so the collector answered 401 to a run that
    had set its credentials ("Authorization: Bearer x", written as curl takes it)."""
    for name in signal_variables(signal, "HEADERS"):
        text = os.environ.get(name, "")
        if not text:
            continue
        dropped = dropped_headers(text)
        if dropped:
            raise ConfigurationError(
                f"{name} holds {dropped[0]!r}, which is no name=value pair the OpenTelemetry "
                "SDK takes (it would send the others without it): write each header as "
                "name=value, the pairs separated by commas, and URL-encode a comma, semicolon, "
                "quote or backslash in a value (%2C, %3B, %22, %5C)"
            )
        break  # the signal's own variable is the one used


def check_insecure(signal: str = "metrics") -> None:
    """Refuse, naming it, an ``INSECURE`` variable of ``signal`` that is neither true nor
    false. The gRPC exporter takes only "true" (any case) as true: "1" or "yes" meant TLS, also
    to an ``http://`` endpoint, and every export to a plaintext collector failed."""
    for name in signal_variables(signal, "INSECURE"):
        text = os.environ.get(name, "").strip()
        if text and text.lower() not in ("true", "false"):
            raise ConfigurationError(
                f"{name}={text!r} is neither true nor false: the OpenTelemetry SDK reads every "
                "value but 'true' as false, which is TLS; give true for plaintext, or unset it"
            )


#: The files TLS takes from the environment, by what each is (the specification's variables;
#: a signal's own variable, ``OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE``, wins over the shared).
_TLS_FILES = {
    "CERTIFICATE": "trusted certificates (the collector's CA)",
    "CLIENT_KEY": "client's private key",
    "CLIENT_CERTIFICATE": "client's certificate",
}


def check_tls_files(signal: str = "metrics") -> None:
    """Refuse, naming the variable, a TLS file variable of ``signal`` that names no readable
    file. The gRPC exporter logs a traceback and goes on with the system's roots, the HTTP
    one fails each export naming nothing: either way the run exports nothing to a collector
    with a private CA, and no message names the variable."""
    for suffix, what in _TLS_FILES.items():
        for name in signal_variables(signal, suffix):
            path = os.environ.get(name, "").strip()
            if not path:
                continue
            try:
                with open(path, "rb"):
                    pass
            except OSError as error:
                raise ConfigurationError(
                    f"{name}={path!r} is no file that can be read ({error.strerror or error}): "
                    f"it names the OTLP exporter's {what} for {signal}; fix the path or unset it"
                ) from None
            break  # the signal's own variable is the one used


def _positive_seconds(text: str) -> bool:
    try:
        seconds = float(text)
    except ValueError:
        return False
    return 0 < seconds < math.inf


class _RecordingStub:
    """Wraps the exporter's gRPC stub to remember why the last call failed.

    The SDK exporter logs a failure and returns FAILURE without saying why; the status code
    is what tells a dead collector (UNAVAILABLE) from one that rejects us (INVALID_ARGUMENT,
    UNAUTHENTICATED...), so it is what a report is keyed on.
    """

    def __init__(
        self,
        stub: Any,
        remember: Callable[[BaseException], None],
        answered: Callable[[Any], None],
    ) -> None:
        self._stub = stub
        self._remember = remember
        self._answered = answered

    def Export(self, *args: Any, **kwargs: Any) -> Any:
        try:
            response = self._stub.Export(*args, **kwargs)
        except Exception as error:
            self._remember(error)
            raise
        self._answered(response)
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stub, name)


def _describe_rpc_error(error: BaseException | None) -> tuple[str, str]:
    """``(cause, details)`` of a failed export: the gRPC status name, or the exception type."""
    if error is None:
        return "FAILURE", "the exporter gave up without an RPC error (shutting down?)"
    code = getattr(error, "code", None)
    if callable(code):
        try:
            status = code()
            details = error.details()  # type: ignore[attr-defined]
            return str(getattr(status, "name", status)), str(details)
        except Exception:
            pass
    return type(error).__name__, str(error)


#: What each signal's exporter drops when an export fails, and what the next one sends again.
_LOSS = {
    "metrics": "these points are dropped and training goes on (cumulative totals are sent "
    "again by the next export that succeeds)",
    "traces": "these spans are dropped and training goes on",
}


def _metrics_loss() -> str:
    """What a failed metrics export loses, by the temporality the environment asks for: with
    delta counters (``DELTA``, ``LOWMEMORY``) no later export carries them again."""
    name = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"
    if os.environ.get(name, "").strip().lower() in ("delta", "lowmemory"):
        return (
            f"these points are dropped and training goes on (with {name} delta or lowmemory, "
            "the counts and histograms recorded since the last export that succeeded are "
            "lost for good: the default, cumulative, sends them again)"
        )
    return _LOSS["metrics"]


#: gRPC statuses of a connection that failed or timed out, not of a collector's refusal (and
#: FAILURE, the cause said when the exporter gave up without an RPC error).
_CONNECTION_STATUSES = frozenset(
    {"UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN", "CANCELLED", "FAILURE"}
)
#: What to change when the collector answered that it refuses the requests.
REFUSAL_ADVICE = "The collector refuses these requests: its own log says why"


def credentials_advice(signal: str) -> str:
    """What to change when the collector refuses this process's credentials."""
    own, shared = signal_variables(signal, "HEADERS")
    return f"The collector refuses this process's credentials: give them in {shared} (or {own})"


def size_advice(signal: str, limit: str) -> str:
    """What to change when one export was larger than the collector takes (``limit``: its
    setting and default), for ``signal``: a span batch can be made smaller, a metrics export
    (every series at once) cannot, so it fails each time until the limit is raised."""
    said = f"One export is larger than the collector takes ({limit} unless set)"
    if signal == "traces":
        return (
            f"{said}: a smaller OTEL_BSP_MAX_EXPORT_BATCH_SIZE (spans per export, 512 unless "
            "set) keeps each export under it, or raise the limit"
        )
    return (
        f"{said}: every export of this run's series fails so until the collector's limit is "
        "raised (or the run records fewer series)"
    )


def overloaded_advice(retry_after_s: float | None = None) -> str:
    """What to say when the collector answered that it takes no data for now (its memory
    limiter under load: gRPC RESOURCE_EXHAUSTED, or a status with the delay it asks for;
    HTTP 429 or 503): it listens, and nothing in this process is wrong."""
    asked = "" if retry_after_s is None else f"; it asked to retry after {retry_after_s:g} s"
    return (
        f"The collector is there but overloaded: it takes no data for now{asked}. Nothing in "
        "this process is to change: each export tries again; if it goes on, the collector "
        "needs more memory or replicas (its memory_limiter refuses data under load)"
    )


def retry_after_s(error: BaseException | None) -> float | None:
    """The delay a collector asked for in its gRPC answer's ``RetryInfo`` (what says it
    answered, busy, rather than that no connection was made); None when it gave none."""
    trailing = getattr(error, "trailing_metadata", None)
    if not callable(trailing):
        return None
    try:
        found = dict(trailing() or ()).get("google.rpc.retryinfo-bin")
        if found is None:
            return None
        from google.rpc.error_details_pb2 import RetryInfo  # type: ignore[import-untyped]

        info = RetryInfo()
        info.ParseFromString(found)
        return float(info.retry_delay.seconds + info.retry_delay.nanos / 1e9)
    except Exception:
        return None


def export_advice(
    signal: str, details: str, cause: str = "", retry_after: float | None = None
) -> str:
    """What to change after a failed OTLP export, from its gRPC status (``cause``) and what
    gRPC (or, for OTLP/HTTP, ``requests``) said of it (``details``): a refusal names the
    credentials or the collector's log, a TLS failure the scheme or the certificate variable,
    since "a collector listens there" is then true."""
    if cause in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
        return credentials_advice(signal)
    if "larger than max" in details:
        return size_advice(signal, "max_recv_msg_size_mib of its OTLP gRPC receiver, 4 MiB")
    if cause == "RESOURCE_EXHAUSTED" or retry_after is not None:
        return overloaded_advice(retry_after)
    if cause == "UNIMPLEMENTED" and signal == "traces":
        return (
            "The collector takes no spans (a Prometheus OTLP receiver takes metrics only): "
            "start(traces=False) stops sending them"
        )
    if cause.isupper() and cause not in _CONNECTION_STATUSES:
        return REFUSAL_ADVICE
    # 4317 and 4318 mixed up: gRPC met an HTTP/1.1 answer, or HTTP a gRPC server's first
    # (binary, HTTP/2) frame; the collector listens, over the other protocol.
    if "Failed parsing HTTP/2" in details or "http1.x server" in details:
        return (
            "The collector there speaks OTLP over HTTP (its port is usually 4318): set "
            "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf, or give its gRPC port (usually 4317)"
        )
    if "BadStatusLine('\\x00" in details:
        return (
            "The collector there speaks OTLP over gRPC (its port is usually 4317): use the "
            "otlp exporter over gRPC, or give its OTLP/HTTP port (usually 4318)"
        )
    if "CERTIFICATE_VERIFY_FAILED" in details:
        return (
            "The collector's certificate is not one this process trusts: name its CA's "
            "certificate in OTEL_EXPORTER_OTLP_CERTIFICATE (or "
            f"{signal_variables(signal, 'CERTIFICATE')[0]})"
        )
    if "WRONG_VERSION_NUMBER" in details:
        return (
            "The collector there does not serve TLS: an https:// endpoint is TLS; give it as "
            "http:// (or host:port)"
        )
    endpoint = signal_variables(signal, "ENDPOINT")[0]
    # Connected, sent, and no answer in time (gRPC's deadline, requests' read timeout): a
    # collector that is there but slower than the timeout, or stuck; not a missing one.
    if cause == "DEADLINE_EXCEEDED" or "ReadTimeout" in details:
        own, shared = signal_variables(signal, "TIMEOUT")
        return (
            f"The collector did not answer within the export timeout ({shared} or {own}, in "
            f"seconds; {DEFAULT_OTLP_TIMEOUT_S:g} s unless set): raise it if the collector is "
            f"only slow; if it never answers, it is stuck or the endpoint ({endpoint}) is no "
            "collector's"
        )
    advice = f"Check the endpoint ({endpoint}) and that a collector listens there"
    if "Socket closed" in details or "Connection aborted" in details:
        # What a plaintext connection to a TLS port sees (the server drops it unanswered):
        # gRPC's words, then requests'.
        advice += "; a collector serving TLS closes a plaintext connection so: give it as https://"
    return advice


#: The SDK's exporter logger (the gRPC mixin's module): a line per retry and per failure.
SDK_EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.grpc.exporter"
#: Where those lines go, at DEBUG, when the export is rlmetrics'.
SDK_LINES_LOGGER = "rlmetrics.otlp.sdk"

_exporting = threading.local()


class _OwnExportLines(logging.Filter):
    """Moves the SDK exporter's lines about an export rlmetrics is making on this thread to
    DEBUG on :data:`SDK_LINES_LOGGER` (rlmetrics reports the failure itself, once); lines
    about any other export pass as they are."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(_exporting, "active", False):
            return True
        logging.getLogger(SDK_LINES_LOGGER).debug(
            "%s", record.getMessage(), exc_info=record.exc_info
        )
        return False


_filter_lock = threading.Lock()


def _quiet_own_exports() -> None:
    """Install :class:`_OwnExportLines` on the SDK's exporter logger, once per process."""
    sdk_logger = logging.getLogger(SDK_EXPORTER_LOGGER)
    with _filter_lock:
        if not any(isinstance(f, _OwnExportLines) for f in sdk_logger.filters):
            sdk_logger.addFilter(_OwnExportLines())


def say_rejected(response: Any, export: str, where: str, key: str) -> int:
    """Say once (per ``key`` and ``where``) what a collector at ``where`` rejected of
    ``export`` that it took: OTLP's ``partial_success`` of its ``response`` counts the points
    or spans it refused, which the SDK's exporters read nothing of. Returns that count."""
    try:
        partial = response.partial_success
        rejected, what = next(
            (getattr(partial, field), field.rsplit("_", 1)[-1])
            for field in ("rejected_data_points", "rejected_spans", "rejected_log_records")
            if hasattr(partial, field)
        )
        reason = str(partial.error_message or "it gave no reason")
        rejected = int(rejected)
    except Exception:
        return 0
    if rejected:
        warn_once(
            f"{key}:{where}:partial",
            f"rlmetrics: the collector at {where} took {export} but rejected {rejected} "
            f"{what} of it ({reason}); those are lost and training goes on. The collector's "
            "(or its backend's) log says more. Later rejections are logged at DEBUG.",
            expected=True,
        )
    return rejected


def _reporting(base: type, fork_safe: type, result: Any, signal: str) -> type:
    """``base`` (an SDK OTLP gRPC exporter) reporting failed exports through ``warn_once``:
    once per signal, endpoint and cause at WARNING, at DEBUG afterwards, and quiet in a
    forked child. The SDK drops a failed batch and only logs; this makes the failure visible
    in the ``rlmetrics`` log where the rest of the telemetry failures are reported."""
    loss = _LOSS[signal]
    # The metrics wording and keys predate traces: kept, so reports stay recognisable.
    label, prefix = ("", "otlp:export") if signal == "metrics" else ("trace ", "otlp:traces")

    class Reporting(fork_safe, base):  # type: ignore[misc,valid-type]
        _rlmetrics_last_error: BaseException | None = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._rlmetrics_loss = _metrics_loss() if signal == "metrics" else loss

        def _remember(self, error: BaseException) -> None:
            # A retry runs on what is left of the export's timeout: its DEADLINE_EXCEEDED
            # says only that time ran out, not why the export was retried.
            earlier = self._rlmetrics_last_error
            if (
                earlier is not None
                and _describe_rpc_error(error)[0] == "DEADLINE_EXCEEDED"
                and _describe_rpc_error(earlier)[0] != "DEADLINE_EXCEEDED"
            ):
                return
            self._rlmetrics_last_error = error

        def _initialize_channel_and_stub(self) -> None:
            # Called at construction and again when the SDK rebuilds a channel after UNAVAILABLE.
            super()._initialize_channel_and_stub()
            if self._client is not None:  # type: ignore[has-type]
                self._client = _RecordingStub(  # type: ignore[has-type]
                    self._client,  # type: ignore[has-type]
                    self._remember,
                    self._answered,
                )

        def _answered(self, response: Any) -> None:
            # What the collector rejected of this export (the span processor counts it).
            self.rlmetrics_rejected = say_rejected(
                response, f"an OTLP {label}export", self._endpoint, prefix
            )

        def export(self, data: Any, *args: Any, **kwargs: Any) -> Any:
            self._rlmetrics_last_error = None
            self.rlmetrics_rejected = 0
            _exporting.active = True  # the SDK's lines of this export: DEBUG, said below
            try:
                outcome = super().export(data, *args, **kwargs)
            except Exception as exc:
                warn_once(
                    f"{prefix}:{self._endpoint}:{type(exc).__name__}",
                    f"rlmetrics: OTLP {label}export to {self._endpoint} raised {exc!r}; "
                    f"{self._rlmetrics_loss}",
                )
                return result.FAILURE
            finally:
                _exporting.active = False
            if outcome is not result.SUCCESS:
                self._report_failure()
            return outcome

        def _report_failure(self) -> None:
            error = self._rlmetrics_last_error
            cause, details = _describe_rpc_error(error)
            retry_after = retry_after_s(error)
            # A status the collector answered with a delay (overloaded) is another condition
            # than the same status of a connection that failed: each is said once.
            asked = "" if retry_after is None else ":asked-later"
            key = f"{prefix}:{self._endpoint}:{cause}{asked}"
            advice = export_advice(signal, details, cause, retry_after)
            message = (
                f"rlmetrics: OTLP {label}export to {self._endpoint} failed ({cause}: "
                f"{details}); {self._rlmetrics_loss}. {advice}. Later failures with this cause "
                "are logged at DEBUG."
            )
            if getattr(self, "_shutdown", False):
                # The export outlived shutdown's bound, which telemetry already reported.
                logger.debug(message)
                return
            # A failed export is a condition of the collector, not a bug: one line, and the
            # RPC error's traceback (not this thread's) at DEBUG.
            if error is None:
                warn_once(key, message, expected=True)
                return
            try:
                raise error
            except Exception:
                warn_once(key, message, expected=True)

    Reporting.__name__ = Reporting.__qualname__ = f"Reporting{base.__name__}"
    _quiet_own_exports()
    return Reporting


@functools.cache
def _exporter_class() -> type:
    try:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    except ImportError as exc:
        raise ImportError(f"exporter 'otlp' needs the OTLP gRPC exporter: {INSTALL_HINT}") from exc
    from opentelemetry.sdk.metrics.export import MetricExportResult

    return _reporting(OTLPMetricExporter, ForkSafe, MetricExportResult, "metrics")


@functools.cache
def _span_exporter_class() -> type:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    return _reporting(OTLPSpanExporter, ForkSafeSpans, SpanExportResult, "traces")


def _interrupt(exporter: Any) -> None:
    """Tell an OTLP exporter to stop retrying: its next failed attempt is its last."""
    interrupt = getattr(exporter, "_shutdown_in_progress", None)
    if isinstance(interrupt, threading.Event):
        interrupt.set()


@functools.cache
def _reader_class() -> type:
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    class OTLPReader(PeriodicExportingMetricReader):
        """A periodic reader whose shutdown cuts the OTLP exporter's retry backoff short.

        The SDK tells the exporter about shutdown only after the reader's last collection, so
        with a dead collector that collection (and any export still in flight) sleeps through
        the exporter's retry backoff, up to its whole timeout. Setting the exporter's interrupt
        first keeps one attempt per export: a live collector still gets the final points, a
        dead one fails at once instead of holding ``shutdown()`` for the full bound.
        """

        def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
            _interrupt(self._exporter)
            super().shutdown(timeout_millis=timeout_millis, **kwargs)

    return OTLPReader


@functools.cache
def _processor_class() -> type:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    class OTLPSpanProcessor(BatchSpanProcessor):
        """A batch span processor whose shutdown cuts its OTLP exporter's retry backoff short,
        as :func:`_reader_class`'s reader does for metrics: the spans still queued get one
        attempt, so a dead collector costs one connection timeout, not the whole bound."""

        def __init__(self, exporter: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(exporter, *args, **kwargs)
            self._rlmetrics_exporter = exporter

        def shutdown(self) -> None:
            _interrupt(self._rlmetrics_exporter)
            super().shutdown()  # type: ignore[no-untyped-call]

    return OTLPSpanProcessor


def _options(endpoint: str | None, timeout_s: float | None, signal: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if endpoint is not None:
        kwargs["endpoint"] = endpoint
        kwargs["insecure"] = not endpoint.startswith("https://")
    timeout = timeout_s if timeout_s is not None else otlp_timeout_s(signal)
    if timeout is not None:
        kwargs["timeout"] = timeout
    check_tls_files(signal)
    check_compression(signal)
    check_headers(signal)
    check_insecure(signal)
    return kwargs


#: The histogram aggregations OTLP can carry, by the names the OTel specification gives them in
#: ``OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION``.
EXPLICIT_HISTOGRAM = "explicit_bucket_histogram"
EXPONENTIAL_HISTOGRAM = "base2_exponential_bucket_histogram"
HISTOGRAM_AGGREGATIONS = (EXPLICIT_HISTOGRAM, EXPONENTIAL_HISTOGRAM)


#: What ``OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`` takes (in any case).
TEMPORALITY_PREFERENCES = ("cumulative", "delta", "lowmemory")


def check_metric_preferences() -> None:
    """Refuse, naming it, a temporality preference or a default histogram aggregation that is
    none: the SDK's OTLP metric exporters replace it with cumulative points and explicit
    buckets after a line of their own, so a backend that asked for deltas got totals."""
    name = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"
    temporality = os.environ.get(name, "").strip()
    if temporality and temporality.lower() not in TEMPORALITY_PREFERENCES:
        raise ConfigurationError(
            f"{name}={temporality!r} is none of {', '.join(TEMPORALITY_PREFERENCES)} (in any "
            "case; unset: cumulative)"
        )
    name = "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION"
    aggregation = os.environ.get(name, "")
    if aggregation and aggregation not in HISTOGRAM_AGGREGATIONS:
        raise ConfigurationError(
            f"{name}={aggregation!r} is none of {', '.join(HISTOGRAM_AGGREGATIONS)} (spelt "
            f"exactly so; unset: {EXPLICIT_HISTOGRAM})"
        )


def histogram_preference(
    histogram_aggregation: str | None, exporter: str = "otlp"
) -> dict[str, Any]:
    """The metric exporter's ``preferred_aggregation`` for ``histogram_aggregation`` (the
    option of ``exporter``, which a mistake names); none when it is None, so the SDK reads
    the standard variable itself. The preference is this
    reader's alone: a Prometheus reader beside it keeps explicit buckets (its exporter drops
    exponential histograms on SDK 1.44 and 1.45)."""
    if histogram_aggregation is None:
        return {}
    if histogram_aggregation not in HISTOGRAM_AGGREGATIONS:
        raise ConfigurationError(
            f"exporter {exporter!r}: histogram_aggregation must be one of "
            f"{HISTOGRAM_AGGREGATIONS} "
            f"(as OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION), "
            f"got {histogram_aggregation!r}"
        )
    from opentelemetry.sdk.metrics import Histogram
    from opentelemetry.sdk.metrics.view import (
        ExplicitBucketHistogramAggregation,
        ExponentialBucketHistogramAggregation,
    )

    aggregation = (
        ExponentialBucketHistogramAggregation()
        if histogram_aggregation == EXPONENTIAL_HISTOGRAM
        # No boundaries: each histogram's own buckets (its spec's advisory) still apply.
        else ExplicitBucketHistogramAggregation()
    )
    return {"preferred_aggregation": {Histogram: aggregation}}


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
) -> Exporter:
    """An OTLP gRPC metric exporter on a periodic reader and a span exporter behind a batch
    processor, both to one collector.

    :param endpoint: ``host:port`` or a URL (``https://`` means TLS) for both; default from
        ``OTEL_EXPORTER_OTLP_{METRICS,TRACES}_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``,
        else the SDK's ``localhost:4317``.
    :param timeout_s: seconds per export, retries included; default :func:`otlp_timeout_s`.
    :param histogram_aggregation: ``"base2_exponential_bucket_histogram"`` exports every
        histogram as an exponential histogram, ``"explicit_bucket_histogram"`` with its
        declared buckets; default from ``OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION``,
        else explicit.

    ``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`` (or both signals' own ``_PROTOCOL``
    variables) makes it the :mod:`~rlmetrics.exporters.otlp_http` exporter instead, as the
    OpenTelemetry specification says (the SDK reads the histogram variable there itself); a
    different protocol per signal is refused.
    """
    from . import otlp_http  # it builds on this module: imported when chosen

    if otlp_http.chosen_protocol() == otlp_http.HTTP_PROTOBUF:
        return otlp_http.make_exporter(
            export_interval_s, endpoint, timeout_s, histogram_aggregation, named="otlp"
        )
    check_metric_preferences()
    preference = histogram_preference(histogram_aggregation)
    exporter = _exporter_class()(**_options(endpoint, timeout_s, "metrics"), **preference)
    reader = periodic_reader(exporter, export_interval_s, _reader_class())
    try:
        spans = _span_exporter_class()(**_options(endpoint, timeout_s, "traces"))
        processor = batch_span_processor(spans, export_interval_s, _processor_class())
    except BaseException:
        reader.shutdown(timeout_millis=1000)
        raise
    return Exporter(reader, span_processor=processor)


@hookimpl
def register_exporters(register: Callable[[str, Callable[..., Exporter]], None]) -> None:
    register("otlp", make_exporter)
