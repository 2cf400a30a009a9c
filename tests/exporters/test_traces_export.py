"""Spans through the exporter plugins: OTLP gRPC to a real receiver on 127.0.0.1 (spans and
metrics of one run, one endpoint), the OTLP/JSON lines file, the console; and a worker process
started with the step's context, whose spans are children of the driver's step."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

import rlmetrics
from rlmetrics.events import CheckpointSave
from rlmetrics.exporters.otlp_file import encode_line, read_spans, span_attributes
from rlmetrics.testing import (
    BlackHole,
    CapturedLog,
    OtlpReceiver,
    in_memory_tracing,
    points,
    single,
)
from rlmetrics.testing.peers import OtlpSpan

from ._peers import INTERVAL_S, WAIT_S

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

SHUTDOWN_SLACK_S = 1.5


def traced_run(logger: rlmetrics.Logger, steps: int = 2) -> None:
    """A run with umbrella spans, bucketed phases, a collector-loop wait and a histogram
    recorded inside a phase (for its exemplar)."""
    with rlmetrics.run():
        for n in range(1, steps + 1):
            with rlmetrics.step(n, logger=logger, weight_version=f"w{n}"):
                with rlmetrics.phase("idle/refit_bubble"):
                    pass
                with rlmetrics.phase("idle/refit_event_wait"):
                    pass
                with rlmetrics.phase("checkpoint", bucket="overhead"):
                    logger.log_rollout_checkpoint(CheckpointSave({"total_save_seconds": 1.25}))
                logger.log_metrics({"reward": 0.5 * n}, step=n, prefix="train")


def test_spans_and_metrics_of_one_run_reach_one_collector(otlp_receiver: OtlpReceiver) -> None:
    with rlmetrics.start(
        "traces-test",
        run_id="run-traces",
        exporters=["otlp"],
        otlp_endpoint=otlp_receiver.endpoint,
        export_interval_s=INTERVAL_S,
    ) as handle:
        assert handle.tracing and handle.exporting
        traced_run(rlmetrics.Logger(backends={}))
        spans: list[OtlpSpan] = otlp_receiver.wait_for(
            lambda r: (found := r.spans()) and len(found) == 9 and found,
            what="the run's nine spans",
        )
        duration = otlp_receiver.wait_for(
            lambda r: r.find(
                "rl.rollout.checkpoint.duration",
                **{
                    "rl.rollout.checkpoint.operation": "save",
                    "rl.rollout.checkpoint.phase": "total_save",
                },
            ),
            what="the checkpoint histogram",
        )
    by_id = {s.span_id: s for s in spans}
    [run] = [s for s in spans if s.name == "rl.run"]
    steps = [s for s in spans if s.name == "rl.step"]
    assert run.parent_id is None and {s.parent_id for s in steps} == {run.span_id}
    assert {s.attributes["rl.weight_version"] for s in steps} == {"w1", "w2"}
    for span in spans:
        assert span.trace_id == run.trace_id
        assert span.resource["rlmetrics.run.id"] == "run-traces"
        assert span.resource["service.name"] == "traces-test"
        assert span.scope == "rlmetrics"
        if span.name in ("rl.run", "rl.step"):
            assert "rl.bucket" not in span.attributes
        else:  # a leaf: its parent is a step
            assert by_id[span.parent_id].name == "rl.step"  # type: ignore[index]
            expected = {"rl.idle.refit_bubble": "idle", "rl.checkpoint": "overhead"}.get(span.name)
            assert span.attributes.get("rl.bucket") == expected
    # The metrics of the same run, on the same resource.
    assert duration.resource["rlmetrics.run.id"] == "run-traces"
    reward = otlp_receiver.find("rl.reward.mean")
    assert (
        reward is not None
        and reward.resource["service.instance.id"] == (spans[0].resource["service.instance.id"])
    )
    # The histogram was recorded inside a phase: its exemplar names that phase's span.
    checkpoints = {s.span_id: s for s in spans if s.name == "rl.checkpoint"}
    assert duration.exemplars
    for exemplar in duration.exemplars:
        assert exemplar.span_id in checkpoints
        assert exemplar.trace_id == checkpoints[exemplar.span_id].trace_id
        assert exemplar.value == 1.25


def test_a_dead_collector_never_holds_the_loop_or_shutdown_past_its_bound(
    dead_endpoint: OtlpReceiver, rlmetrics_log: CapturedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    handle = rlmetrics.start(
        exporters=["otlp"], otlp_endpoint=dead_endpoint.endpoint, export_interval_s=INTERVAL_S
    )
    traced_run(rlmetrics.Logger(backends={}), steps=5)
    rlmetrics_log.wait_for(f"OTLP trace export to 127.0.0.1:{dead_endpoint.port} failed")
    with rlmetrics.step(6), rlmetrics.phase("generation"):
        pass  # queued when shutdown begins
    started = time.monotonic()
    handle.shutdown(timeout_s=2.0)
    assert time.monotonic() - started < 2.0 + SHUTDOWN_SLACK_S
    warnings = rlmetrics_log.matching("OTLP trace export", logging.WARNING)
    assert len(warnings) == 1 and "these spans are dropped" in warnings[0].getMessage()


def test_a_collector_that_refuses_spans_is_reported_once(
    otlp_receiver: OtlpReceiver, rlmetrics_log: CapturedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A deadline a busy machine cannot miss: a span export that ran past the default 3 s was
    # reported as a second cause (DEADLINE_EXCEEDED) beside the refusal this test is about.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "30")
    otlp_receiver.reject_with = grpc.StatusCode.PERMISSION_DENIED
    with rlmetrics.start(
        exporters=["otlp"], otlp_endpoint=otlp_receiver.endpoint, export_interval_s=INTERVAL_S
    ):
        for _ in range(3):
            traced_run(rlmetrics.Logger(backends={}), steps=1)
            otlp_receiver.wait_for(lambda r: r.rejected >= 2, what="rejected exports")
        rlmetrics_log.wait_for("OTLP trace export", count=2)
    traces = rlmetrics_log.matching("OTLP trace export", logging.WARNING)
    assert len(traces) == 1 and "PERMISSION_DENIED" in traces[0].getMessage()


def test_traces_off_keeps_the_metrics(otlp_receiver: OtlpReceiver) -> None:
    with rlmetrics.start(
        exporters=["otlp"],
        otlp_endpoint=otlp_receiver.endpoint,
        export_interval_s=INTERVAL_S,
        traces=False,
    ) as handle:
        assert not handle.tracing and handle.exporting
        traced_run(rlmetrics.Logger(backends={}), steps=1)
        otlp_receiver.wait_for(lambda r: r.find("rl.reward.mean"), what="the reward")
    assert otlp_receiver.spans() == []


def _as_protobuf(line: str) -> Any:
    """An OTLP/JSON line parsed by protobuf, its hex ids turned back into base64 first."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    data = json.loads(line)
    for resource_spans in data["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                for field in ("traceId", "spanId", "parentSpanId"):
                    if field in span:
                        assert span[field] == span[field].lower()
                        span[field] = base64.b64encode(bytes.fromhex(span[field])).decode()
    return json_format.ParseDict(data, ExportTraceServiceRequest())


def test_the_file_is_otlp_json_lines_the_collector_format(tmp_path: Path) -> None:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    path = tmp_path / "run" / "traces.jsonl"
    with in_memory_tracing(exporters={"otlp_file": {"path": path}}, run_id="file-run") as (
        _handle,
        _reader,
        memory,
    ):
        traced_run(rlmetrics.Logger(backends={}))
        finished = memory.get_finished_spans()
        # What the OTLP exporter itself would send, as one JSON line: every field survives.
        assert _as_protobuf(encode_line(finished)) == encode_spans(finished)
    lines = path.read_text().splitlines()
    assert lines and all(_as_protobuf(line).resource_spans for line in lines)
    read = list(read_spans(path))
    assert len(read) == 9
    for resource, span in read:
        assert resource["rlmetrics.run.id"] == "file-run"
        assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16
    buckets = {span["name"]: span_attributes(span).get("rl.bucket") for _r, span in read}
    assert buckets["rl.idle.refit_bubble"] == "idle" and buckets["rl.step"] is None
    # A crash mid-write leaves a torn line: the reader skips it.
    with path.open("a") as handle:
        handle.write('{"resourceSpans": [{"scope')
    assert len(list(read_spans(path))) == 9


@pytest.mark.parametrize("where", ["a folder", "under a file"])
def test_a_spans_file_that_cannot_be_written_is_a_telemetry_error_saying_what_to_change(
    tmp_path: Path, where: str
) -> None:
    """Before, start() raised the bare OSError (``[Errno 21] Is a directory: '…'``), naming
    neither the exporter nor its option."""
    if where == "a folder":
        path = tmp_path / "spans.jsonl"
        path.mkdir()
    else:
        (tmp_path / "file").write_text("")
        path = tmp_path / "file" / "spans.jsonl"
    with pytest.raises(rlmetrics.TelemetryError) as raised:
        rlmetrics.start(exporters={"otlp_file": {"path": path}})
    message = str(raised.value)
    assert f"the OTLP file exporter cannot append to {path}" in message
    assert "exporters={'otlp_file': {'path': ...}}" in message
    assert raised.value.__cause__ is None
    assert rlmetrics.current() is None


def test_a_worker_process_started_in_a_step_writes_its_spans_as_the_steps_children(
    tmp_path: Path,
) -> None:
    """The subprocess carrier: ``trace_env()`` in the child's environment. Both processes
    append to one OTLP/JSON file."""
    path = tmp_path / "traces.jsonl"
    worker = (
        "import rlmetrics\n"
        f"with rlmetrics.start(exporters={{'otlp_file': {{'path': {str(path)!r}}}}}):\n"
        "    with rlmetrics.phase('score', bucket='productive'):\n"
        "        with rlmetrics.phase('wasted/failed_trajectory'):\n"
        "            pass\n"
    )
    with rlmetrics.start(exporters={"otlp_file": {"path": path}}), rlmetrics.step(3):
        env = {**os.environ, **rlmetrics.trace_env()}
        subprocess.run([sys.executable, "-c", worker], env=env, check=True, timeout=120)
    spans = {span["name"]: (resource, span) for resource, span in read_spans(path)}
    step_resource, step = spans["rl.step"]
    score_resource, score = spans["rl.score"]
    _, failed = spans["rl.wasted.failed_trajectory"]
    assert score["traceId"] == step["traceId"] and score["parentSpanId"] == step["spanId"]
    assert failed["parentSpanId"] == score["spanId"]
    assert score_resource["service.instance.id"] != step_resource["service.instance.id"]
    assert span_attributes(failed)["rl.bucket"] == "wasted"


def test_the_console_exporter_prints_one_line_per_span() -> None:
    code = """
import rlmetrics
with rlmetrics.start(exporters=["console"], export_interval_s=60):
    with rlmetrics.step(1), rlmetrics.phase("generation", bucket="productive"):
        pass
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    spans = [json.loads(line) for line in out.splitlines() if line.startswith('{"name": "rl.')]
    assert [s["name"] for s in spans] == ["rl.generation", "rl.step"]
    assert spans[0]["attributes"]["rl.bucket"] == "productive"
    assert spans[0]["parent_id"] == spans[1]["context"]["span_id"]


def test_a_forked_child_sends_nothing_under_the_parents_identity(
    otlp_receiver: OtlpReceiver,
) -> None:
    """A child made by fork() has tracing off, and the span exporter it inherited sends
    nothing, even a span made on the parent's provider and flushed."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    with rlmetrics.start(
        exporters=["otlp"], otlp_endpoint=otlp_receiver.endpoint, export_interval_s=3600
    ) as handle:
        with rlmetrics.phase("queued_before_fork"):
            pass
        pid = os.fork()
        if pid == 0:  # the child
            code = 1
            try:
                with rlmetrics.phase("in_child"):
                    pass
                provider = handle.tracer_provider
                provider.get_tracer("child").start_span("rl.child_span").end()  # type: ignore[union-attr]
                provider.force_flush(5000)  # type: ignore[union-attr]
                code = 0
            finally:
                os._exit(code)
        assert os.waitpid(pid, 0)[1] == 0
    names = [s.name for s in otlp_receiver.wait_for(lambda r: r.spans(), WAIT_S, "spans")]
    assert names == ["rl.queued_before_fork"]


