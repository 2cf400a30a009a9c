"""Real peers for the exporter tests: an OTLP gRPC metrics receiver and a Prometheus server,
plus the series every exporter test declares and records.

Both listen on 127.0.0.1 only. Every wait polls with a deadline; nothing sleeps a fixed time
hoping something happened.
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import attrs
import pytest

import rlmetrics
from rlmetrics import testing

grpc = pytest.importorskip("grpc", reason="the OTLP receiver needs grpcio")
metrics_service_pb2_grpc = pytest.importorskip(
    "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc",
    reason="the OTLP receiver needs opentelemetry-proto",
)
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2  # noqa: E402

#: Generous upper bound for anything that should happen within a few export intervals.
WAIT_S = 15.0
#: Export interval of the push readers in these tests.
INTERVAL_S = 0.2


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout_s: float = WAIT_S, what: str = "") -> Any:
    """:func:`rlmetrics.testing.wait_until` with these tests' bound."""
    return testing.wait_until(predicate, timeout_s, what)


# -- OTLP gRPC receiver -----------------------------------------------------------------------


@attrs.frozen
class OtlpPoint:
    """One data point as it arrived on the wire, with its metric and resource."""

    name: str
    unit: str
    description: str
    kind: str  # "gauge", "sum", "histogram"
    monotonic: bool | None
    temporality: int | None
    attributes: dict[str, Any]
    resource: dict[str, Any]
    scope: str
    value: float | int | None = None
    count: int | None = None
    sum: float | None = None
    bucket_counts: tuple[int, ...] = ()
    bounds: tuple[float, ...] = ()


def _any_value(value: Any) -> Any:
    field = value.WhichOneof("value")
    return None if field is None else getattr(value, field)


def _key_values(items: Any) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in items}


