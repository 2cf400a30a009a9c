"""rlmetrics' Prometheus endpoint: the names it serves, and a real Prometheus server scraping it."""

from __future__ import annotations

import logging
import re
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import rlmetrics
from rlmetrics.testing import OtlpReceiver, in_memory_telemetry, isolated_state

from ._peers import (
    GROUP,
    INTERVAL_S,
    PrometheusServer,
    declare_test_series,
    record_test_series,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "exporters.md"
_CODE = re.compile(r"`([^`]*)`")

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def _translation_rows() -> list[dict[str, object]]:
    """The name-translation table of docs/exporters.md, parsed."""
    text = DOCS.read_text()
    start, end = "<!-- prometheus-names:start -->", "<!-- prometheus-names:end -->"
    assert start in text and end in text, f"{DOCS} lost its translation table markers"
    rows = []
    for line in text.split(start, 1)[1].split(end, 1)[0].strip().splitlines()[2:]:
        name, kind, unit, attribute, samples = (c.strip() for c in line.strip("|").split("|"))
        attr = _CODE.findall(attribute)
        rows.append(
            {
                "name": _CODE.findall(name)[0],
                "kind": rlmetrics.Kind(kind),
                "unit": _CODE.findall(unit)[0],
                "attribute": attr[0] if attr else None,
                "label": attr[1] if attr else None,
                "samples": _CODE.findall(samples),
            }
        )
    assert len(rows) >= 10
    return rows


def _scrape(address: tuple[str, int]) -> str:
    with urllib.request.urlopen(f"http://{address[0]}:{address[1]}/metrics", timeout=5) as r:
        return str(r.read().decode())


def test_documented_name_translations_hold() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    rows = _translation_rows()
    specs = []
    for row in rows:
        attributes = {row["attribute"]: rlmetrics.OPEN} if row["attribute"] else {}
        callback = None
        if row["kind"].observable:  # type: ignore[attr-defined]
            observed = [(1, {row["attribute"]: "x"} if row["attribute"] else {})]

            def callback(observed: list[object] = observed) -> list[object]:
                return observed

        specs.append(
            rlmetrics.MetricSpec(
                row["name"],
                row["kind"],
                unit=row["unit"],
                attributes=attributes,  # type: ignore[arg-type]
                callback=callback,
            )
        )
    # A registry of its own: the real families may already hold these names.
    with isolated_state(rlmetrics.MetricRegistry()):
        rlmetrics.declare("translation", specs)
        handle = rlmetrics.start(exporters=("prometheus",), prometheus_port=0)
        for row in rows:
            if not row["kind"].observable:  # type: ignore[attr-defined]
                labels = {row["attribute"]: "x"} if row["attribute"] else {}
                rlmetrics.record("translation", {row["name"]: 1}, attributes=labels)  # type: ignore[dict-item]
        assert handle.prometheus_address is not None
        exposition = _scrape(handle.prometheus_address)

    served: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            served.setdefault(sample.name, set()).update(sample.labels)
    expected = set()
    for row in rows:
        for sample in row["samples"]:  # type: ignore[attr-defined]
            expected.add(sample)
            assert sample in served, f"{row['name']} ({row['unit']}): {sample} not served"
            assert {"otel_scope_name", "otel_scope_version"} <= served[sample]
            if row["label"]:
                assert row["label"] in served[sample], f"{sample} lacks label {row['label']}"
    # The resource, and whether the run ended (served beside every run's series).
    assert set(served) - expected == {"target_info", "rlmetrics_run_ended"}, (
        "undocumented series served"
    )


def test_prometheus_server_scrapes_translated_series(
    prometheus_server: Callable[[tuple[str, int]], PrometheusServer],
) -> None:
    declare_test_series()
    with rlmetrics.start(
        "prom-scrape-test", run_id="run-prom-1", exporters=("prometheus",), prometheus_port=0
    ) as handle:
        address = handle.prometheus_address
        assert address is not None and address[0] == "127.0.0.1"
        record_test_series()
        server = prometheus_server(address)
        instance = f"127.0.0.1:{address[1]}"

        def one(expr: str, value: float, scoped: bool = True) -> dict[str, str]:
            """Wait until ``expr`` is one series of ``value``; return its labels."""
            result = server.wait_for(
                expr, lambda r: len(r) == 1 and float(r[0]["value"][1]) == value
            )
            labels = dict(result[0]["metric"])
            assert labels["job"] == "rlmetrics" and labels["instance"] == instance
            if scoped:
                assert labels["otel_scope_name"] == "rlmetrics"
            return labels

        tokens = one('rl_test_tokens_total{gen_ai_token_type="input"}', 100)
        assert tokens["__name__"] == "rl_test_tokens_total"
        one('rl_test_tokens_total{gen_ai_token_type="output"}', 40)
        one('rl_test_step_duration_seconds{rl_phase="train"}', 1.5)
        one('rl_test_step_duration_seconds{rl_phase="eval"}', 0.25)
        assert set(one("rl_test_requests_in_flight", 3)) == {
            "__name__",
            "job",
            "instance",
            "otel_scope_name",
            "otel_scope_version",
        }
        one('rl_test_batch_duration_seconds_count{worker="w0"}', 4)
        one('rl_test_batch_duration_seconds_sum{worker="w0"}', 21.25)
        one('rl_test_batch_duration_seconds_bucket{worker="w0",le="1.0"}', 3)
        one('rl_test_batch_duration_seconds_bucket{worker="w0",le="+Inf"}', 4)
        info = one('target_info{rlmetrics_run_id="run-prom-1"}', 1, scoped=False)
        assert info["service_name"] == "prom-scrape-test"

        # Prometheus typed the families as the OTel instruments say.
        metadata = server.metadata()
        assert metadata["rl_test_tokens"]["type"] == "counter"
        assert metadata["rl_test_step_duration_seconds"]["type"] == "gauge"
        assert metadata["rl_test_step_duration_seconds"]["unit"] == "seconds"
        assert metadata["rl_test_requests_in_flight"]["type"] == "gauge"
        assert metadata["rl_test_batch_duration_seconds"]["type"] == "histogram"
        assert metadata["rl_test_tokens"]["help"] == "Tokens processed"

        # Later recordings reach the server through the next scrapes.
        record_test_series()
        rlmetrics.record(GROUP, {"step_time": 9.0}, attributes={"rl.phase": "train"})
        one('rl_test_tokens_total{gen_ai_token_type="input"}', 200)
        one('rl_test_step_duration_seconds{rl_phase="train"}', 9.0)
        one("rl_test_requests_in_flight", 6)


QUERYING = Path(__file__).resolve().parents[2] / "docs" / "querying.md"
#: docs/querying.md's query for the series that folded attribute sets past their cap.
OVERFLOWED = 'count by (__name__) ({otel_metric_overflow="true"})'


def test_the_documented_overflow_query_finds_a_capped_series(
    prometheus_server: Callable[[tuple[str, int]], PrometheusServer],
) -> None:
    assert OVERFLOWED in QUERYING.read_text()
    rlmetrics.declare(
        GROUP,
        [
            rlmetrics.MetricSpec(
                "rl.test.capped",
                rlmetrics.Kind.COUNTER,
                unit="{request}",
                description="Requests by host, capped at two hosts",
                key="capped",
                attributes={"host.name": rlmetrics.OPEN},
                max_series=2,
            )
        ],
    )
    with rlmetrics.start(exporters=("prometheus",), prometheus_port=0) as handle:
        address = handle.prometheus_address
        assert address is not None
        for host in ("a", "b", "c", "d", "c"):
            rlmetrics.record(GROUP, {"capped": 1}, {"host.name": host})
        # The exposition's own line: the SDK's overflow attribute and no host (the exporter
        # gives every sample of a family the same labels, empty where a point has none).
        (line,) = [
            line
            for line in _scrape(address).splitlines()
            if line.startswith("rl_test_capped_total{") and 'otel_metric_overflow="true"' in line
        ]
        assert 'host_name=""' in line and line.endswith(" 3.0"), line
        server = prometheus_server(address)
        found = server.wait_for(OVERFLOWED, lambda r: len(r) == 1)
        assert found[0]["metric"] == {"__name__": "rl_test_capped_total"}
        assert float(found[0]["value"][1]) == 1
        total = server.wait_for("sum(rl_test_capped_total)", bool)
        assert float(total[0]["value"][1]) == 5  # every request counted: none dropped


def test_prometheus_endpoint_binds_loopback_and_closes_on_shutdown() -> None:
    declare_test_series()
    handle = rlmetrics.start(exporters=("prometheus",), prometheus_port=0)
    address = handle.prometheus_address
    assert address is not None and address[0] == "127.0.0.1"
    # What the socket is bound to, not what rlmetrics reports: loopback, never every interface.
    bound = {host for host, port in _listening_ports() if port == address[1]}
    assert bound == {"127.0.0.1"}
    record_test_series()
    assert "rl_test_tokens_total" in _scrape(address)
    handle.shutdown(timeout_s=2)
    with pytest.raises(OSError):
        _scrape(address)
    assert address not in _listening_ports()


def _listening_ports() -> set[tuple[str, int]]:
    """The TCP addresses this process listens on."""
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.Process().net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN
    }


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that another listener holds for the whole test."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        yield int(holder.getsockname()[1])
    finally:
        holder.close()