def _spans_to(endpoint: str) -> tuple[rlmetrics.Telemetry, Any]:
    """Telemetry exporting to ``endpoint`` over OTLP (spans sent only when the queue fills or
    a flush asks), with an in-memory reader to read the pipeline's counts from."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    handle = rlmetrics.start(
        exporters=["otlp"], otlp_endpoint=endpoint, export_interval_s=3600, readers=[reader]
    )
    return handle, reader


def test_spans_a_full_queue_drops_are_counted_and_said_once_naming_the_queue_variable(
    blackhole: BlackHole, rlmetrics_log: CapturedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's batch processor drops a span when its queue is full, saying so only in its
    own log: a burst of spans behind a collector that does not answer loses all but what the
    queue and the one export in flight hold, and each loss is counted."""
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
    # The first export hangs on the black hole past the test; nothing leaves the queue after.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "120")
    handle, reader = _spans_to(blackhole.endpoint)
    tracer = handle.tracer_provider.get_tracer("burst")  # type: ignore[union-attr]
    made = 50
    for n in range(made):
        tracer.start_span(f"burst {n}").end()
    dropped = single(
        points(reader),
        "rlmetrics.exporter.spans.dropped",
        **{"rlmetrics.exporter": "otlp", "rlmetrics.drop.reason": "queue_full"},
    )
    # At most 4 spans wait in the queue and 4 in the export in flight.
    assert made - 8 <= dropped.value <= made
    warnings = rlmetrics_log.matching("span queue", logging.WARNING)
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert "'otlp'" in message and "OTEL_BSP_MAX_QUEUE_SIZE" in message
    assert "rlmetrics.exporter.spans.dropped" in message