def flatten_request(request: Any) -> list[OtlpPoint]:
    """Every data point of one ``ExportMetricsServiceRequest``."""
    out: list[OtlpPoint] = []
    for rm in request.resource_metrics:
        resource = _key_values(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                data = getattr(metric, kind)
                common: dict[str, Any] = {
                    "name": metric.name,
                    "unit": metric.unit,
                    "description": metric.description,
                    "kind": kind,
                    "monotonic": data.is_monotonic if kind == "sum" else None,
                    "temporality": getattr(data, "aggregation_temporality", None),
                    "resource": resource,
                    "scope": sm.scope.name,
                }
                for dp in data.data_points:
                    attributes = _key_values(dp.attributes)
                    if kind == "histogram":
                        out.append(
                            OtlpPoint(
                                attributes=attributes,
                                count=dp.count,
                                sum=dp.sum,
                                bucket_counts=tuple(dp.bucket_counts),
                                bounds=tuple(dp.explicit_bounds),
                                **common,
                            )
                        )
                    elif kind in ("gauge", "sum"):
                        value = getattr(dp, dp.WhichOneof("value"))
                        out.append(OtlpPoint(attributes=attributes, value=value, **common))
    return out


class _Servicer(metrics_service_pb2_grpc.MetricsServiceServicer):  # type: ignore[misc,name-defined]
    def __init__(self, receiver: OtlpReceiver) -> None:
        self.receiver = receiver

    def Export(self, request: Any, context: Any) -> Any:
        return self.receiver._handle(request, context)


class OtlpReceiver:
    """A real OTLP gRPC metrics endpoint on 127.0.0.1, recording what it receives.

    ``reject_with`` makes it answer every request with that (non-retryable) status, as a
    collector that refuses our data would; ``stop()`` and ``start()`` take it down and bring
    it back on the same port.
    """

    def __init__(self) -> None:
        self.port = 0
        self._server: Any = None
        self._cond = threading.Condition()
        self.requests: list[Any] = []
        self.rejected = 0
        self.reject_with: Any = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> OtlpReceiver:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Servicer(self), server)
        port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        if port == 0:
            raise RuntimeError(f"could not bind the OTLP receiver to 127.0.0.1:{self.port}")
        server.start()
        self.port, self._server = port, server
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace=None).wait(5)

    @property
    def running(self) -> bool:
        return self._server is not None

    def _handle(self, request: Any, context: Any) -> Any:
        with self._cond:
            status = self.reject_with
            if status is not None:
                self.rejected += 1
            else:
                self.requests.append(request)
            self._cond.notify_all()
        if status is not None:
            context.abort(status, "rlmetrics test receiver rejects this request")
        return metrics_service_pb2.ExportMetricsServiceResponse()

    def points(self) -> list[OtlpPoint]:
        with self._cond:
            requests = list(self.requests)
        return [p for r in requests for p in flatten_request(r)]

    def latest(self) -> dict[tuple[str, frozenset[tuple[str, Any]]], OtlpPoint]:
        """The last point received for each (name, attribute set)."""
        return {(p.name, frozenset(p.attributes.items())): p for p in self.points()}

    def wait_for(
        self, predicate: Callable[[OtlpReceiver], Any], timeout_s: float = WAIT_S, what: str = ""
    ) -> Any:
        """Wait, woken by each arriving request, until ``predicate(self)`` is truthy."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                result = predicate(self)
                if result:
                    return result
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"OTLP receiver: timed out after {timeout_s:.1f} s waiting for "
                        f"{what or predicate}; {len(self.requests)} requests received, "
                        f"{self.rejected} rejected"
                    )
                self._cond.wait(min(remaining, 0.5))

    def find(self, name: str, **attributes: Any) -> OtlpPoint | None:
        """The latest point named ``name`` whose attributes equal ``attributes``."""
        return self.latest().get((name, frozenset(attributes.items())))


# -- log capture ------------------------------------------------------------------------------


class WarnOnceLog:
    """The ``rlmetrics`` logger's records, captured from every thread, with a way to wait."""

    def __init__(self) -> None:
        self.records: list[logging.LogRecord] = []
        self._cond = threading.Condition()

    def add(self, record: logging.LogRecord) -> None:
        with self._cond:
            self.records.append(record)
            self._cond.notify_all()

    def matching(self, text: str, level: int | None = None) -> list[logging.LogRecord]:
        with self._cond:
            records = list(self.records)
        return [
            r for r in records if text in r.getMessage() and (level is None or r.levelno == level)
        ]

    def wait_for(self, text: str, count: int = 1, timeout_s: float = WAIT_S) -> None:
        """Wait until at least ``count`` records (any level) contain ``text``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self.matching(text)) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"timed out after {timeout_s:.1f} s waiting for {count} log records "
                        f"containing {text!r}; got {[r.getMessage() for r in self.records]}"
                    )
                self._cond.wait(min(remaining, 0.5))

    def wait_for_any(self, timeout_s: float) -> None:
        """Return when a new record arrives or after ``timeout_s``, whichever is first."""
        with self._cond:
            seen = len(self.records)
            self._cond.wait_for(lambda: len(self.records) > seen, timeout=timeout_s)


class _ListHandler(logging.Handler):
    def __init__(self, log: WarnOnceLog) -> None:
        super().__init__(logging.DEBUG)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        self.log.add(record)


# -- Prometheus server ------------------------------------------------------------------------

REQUIRE_PROMETHEUS_ENV = "RLMETRICS_REQUIRE_PROMETHEUS"


class PrometheusServer:
    """Debian's ``prometheus`` binary scraping one target every second, on 127.0.0.1."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.workdir = workdir
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, target: tuple[str, int]) -> PrometheusServer:
        host, port = target
        config = self.workdir / "prometheus.yml"
        config.write_text(
            "global:\n"
            "  scrape_interval: 1s\n"
            "  evaluation_interval: 1s\n"
            "scrape_configs:\n"
            "  - job_name: rlmetrics\n"
            "    scrape_interval: 1s\n"
            "    scrape_timeout: 900ms\n"
            "    static_configs:\n"
            f"      - targets: ['{host}:{port}']\n"
        )
        self.port = free_port()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    f"--config.file={config}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        wait_until(self._ready, what="the Prometheus server to be ready")
        return self

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise AssertionError(
                f"prometheus exited with {self.process.returncode}:\n{self.log_tail()}"
            )
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to: ``[{"metric": {...}, "value": [t, "v"]}]``."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus query {expr!r} failed: {body}")
        return list(body["data"]["result"])

    def wait_for(
        self,
        expr: str,
        check: Callable[[list[dict[str, Any]]], Any] = bool,
        timeout_s: float = 30.0,
    ) -> list[dict[str, Any]]:
        """Poll ``expr`` until ``check(result)`` holds, failing after ``timeout_s``."""
        last: list[dict[str, Any]] = []

        def probe() -> bool:
            nonlocal last
            last = self.query(expr)
            return bool(check(last))

        try:
            wait_until(probe, timeout_s, what=f"Prometheus to return {expr!r}")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; last result {last}; targets {self.targets()}\n{self.log_tail()}"
            ) from None
        return last

    def metadata(self) -> dict[str, dict[str, Any]]:
        """Per metric family, what Prometheus learnt from the scrape: type, help, unit."""
        with urllib.request.urlopen(f"{self.url}/api/v1/metadata", timeout=5) as response:
            return {name: entries[0] for name, entries in json.load(response)["data"].items()}

    def targets(self) -> Any:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=5) as response:
                return [
                    (t.get("scrapeUrl"), t.get("health"), t.get("lastError"))
                    for t in json.load(response)["data"]["activeTargets"]
                ]
        except Exception as exc:
            return repr(exc)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