@pytest.mark.parametrize("through", ["argument", "environment"])
def test_a_taken_port_fails_start_clearly_and_leaves_nothing_running(
    through: str,
    taken_port: int,
    otlp_receiver: OtlpReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads_before = {t.ident for t in threading.enumerate()}
    listening_before = _listening_ports()
    options: dict[str, Any] = {"prometheus_port": taken_port}
    if through == "environment":
        monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", str(taken_port))
        options = {}
    with pytest.raises(rlmetrics.TelemetryError) as raised:
        # The OTLP exporter is built first: its reader thread must be stopped again.
        rlmetrics.start(
            exporters=["otlp", "prometheus"],
            otlp_endpoint=otlp_receiver.endpoint,
            export_interval_s=INTERVAL_S,
            **options,
        )
    message = str(raised.value)
    assert f"127.0.0.1:{taken_port}" in message
    assert "prometheus_port" in message and "OTEL_EXPORTER_PROMETHEUS_PORT" in message
    assert rlmetrics.current() is None and not rlmetrics.is_exporting()
    left = [t.name for t in threading.enumerate() if t.ident not in threads_before]
    assert not left, f"threads left running: {left}"
    assert _listening_ports() == listening_before
    # Nothing half-started blocks the next attempt.
    monkeypatch.delenv("OTEL_EXPORTER_PROMETHEUS_PORT", raising=False)
    with rlmetrics.start(exporters=["prometheus"], prometheus_port=0) as handle:
        assert handle.prometheus_address is not None


def test_the_prometheus_variables_only_matter_to_the_prometheus_exporter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "")
    with in_memory_telemetry() as (handle, _reader):
        assert handle.exporting
    monkeypatch.setenv("OTEL_EXPORTER_PROMETHEUS_PORT", "not-a-port")
    with in_memory_telemetry() as (handle, _reader):
        assert handle.exporting
    with pytest.raises(rlmetrics.TelemetryError, match="PROMETHEUS_PORT='not-a-port'"):
        rlmetrics.start(exporters=["prometheus"])
    assert rlmetrics.current() is None