def test_spans_a_failed_export_drops_are_counted(
    dead_endpoint: OtlpReceiver, rlmetrics_log: CapturedLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A span export that fails (the collector gone) loses its spans for good (no totals to
    resend, unlike a metric): after the first warning they were counted nowhere."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2")
    handle, reader = _spans_to(dead_endpoint.endpoint)
    tracer = handle.tracer_provider.get_tracer("lost")  # type: ignore[union-attr]
    for n in range(7):
        tracer.start_span(f"lost {n}").end()
    handle.tracer_provider.force_flush()  # type: ignore[union-attr]
    rlmetrics_log.wait_for(f"OTLP trace export to 127.0.0.1:{dead_endpoint.port} failed")
    found = points(reader)
    lost = single(
        found,
        "rlmetrics.exporter.spans.dropped",
        **{"rlmetrics.exporter": "otlp", "rlmetrics.drop.reason": "export_failed"},
    )
    assert lost.value == 7
    assert not [
        p
        for p in found
        if p.name == "rlmetrics.exporter.spans.dropped"
        and p.attributes.get("rlmetrics.drop.reason") == "queue_full"
    ]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
def test_a_span_file_on_a_full_disk_says_why_once_and_shutdown_does_not_fail(
    rlmetrics_log: CapturedLog,
) -> None:
    """Every write to a full disk fails (``/dev/full`` answers ENOSPC): the warning did not
    say why, the line stayed in the file object's buffer (to be written later, after it had
    been counted as dropped), and shutdown's close() failed on it: "telemetry shutdown
    failed", with a traceback. The warning now names the cause and nothing is kept back."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    handle = rlmetrics.start(exporters={"otlp_file": {"path": "/dev/full"}}, readers=[reader])
    tracer = handle.tracer_provider.get_tracer("full disk")  # type: ignore[union-attr]
    for n in range(5):
        tracer.start_span(f"lost {n}").end()
    handle.tracer_provider.force_flush()  # type: ignore[union-attr]
    lost = single(
        points(reader),
        "rlmetrics.exporter.spans.dropped",
        **{"rlmetrics.exporter": "otlp_file", "rlmetrics.drop.reason": "export_failed"},
    )
    handle.shutdown(timeout_s=5)
    assert lost.value == 5
    (said,) = [
        r for r in rlmetrics_log.matching("writing spans to /dev/full failed", logging.WARNING)
    ]
    assert "No space left on device" in said.getMessage() and said.exc_info is None
    assert not rlmetrics_log.matching("shutdown failed", logging.WARNING)
