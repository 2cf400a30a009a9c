"""The ``otlp_file`` exporter: spans as OTLP/JSON lines in a file, for a run without a collector.

``rlmetrics.start(exporters={"otlp_file": {"path": "run/traces.jsonl"}})``: every batch of
finished spans is appended as one line, an ``ExportTraceServiceRequest`` in OTLP's JSON
encoding — lowerCamelCase fields, trace and span ids as hex strings, enums as integers — the
format the OpenTelemetry Collector's file exporter writes and its ``otlpjsonfile`` receiver
reads back. ``rlmetrics report RUN.jsonl --traces run/traces.jsonl`` reads it.

The encoding is the OTLP exporter's own (``encode_spans``, from the ``otlp`` extra), turned
into JSON by protobuf's ``json_format`` with the ids rewritten from base64 to hex, as OTLP/JSON
requires. Lines are appended with one ``write(2)`` each on a descriptor opened for appending, so
several processes of a run (the driver, its workers) may share one file; a torn last line (a
crash mid-write) is skipped by the reader. Spans carry no metrics: the run's JSONL does.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .. import hookimpl
from .._warn import warn_once
from ..backends.jsonl import SkippedLines, _numbered, open_regular
from ..configuration import FILE_PATH, declare_options
from ..telemetry import TelemetryError
from . import Exporter, ForkSafeSpans, batch_span_processor

__all__ = [
    "DEFAULT_PATH",
    "encode_line",
    "hex_ids",
    "make_exporter",
    "read_spans",
    "span_attributes",
]

INSTALL_HINT = "pip install 'rlmetrics[otlp]'"
DEFAULT_PATH = "traces.otlp.jsonl"
#: The fields of a span (and of its links) that OTLP/JSON writes as hex, not base64.
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def hex_ids(request: dict[str, Any]) -> dict[str, Any]:
    """Rewrite the ids of a ``MessageToDict``'d trace request from base64 (protobuf's JSON for
    bytes) to hex (OTLP/JSON's), in place; returns it."""
    for resource_spans in request.get("resourceSpans", ()):
        for scope_spans in resource_spans.get("scopeSpans", ()):
            for span in scope_spans.get("spans", ()):
                for item in (span, *span.get("links", ())):
                    for field in _ID_FIELDS:
                        if item.get(field):
                            item[field] = base64.b64decode(item[field]).hex()
    return request


def encode_line(spans: Sequence[Any]) -> str:
    """``spans`` (the SDK's ``ReadableSpan`` s) as one OTLP/JSON line, newline included."""
    from google.protobuf import json_format  # type: ignore[import-untyped]
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    request = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    return json.dumps(hex_ids(request), separators=(",", ":")) + "\n"


def read_spans(
    path: str | os.PathLike[str], skipped: SkippedLines | None = None
) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """``(resource attributes, span)`` for every span of an OTLP/JSON lines file, the span as
    its JSON object. A line that is no trace request (torn by a crash, not JSON, another
    tool's output) is skipped, and counted into ``skipped`` when given: a reader says how
    many, so a damaged line costs only itself and is never lost unsaid. A file compressed
    where it lies (logrotate's ``traces.jsonl.1.gz``, bz2, xz) is read as the metrics JSONL is
    (:func:`~rlmetrics.backends.jsonl.open_regular`), one cut short up to the cut, counted as
    a skipped line; a path that is no regular file (a FIFO, a device) is ``ValueError``."""
    bad = SkippedLines() if skipped is None else skipped
    with open_regular(path) as handle:
        for number, line in _numbered(handle, bad):
            if not line.strip():
                continue
            try:
                request = json.loads(line)
            except (ValueError, RecursionError):
                bad.add(number, "a torn last line" if not line.endswith("\n") else "not JSON")
                continue
            if not isinstance(request, dict) or not isinstance(request.get("resourceSpans"), list):
                bad.add(number, "not an OTLP/JSON trace request")
                continue
            for resource_spans in request["resourceSpans"]:
                if not isinstance(resource_spans, dict):
                    continue
                resource = _attributes((resource_spans.get("resource") or {}).get("attributes"))
                for scope_spans in resource_spans.get("scopeSpans") or ():
                    if not isinstance(scope_spans, dict):
                        continue
                    for span in scope_spans.get("spans") or ():
                        if isinstance(span, dict):
                            yield resource, span


def _attributes(items: Any) -> dict[str, Any]:
    """OTLP/JSON ``[{key, value: {stringValue|intValue|...}}]`` as a plain dict."""
    out: dict[str, Any] = {}
    for item in items or ():
        try:
            key, value = item["key"], item.get("value") or {}
        except (TypeError, KeyError):
            continue
        out[key] = _value(value)
    return out


def _value(value: dict[str, Any]) -> Any:
    for field, convert in (
        ("stringValue", str),
        ("boolValue", bool),
        ("intValue", int),
        ("doubleValue", float),
    ):
        if field in value:
            try:
                return convert(value[field])
            except (TypeError, ValueError):
                return None
    if "arrayValue" in value:
        return [_value(v) for v in (value["arrayValue"] or {}).get("values") or ()]
    return None


def span_attributes(span: dict[str, Any]) -> dict[str, Any]:
    """A span's attributes (from its OTLP/JSON object) as a plain dict."""
    return _attributes(span.get("attributes"))


def _exporter_class() -> type:
    try:
        from google.protobuf import json_format  # type: ignore[import-untyped]  # noqa: F401
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import (  # noqa: F401
            encode_spans,
        )
    except ImportError as exc:
        raise ImportError(
            f"exporter 'otlp_file' encodes spans with the OTLP exporter's encoder: {INSTALL_HINT}"
        ) from exc
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class OtlpJsonFileSpanExporter(ForkSafeSpans, SpanExporter):  # type: ignore[misc]
        """Appends each batch of spans to ``path`` as one OTLP/JSON line."""

        def __init__(self, path: str | os.PathLike[str]) -> None:
            super().__init__()
            self.path = Path(path)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # A descriptor, not a buffered file: each line is one write(2) of its own, and a
            # write that fails (a full disk) keeps nothing back to be written later (after its
            # spans were counted as dropped) or to fail again at close.
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
            self._fd: int | None = os.open(self.path, flags, 0o666)
            self._torn = False  # the last line was written only in part: end it first
            self._lock = threading.Lock()

        def export(self, spans: Sequence[Any]) -> Any:
            try:
                data = encode_line(spans).encode("utf-8")
                with self._lock:
                    if self._fd is None:
                        return SpanExportResult.FAILURE
                    if self._torn:
                        data = b"\n" + data  # the torn line stays one line, skipped alone
                    written = os.write(self._fd, data)
                    self._torn = 0 < written < len(data)
                    if written < len(data):
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            except OSError as error:
                warn_once(
                    f"otlp_file:export:{self.path}",
                    f"rlmetrics: writing spans to {self.path} failed "
                    f"({error.strerror or error}); these spans are dropped and training goes on",
                    expected=True,
                )
                return SpanExportResult.FAILURE
            except Exception:
                warn_once(
                    f"otlp_file:export:{self.path}",
                    f"rlmetrics: writing spans to {self.path} failed; these spans are dropped "
                    "and training goes on",
                )
                return SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            with self._lock:
                fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)

        def force_flush(self, timeout_millis: int = 30_000) -> bool:
            return True

    return OtlpJsonFileSpanExporter


@declare_options(path=FILE_PATH)
def make_exporter(
    export_interval_s: float | None = None, path: str | os.PathLike[str] = DEFAULT_PATH
) -> Exporter:
    """Spans appended to ``path`` (created with its folder), one OTLP/JSON line per batch; a
    path that cannot be written is a :class:`~rlmetrics.TelemetryError` saying so."""
    try:
        exporter = _exporter_class()(path)
    except OSError as exc:
        raise TelemetryError(
            f"the OTLP file exporter cannot append to {path} ({exc.strerror or exc}); choose a "
            "writable file path: start(exporters={'otlp_file': {'path': ...}})"
        ) from None  # the message says all the exception did
    return Exporter(span_processor=batch_span_processor(exporter, export_interval_s))


@hookimpl
def register_exporters(register: Callable[[str, Callable[..., Exporter]], None]) -> None:
    register("otlp_file", make_exporter)