# -- the series every exporter test records ---------------------------------------------------

GROUP = "exporters-test"
GAUGE = "rl.test.step.duration"
COUNTER = "rl.test.tokens"
UP_DOWN = "rl.test.requests.in_flight"
HISTOGRAM = "rl.test.batch.duration"
BUCKETS = (0.1, 1.0, 10.0)


def declare_test_series() -> None:
    """One series of each recorded kind, with attributes and units that Prometheus translates."""
    rlmetrics.declare(
        GROUP,
        [
            rlmetrics.MetricSpec(
                GAUGE,
                rlmetrics.Kind.GAUGE,
                unit="s",
                key="step_time",
                description="Wall clock of one step",
                attributes={"rl.phase": {"train", "eval"}},
            ),
            rlmetrics.MetricSpec(
                COUNTER,
                rlmetrics.Kind.COUNTER,
                unit="{token}",
                key="tokens",
                description="Tokens processed",
                attributes={"gen_ai.token.type": {"input", "output"}},
            ),
            rlmetrics.MetricSpec(
                UP_DOWN,
                rlmetrics.Kind.UP_DOWN_COUNTER,
                unit="{request}",
                key="in_flight",
                description="Requests in flight",
            ),
            rlmetrics.MetricSpec(
                HISTOGRAM,
                rlmetrics.Kind.HISTOGRAM,
                unit="s",
                key="batch_time",
                description="Wall clock of one batch",
                buckets=BUCKETS,
                attributes={"worker": rlmetrics.OPEN},
            ),
        ],
    )


def record_test_series(scale: int = 1) -> None:
    """Record a known set of values (``scale`` multiplies them, to tell rounds apart)."""
    rlmetrics.record(GROUP, {"step_time": 1.5 * scale}, attributes={"rl.phase": "train"})
    rlmetrics.record(GROUP, {"step_time": 0.25 * scale}, attributes={"rl.phase": "eval"})
    rlmetrics.record(GROUP, {"tokens": 100 * scale}, attributes={"gen_ai.token.type": "input"})
    rlmetrics.record(GROUP, {"tokens": 40 * scale}, attributes={"gen_ai.token.type": "output"})
    rlmetrics.record(GROUP, {"in_flight": 5 * scale})
    rlmetrics.record(GROUP, {"in_flight": -2 * scale})
    for seconds in (0.05, 0.5, 0.7, 20.0):
        rlmetrics.record(GROUP, {"batch_time": seconds * scale}, attributes={"worker": "w0"})
