"""Real peers for the exporter tests: a Prometheus server (the OTLP receiver is
:class:`rlmetrics.testing.OtlpReceiver`, the log capture
:func:`rlmetrics.testing.captured_log`), plus the series every exporter test declares and
records.

The server listens on 127.0.0.1 only. Every wait polls with a deadline; nothing sleeps a fixed time
hoping something happened.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import rlmetrics
from rlmetrics import testing

# rlmetrics.testing's OtlpReceiver needs both: skip these tests where the otlp extra is missing.
pytest.importorskip("grpc", reason="the OTLP receiver needs grpcio")
pytest.importorskip(
    "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2_grpc",
    reason="the OTLP receiver needs opentelemetry-proto",
)


def certificate_for_localhost(folder: Path) -> tuple[Path, Path]:
    """A private key and a self-signed certificate for 127.0.0.1 (a private CA of one) in
    ``folder``, made by openssl: what a collector serving TLS is given."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl to make a certificate with")
    key, certificate = folder / "collector.key", folder / "collector.pem"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"),
            *("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(certificate)),
        ],
        check=True,
        capture_output=True,
    )
    return key, certificate


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