def _promtool_findings(promtool: str, exposition: str) -> list[str]:
    import subprocess

    done = subprocess.run(
        [promtool, "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60
    )
    return [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]


def test_a_flush_before_a_scrape_serves_each_family_once(promtool: str) -> None:
    """``force_flush`` collects through every reader; the SDK's Prometheus reader queued that
    collection and served it beside the next scrape's, every family twice."""
    declare_test_series()
    with rlmetrics.start(exporters=("prometheus",), prometheus_port=0) as handle:
        record_test_series(1)
        handle.force_flush(timeout_s=5)
        handle.force_flush(timeout_s=5)
        assert handle.prometheus_address is not None
        exposition = _scrape(handle.prometheus_address)
    helps = re.findall(r"^# HELP (\S+)", exposition, flags=re.M)
    assert helps and len(helps) == len(set(helps)), "a family served twice"
    assert _promtool_findings(promtool, exposition) == []


def test_concurrent_scrapes_each_get_one_whole_exposition() -> None:
    declare_test_series()
    with rlmetrics.start(exporters=("prometheus",), prometheus_port=0) as handle:
        record_test_series(1)
        address = handle.prometheus_address
        assert address is not None
        results: list[str] = []
        threads = [
            threading.Thread(target=lambda: results.append(_scrape(address))) for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert len(results) == 8
    for exposition in results:
        helps = re.findall(r"^# HELP (\S+)", exposition, flags=re.M)
        assert len(helps) == len(set(helps))


def test_a_name_ending_in_its_unit_says_the_unit_once_and_otlp_keeps_it(
    promtool: str, otlp_receiver: OtlpReceiver
) -> None:
    spec = rlmetrics.MetricSpec(
        "acme.wait_ms",
        rlmetrics.Kind.HISTOGRAM,
        unit="ms",
        buckets=[1.0, 10.0],
        description="Time one acme waited",
    )
    receiver = otlp_receiver
    with isolated_state(rlmetrics.MetricRegistry()):
        rlmetrics.declare("acme", [spec])
        with rlmetrics.start(
            exporters=("prometheus", "otlp"), prometheus_port=0, otlp_endpoint=receiver.endpoint
        ) as handle:
            rlmetrics.record("acme", {"acme.wait_ms": 5.0})
            assert handle.prometheus_address is not None
            exposition = _scrape(handle.prometheus_address)
            handle.force_flush(timeout_s=10)
        assert "acme.wait_ms" in {p.name for p in receiver.points()}
    assert "acme_wait_milliseconds_bucket" in exposition
    assert "_ms_" not in exposition
    # promtool asks for the base unit (the spec fixes milliseconds) and nothing else.
    assert _promtool_findings(promtool, exposition) == [
        'acme_wait_milliseconds use base unit "seconds" instead of "milliseconds"'
    ]


def test_an_integer_attribute_is_an_int_over_otlp_and_a_label_in_prometheus(
    otlp_receiver: OtlpReceiver,
) -> None:
    """Semantic conventions type some attributes as ints (``http.response.status_code``,
    ``process.pid``): an open attribute takes an int, OTLP carries it as one, Prometheus
    renders the label as its digits."""
    spec = rlmetrics.MetricSpec(
        "acme.responses",
        rlmetrics.Kind.COUNTER,
        unit="{response}",
        attributes={"http.response.status_code": rlmetrics.OPEN},
        description="Responses by status",
    )
    with isolated_state(rlmetrics.MetricRegistry()):
        rlmetrics.declare("acme", [spec])
        with rlmetrics.start(
            exporters=("prometheus", "otlp"),
            prometheus_port=0,
            otlp_endpoint=otlp_receiver.endpoint,
        ) as handle:
            rlmetrics.record("acme", {"acme.responses": 3}, {"http.response.status_code": 200})
            assert handle.prometheus_address is not None
            exposition = _scrape(handle.prometheus_address)
            handle.force_flush(timeout_s=10)
    sent = [p.attributes for p in otlp_receiver.points() if p.name == "acme.responses"]
    assert sent and all(a == {"http.response.status_code": 200} for a in sent)
    assert all(type(a["http.response.status_code"]) is int for a in sent)
    assert 'acme_responses_total{http_response_status_code="200"' in exposition


def test_a_bool_is_no_integer_attribute_and_a_closed_set_takes_strings() -> None:
    from rlmetrics.values import check_attributes

    spec = rlmetrics.MetricSpec(
        "acme.x",
        rlmetrics.Kind.GAUGE,
        attributes={"process.pid": rlmetrics.OPEN, "acme.mode": {"a", "b"}},
    )
    assert check_attributes(spec, {"process.pid": 42}) == (
        frozenset({("process.pid", 42)}),
        {"process.pid": 42},
    )
    assert isinstance(check_attributes(spec, {"process.pid": True}), str)
    assert isinstance(check_attributes(spec, {"process.pid": 4.5}), str)
    assert isinstance(check_attributes(spec, {"acme.mode": 1}), str)


def test_an_empty_attribute_value_is_one_series_with_its_absence_and_nothing_is_lost(
    prometheus_server: Callable[[tuple[str, int]], PrometheusServer],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Prometheus has no empty label: ``rl.env=""`` and no ``rl.env`` are one series. Before,
    the endpoint served both as two samples of that series; Prometheus kept the first of the
    scrape and dropped the other without a word (a counter's 5 of 6, a histogram's other
    observations). Now a counter's and a histogram's points are added up into the one series,
    and a gauge's one value is served, said once."""
    env = {"rl.env": rlmetrics.OPEN}
    rlmetrics.declare(
        GROUP,
        [
            rlmetrics.MetricSpec(
                "rl.test.envs", rlmetrics.Kind.COUNTER, key="envs", attributes=env
            ),
            rlmetrics.MetricSpec(
                "rl.test.env.time",
                rlmetrics.Kind.HISTOGRAM,
                unit="s",
                key="env_time",
                buckets=[1.0],
                attributes=env,
            ),
            rlmetrics.MetricSpec(
                "rl.test.env.score", rlmetrics.Kind.GAUGE, key="score", attributes=env
            ),
        ],
    )
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        rlmetrics.start(exporters=("prometheus",), prometheus_port=0) as handle,
    ):
        address = handle.prometheus_address
        assert address is not None
        rlmetrics.record(GROUP, {"envs": 1, "env_time": 0.5, "score": 0.25})
        rlmetrics.record(GROUP, {"envs": 5, "env_time": 2.0, "score": 0.75}, {"rl.env": ""})
        rlmetrics.record(GROUP, {"envs": 7, "env_time": 3.0, "score": 1.0}, {"rl.env": "gsm8k"})
        served = [line for line in _scrape(address).splitlines() if line.startswith("rl_test_env")]
        assert len([line for line in served if line.startswith("rl_test_envs_total{")]) == 2
        server = prometheus_server(address)
        server.wait_for('rl_test_envs_total{rl_env=""}', lambda r: r and r[0]["value"][1] == "6")
        counts = server.query("rl_test_env_time_seconds_count")
        assert {r["metric"].get("rl_env", ""): r["value"][1] for r in counts} == {
            "": "2",
            "gsm8k": "1",
        }
        bucket = server.query('rl_test_env_time_seconds_bucket{rl_env="",le="1.0"}')
        assert [r["value"][1] for r in bucket] == ["1"]
        scores = server.query('rl_test_env_score{rl_env=""}')
        assert len(scores) == 1 and scores[0]["value"][1] in ("0.25", "0.75")
    said = [r.getMessage() for r in caplog.records if "empty" in r.getMessage()]
    assert len(said) == 1 and "'rl.test.env.score'" in said[0] and "rl.env" in said[0], said


def test_an_attribute_value_that_is_no_utf8_text_drops_its_point_not_the_endpoint(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A name decoded with surrogateescape (``os.listdir`` of a file name that is no UTF-8)
    as an attribute value. Before: every scrape of the endpoint answered 500 (the exposition
    cannot be encoded) for the rest of the run, every series lost with it, and each OTLP
    export logged an ERROR traceback. Now that point alone is dropped, said once."""
    env = {"rl.env": rlmetrics.OPEN}
    rlmetrics.declare(
        GROUP,
        [
            rlmetrics.MetricSpec(
                "rl.test.envs", rlmetrics.Kind.COUNTER, key="envs", attributes=env
            ),
            rlmetrics.MetricSpec("rl.test.env.score", rlmetrics.Kind.GAUGE, key="score"),
        ],
    )
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        rlmetrics.start(exporters=("prometheus",), prometheus_port=0) as handle,
    ):
        address = handle.prometheus_address
        assert address is not None
        rlmetrics.record(GROUP, {"score": 0.5})
        rlmetrics.record(GROUP, {"envs": 1}, {"rl.env": "data-\udcff"})
        rlmetrics.record(GROUP, {"envs": 2}, {"rl.env": "data-\udcff"})
        rlmetrics.record(GROUP, {"envs": 3}, {"rl.env": "gsm8k"})
        served = _scrape(address)
    assert re.search(r"^rl_test_env_score\{[^}]*\} 0\.5$", served, re.M), served
    (envs,) = re.findall(r"^rl_test_envs_total\{.*\}.*$", served, re.M)
    assert 'rl_env="gsm8k"' in envs and envs.endswith(" 3.0"), envs
    said = [r.getMessage() for r in caplog.records if "UTF-8" in r.getMessage()]
    assert len(said) == 1 and "'rl.env'" in said[0], said
