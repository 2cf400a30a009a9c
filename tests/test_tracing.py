"""rlmetrics.phase / step / run / rollout: one timer, two outputs, read back from the real SDK
(an in-memory span exporter and metric reader) and from a real JSONL backend."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.families.efficiency import CollectorTimer, EfficiencyTimer
from rlmetrics.testing import (
    SpanRecord,
    in_memory_telemetry,
    in_memory_tracing,
    points,
    span_records,
)


@pytest.fixture
def traced() -> Iterator[tuple[Any, Any, Any]]:
    with in_memory_tracing(service_name="grpo", run_id="run-7") as started:
        yield started


def by_name(spans: list[SpanRecord]) -> dict[str, list[SpanRecord]]:
    out: dict[str, list[SpanRecord]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def efficiency_seconds(reader: Any) -> dict[str, Any]:
    return {
        p.attributes["rl.efficiency.category"]: p
        for p in points(reader)
        if p.name == "rl.efficiency.seconds"
    }


def one_step(n: int = 3, **step_kwargs: Any) -> None:
    """A step with a productive phase, the three step-window categories and the two
    collector-loop ones, a thread-seconds category and a phase of the user's own."""
    with rlmetrics.step(n, **step_kwargs):
        with rlmetrics.phase("idle/buffer_starvation"):
            pass
        with (
            rlmetrics.phase("generation", bucket="productive"),
            rlmetrics.phase("idle/refit_bubble"),
        ):
            pass
        with rlmetrics.phase("idle/validation"):
            pass
        with rlmetrics.phase("idle/refit_event_wait"):
            pass
        with rlmetrics.phase("idle/generation_limit_pause"):
            pass
        with rlmetrics.phase("idle/buffer_full_backoff"):
            pass
        with rlmetrics.phase("reward"):
            pass


def test_the_step_is_an_umbrella_and_its_phases_are_leaves_with_a_bucket(traced: Any) -> None:
    _handle, _reader, exporter = traced
    with rlmetrics.run():
        with rlmetrics.rollout(), rlmetrics.phase("generation", bucket="productive"):
            pass
        one_step(3, weight_version="v12", num_generations_per_prompt=4)
    spans = span_records(exporter)
    named = by_name(spans)
    [run] = named["rl.run"]
    [step] = named["rl.step"]
    [rollout] = named["rl.rollout"]
    assert run.parent_id is None
    assert step.parent_id == rollout.parent_id == run.span_id
    assert {s.trace_id for s in spans} == {run.trace_id}
    assert step.attributes == {
        "rl.iteration": 3,
        "rl.weight_version": "v12",
        "rl.num_generations_per_prompt": 4,
    }
    for umbrella in (run, step, rollout):
        assert "rl.bucket" not in umbrella.attributes
    buckets = {
        s.attributes["rl.phase"]: s.attributes.get("rl.bucket")
        for s in spans
        if s.parent_id not in (None, run.span_id) and "rl.phase" in s.attributes
    }
    assert buckets == {
        "generation": "productive",
        "idle/buffer_starvation": "idle",
        "idle/refit_bubble": "idle",
        "idle/validation": "overhead",  # the spec's second disagreement
        "idle/refit_event_wait": None,  # the collector loop's: no bucket on a span
        "idle/generation_limit_pause": None,
        "idle/buffer_full_backoff": "idle",
        "reward": "overhead",  # a phase nobody offers: NeMo-RL's default for a leaf
    }
    [generation_in_step] = [s for s in named["rl.generation"] if s.parent_id == step.span_id]
    [bubble] = named["rl.idle.refit_bubble"]
    assert bubble.parent_id == generation_in_step.span_id  # nested phases nest
    for leaf in spans:
        if leaf.parent_id == step.span_id:
            assert leaf.attributes["rl.iteration"] == 3
    for span in spans:
        assert span.resource["rlmetrics.run.id"] == "run-7"
        assert span.resource["service.name"] == "grpo"
        assert span.status == "UNSET"


def test_one_timed_step_gives_the_same_seconds_on_spans_and_metrics(traced: Any) -> None:
    _handle, reader, exporter = traced
    one_step(5)
    spans = {
        s.attributes["rl.phase"]: s for s in span_records(exporter) if "rl.phase" in s.attributes
    }
    [step] = [s for s in span_records(exporter) if s.name == "rl.step"]
    metrics = efficiency_seconds(reader)
    for category, point in metrics.items():
        span = spans[category]
        assert point.value == span.seconds, category  # the same two clock readings
        bucket = span.attributes.get("rl.bucket")
        if category == "idle/validation":
            assert (point.attributes["rl.bucket"], bucket) == ("idle", "overhead")
        elif point.attributes["rl.efficiency.measurement"] == "collector_wall_clock":
            assert (point.attributes["rl.bucket"], bucket) == ("idle", None)
        else:
            assert point.attributes["rl.bucket"] == bucket, category  # nothing else differs
    assert set(metrics) == {
        "idle/buffer_starvation",
        "idle/refit_bubble",
        "idle/validation",
        "idle/refit_event_wait",
        "idle/generation_limit_pause",
        "idle/buffer_full_backoff",
    }
    # The step's pct is over the step span's own length.
    [(pct, attributes)] = [
        (p.value, p.attributes) for p in points(reader) if p.name == "rl.efficiency.pct"
    ]
    idle = sum(
        metrics[c].value for c in ("idle/buffer_starvation", "idle/refit_bubble", "idle/validation")
    )
    assert attributes["rl.efficiency.window"] == "step"
    assert pct == pytest.approx(100.0 * (1 - idle / step.seconds))
    # Per-step categories start from zero each step; run-window ones add up.
    one_step(6)
    later = efficiency_seconds(reader)
    second = [s for s in span_records(exporter) if s.attributes.get("rl.iteration") == 6]
    of = {s.attributes["rl.phase"]: s.seconds for s in second if "rl.phase" in s.attributes}
    assert later["idle/refit_bubble"].value == of["idle/refit_bubble"]
    assert later["idle/refit_event_wait"].value == pytest.approx(
        spans["idle/refit_event_wait"].seconds + of["idle/refit_event_wait"]
    )


def test_no_per_step_tag_becomes_a_metric_label(traced: Any) -> None:
    _handle, reader, _exporter = traced
    logger = rlmetrics.Logger(backends={})
    with (
        rlmetrics.step(2, logger=logger, weight_version=7, num_generations_per_prompt=8),
        rlmetrics.phase("idle/refit_bubble"),
    ):
        logger.log_metrics({"reward": 0.5}, step=2, prefix="train")
    found = points(reader)
    assert found
    for point in found:
        assert not {"rl.iteration", "rl.weight_version", "rl.num_generations_per_prompt"} & set(
            point.attributes
        )
        assert point.resource["rlmetrics.run.id"] == "run-7"


def test_a_phase_that_raises_ends_its_span_in_error_and_counts_its_seconds(traced: Any) -> None:
    _handle, reader, exporter = traced
    with (
        pytest.raises(RuntimeError, match="engine died"),
        rlmetrics.step(1),
        rlmetrics.phase("idle/refit_bubble"),
    ):
        raise RuntimeError("engine died")
    named = by_name(span_records(exporter))
    [phase] = named["rl.idle.refit_bubble"]
    [step] = named["rl.step"]
    assert (phase.status, step.status) == ("ERROR", "ERROR")
    assert "exception" in phase.events
    assert efficiency_seconds(reader)["idle/refit_bubble"].value == phase.seconds > 0


def test_phases_on_threads_are_children_of_the_step_and_add_up(traced: Any) -> None:
    _handle, reader, exporter = traced
    barrier = threading.Barrier(4)

    def worker() -> None:
        barrier.wait()  # all four back off at once: thread-seconds, not a duration
        with (
            rlmetrics.phase("idle/buffer_full_backoff"),
            rlmetrics.phase("generate", bucket="productive"),
        ):
            pass

    with rlmetrics.step(4):
        threads = [threading.Thread(target=worker, name=f"rollout-{i}") for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    named = by_name(span_records(exporter))
    [step] = named["rl.step"]
    backoffs = named["rl.idle.buffer_full_backoff"]
    assert len(backoffs) == 4
    assert {b.parent_id for b in backoffs} == {step.span_id}
    assert {b.trace_id for b in backoffs} == {step.trace_id}
    assert {b.attributes["thread.name"] for b in backoffs} == {f"rollout-{i}" for i in range(4)}
    by_id = {b.span_id: b for b in backoffs}
    for generate in named["rl.generate"]:
        assert generate.parent_id in by_id  # nested on its own thread
        assert (
            generate.attributes["thread.name"]
            == by_id[generate.parent_id].attributes["thread.name"]
        )
    total = efficiency_seconds(reader)["idle/buffer_full_backoff"].value
    assert total == pytest.approx(sum(b.seconds for b in backoffs))


class Exported:
    """A push metric exporter keeping every batch: what the last export at shutdown sent."""

    def __new__(cls) -> Any:
        from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

        class Keeping(MetricExporter):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.batches: list[Any] = []

            def export(self, metrics_data: Any, timeout_millis: float = 0, **_: Any) -> Any:
                self.batches.append(metrics_data)
                return MetricExportResult.SUCCESS

            def force_flush(self, timeout_millis: float = 0) -> bool:
                return True

            def shutdown(self, timeout_millis: float = 0, **_: Any) -> None:
                pass

        return Keeping()


def test_a_phase_left_open_at_shutdown_is_closed_exported_and_counted(caplog: Any) -> None:
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    from rlmetrics.testing import data_points

    release = threading.Event()
    entered = threading.Event()

    def stuck() -> None:
        with rlmetrics.phase("idle/buffer_full_backoff"):
            entered.set()
            release.wait(30)

    kept = Exported()
    last_export = PeriodicExportingMetricReader(kept, export_interval_millis=3_600_000)
    with in_memory_tracing(readers=[last_export]) as (handle, _reader, exporter):
        logger = rlmetrics.Logger(backends={})
        thread = threading.Thread(target=stuck)
        step = rlmetrics.step(1, logger=logger)
        step.__enter__()  # never left: the loop died inside it
        thread.start()
        assert entered.wait(10)
        started = time.monotonic()
        handle.shutdown(timeout_s=5)  # bounded: returns though the phase never ended
        assert time.monotonic() - started < 5 + 1.5  # (slack: scheduling on a busy machine)
        spans = span_records(exporter)
    release.set()
    thread.join(10)
    step.__exit__(None, None, None)  # late: leaves the step's context, ends nothing twice
    named = by_name(spans)
    [phase] = named["rl.idle.buffer_full_backoff"]
    [step_span] = named["rl.step"]
    for span in (phase, step_span):
        assert span.attributes["rlmetrics.span.truncated"] is True
        assert "rlmetrics.span.truncated" in span.events
    assert phase.parent_id == step_span.span_id
    assert step_span.end_ns >= phase.end_ns  # innermost first
    # Its seconds were counted into the step's summary, delivered before the last export.
    [seconds] = [
        p
        for p in data_points(kept.batches[-1], "rl.efficiency.seconds")
        if p.attributes["rl.efficiency.category"] == "idle/buffer_full_backoff"
    ]
    assert seconds.value == phase.seconds
    # The thread's late exit ends nothing twice.
    assert "ended span" not in caplog.text.lower()
    assert len(span_records(exporter)) == len(spans)


def test_a_phase_left_open_at_logger_finish_is_closed(traced: Any, tmp_path: Path) -> None:
    _handle, _reader, exporter = traced
    path = tmp_path / "run.jsonl"
    logger = rlmetrics.Logger(backends={"jsonl": {"path": str(path)}})
    step = rlmetrics.step(9, logger=logger)
    step.__enter__()
    phase = rlmetrics.phase("idle/refit_bubble")
    phase.__enter__()
    logger.finish()
    phase.__exit__(None, None, None)  # late: already closed, nothing twice
    step.__exit__(None, None, None)
    spans = span_records(exporter)
    assert {s.name for s in spans} == {"rl.step", "rl.idle.refit_bubble"}
    assert all(s.attributes["rlmetrics.span.truncated"] for s in spans)
    [row] = [r for r in read_jsonl(path) if r["step"] == 9]
    bubble = next(s for s in spans if s.name == "rl.idle.refit_bubble")
    assert row["metrics"]["efficiency/idle/refit_bubble_s"] == bubble.seconds


def test_without_tracing_a_step_left_open_at_logger_finish_still_logs_its_summary(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: without a span exporter (a JSONL-only run), a step still open when its Logger
    finished (the loop died inside it, finish() from another thread) was not ended: its
    summary went nowhere, and its late exit logged to the closed Logger. As with tracing, it
    ends at finish() and its seconds are logged; the late exit ends nothing twice."""
    path = tmp_path / "run.jsonl"
    logger = rlmetrics.Logger(backends={"jsonl": {"path": str(path)}})
    step = rlmetrics.step(9, logger=logger)
    step.__enter__()
    with rlmetrics.phase("idle/refit_bubble"):
        pass
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger.finish()
        step.__exit__(None, None, None)  # late: already ended
    [row] = read_jsonl(path)
    assert row["step"] == 9 and row["metrics"]["efficiency/idle/refit_bubble_s"] >= 0
    assert "efficiency/step_wall_time_s" in row["metrics"]
    assert "after Logger.finish()" not in caplog.text and "without being entered" not in (
        caplog.text
    )
    assert rlmetrics.tracing.current_step() is None


def test_a_logger_that_finishes_ends_only_its_own_steps(traced: Any) -> None:
    _handle, _reader, exporter = traced
    mine, other = rlmetrics.Logger(backends={}), rlmetrics.Logger(backends={})
    run = rlmetrics.run()
    run.__enter__()
    step = rlmetrics.step(1, logger=mine)
    step.__enter__()
    phase = rlmetrics.phase("generation", bucket="productive")
    phase.__enter__()
    other.finish()  # an evaluation loop's Logger, say: the run and its step go on
    assert span_records(exporter) == []
    mine.finish()  # the step's own Logger: the step and its phase end, the run goes on
    assert {s.name for s in span_records(exporter)} == {"rl.step", "rl.generation"}
    for scope in (phase, step, run):
        scope.__exit__(None, None, None)
    assert [s.name for s in span_records(exporter)][-1] == "rl.run"
    assert "rlmetrics.span.truncated" not in span_records(exporter)[-1].attributes


@pytest.mark.parametrize(
    ("step", "shown"),
    [(-1, "an int -1"), (2**70, f"an int {2**70}"), (10**5000, "an int of 16610 bits")],
    ids=["negative", "past-int64", "past-str"],
)
def test_a_step_past_the_range_says_which(caplog: Any, step: int, shown: str) -> None:
    """Before: ``the step must be an int, got an int``. (An int past 4,300 digits is no
    ``str()``: described by its size, never raising.)"""
    caplog.set_level(logging.WARNING, "rlmetrics")
    with rlmetrics.step(step):
        pass
    assert (
        "the step must be an int from 0 to 2**63 - 1 (a NumPy or torch integer counts), got "
        f"{shown};" in caplog.text
    )


def test_bad_input_is_reported_and_the_rest_lands(traced: Any, caplog: Any) -> None:
    _handle, reader, exporter = traced
    caplog.set_level(logging.WARNING, "rlmetrics")
    with rlmetrics.step("seven"):  # type: ignore[arg-type]
        with rlmetrics.phase("idle/refit_bubble", bucket="productve"):
            pass
        with rlmetrics.phase(42):  # type: ignore[arg-type]
            pass
        with rlmetrics.phase("generation", bucket="productive", tags={"loss": 0.3, "node": "a"}):
            pass
    text = caplog.text
    assert "the step must be an int from 0 to 2**63 - 1" in text
    assert "bucket must be one of" in text
    assert "phase name must be a non-empty string" in text
    assert "span tag is a string, int or bool" in text
    named = by_name(span_records(exporter))
    [step] = named["rl.step"]
    assert "rl.iteration" not in step.attributes
    [bubble] = named["rl.idle.refit_bubble"]
    assert bubble.attributes["rl.bucket"] == "idle"  # the bad bucket dropped, its own kept
    [invalid] = named["rl.phase"]
    assert "rl.phase" not in invalid.attributes and invalid.attributes["rl.bucket"] == "overhead"
    [generation] = named["rl.generation"]
    assert generation.attributes["node"] == "a" and "loss" not in generation.attributes
    assert efficiency_seconds(reader)["idle/refit_bubble"].value == bubble.seconds


def test_a_non_int_step_is_logged_after_the_last_one(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with rlmetrics.Logger(backends={"jsonl": {"path": str(path)}}) as logger:
        with rlmetrics.step(4, logger=logger):
            pass
        with rlmetrics.step(None, logger=logger):  # type: ignore[arg-type]
            pass
        import numpy

        with rlmetrics.step(numpy.int64(9), logger=logger):
            pass
    assert [row["step"] for row in read_jsonl(path)] == [4, 5, 9]


def test_without_telemetry_phases_still_feed_the_summary(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    clock = iter([100.0, 101.0, 101.5, 104.0, 110.0, 111.0])
    with (
        rlmetrics.Logger(backends={"jsonl": {"path": str(path)}}) as logger,
        rlmetrics.run(clock=lambda: next(clock)),
        rlmetrics.step(1, logger=logger),  # 101.0 -> 110.0
        rlmetrics.phase("idle/refit_bubble"),  # 101.5 -> 104.0
    ):
        pass
    [row] = read_jsonl(path)
    assert row["step"] == 1
    assert row["metrics"]["efficiency/idle/refit_bubble_s"] == 2.5
    assert row["metrics"]["efficiency/step_wall_time_s"] == 9.0
    assert row["metrics"]["efficiency/total_wall_time_s"] == 10.0


def test_a_process_that_only_times_phases_imports_no_opentelemetry(tmp_path: Path) -> None:
    path = str(tmp_path / "r.jsonl")
    code = (
        "import sys, rlmetrics\n"
        f"logger = rlmetrics.Logger(backends={{'jsonl': {{'path': {path!r}}}}})\n"
        "with rlmetrics.step(1, logger=logger):\n"
        "    with rlmetrics.phase('idle/refit_bubble'):\n"
        "        pass\n"
        "logger.finish()\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    [row] = read_jsonl(tmp_path / "r.jsonl")
    assert "efficiency/idle/refit_bubble_s" in row["metrics"]


def test_the_decorator_times_every_call(traced: Any) -> None:
    _handle, reader, exporter = traced

    @rlmetrics.phase("idle/buffer_starvation")
    def wait() -> int:
        return 1

    @rlmetrics.phase("generation", bucket="productive")
    async def generate() -> int:
        await asyncio.sleep(0)
        return 2

    with rlmetrics.step(1):
        assert wait() + wait() + asyncio.run(generate()) == 4
    named = by_name(span_records(exporter))
    assert len(named["rl.idle.buffer_starvation"]) == 2
    [generation] = named["rl.generation"]
    assert generation.parent_id == named["rl.step"][0].span_id
    assert efficiency_seconds(reader)["idle/buffer_starvation"].value == pytest.approx(
        sum(s.seconds for s in named["rl.idle.buffer_starvation"])
    )


def test_the_decorator_refuses_a_generator_function_saying_what_to_time() -> None:
    """Before: ``@rlmetrics.phase("generation")`` on a generator (or async generator) function
    timed only the call that creates the generator: a span of microseconds, and seconds of
    none of the iteration, unsaid. A declaration mistake, refused where it is written."""

    def tokens() -> Any:
        yield 1

    async def stream() -> Any:
        yield 1

    for function in (tokens, stream):
        with pytest.raises(TypeError, match=r"with rlmetrics\.phase"):
            rlmetrics.phase("generation")(function)


def test_the_efficiency_timers_phases_are_spans_too(traced: Any) -> None:
    _handle, _reader, exporter = traced
    driver, collector = EfficiencyTimer(), CollectorTimer()
    with driver.time("idle/refit_bubble"):
        pass
    with collector.time("idle/refit_event_wait"):
        pass
    summary = driver.step_summary(collector)
    named = by_name(span_records(exporter))
    [bubble] = named["rl.idle.refit_bubble"]
    [wait] = named["rl.idle.refit_event_wait"]
    assert bubble.attributes["rl.bucket"] == "idle" and "rl.bucket" not in wait.attributes
    assert summary.seconds == {
        "idle/refit_bubble": bubble.seconds,
        "idle/refit_event_wait": wait.seconds,
    }


def test_exemplars_of_points_recorded_in_a_phase_name_the_phase(traced: Any) -> None:
    from rlmetrics.events import CheckpointSave
    from rlmetrics.testing import data_points

    _handle, reader, exporter = traced
    logger = rlmetrics.Logger(backends={})
    with rlmetrics.step(1), rlmetrics.phase("checkpoint", bucket="overhead"):
        logger.log_rollout_checkpoint(CheckpointSave({"total_save_seconds": 2.5}))
    [phase] = by_name(span_records(exporter))["rl.checkpoint"]
    data = reader.get_metrics_data()
    [point] = data_points(data, "rl.rollout.checkpoint.duration")
    [exemplar] = point.exemplars
    assert (f"{exemplar.trace_id:032x}", f"{exemplar.span_id:016x}") == (
        phase.trace_id,
        phase.span_id,
    )
    # A gauge is observed on the reader's thread, where no span is active: no exemplar.
    for gauge in data_points(data, "rl.efficiency.seconds"):
        assert not gauge.exemplars


def test_a_carrier_makes_another_context_a_child_of_the_step(traced: Any) -> None:
    _handle, _reader, exporter = traced
    got: list[dict[str, str]] = []
    with rlmetrics.step(2):
        carrier = rlmetrics.trace_carrier()
        env = rlmetrics.trace_env()

    def remote() -> None:  # what a worker does with the carrier it was handed
        with rlmetrics.trace_context(carrier), rlmetrics.phase("score", bucket="productive"):
            got.append(rlmetrics.trace_carrier())

    thread = threading.Thread(target=remote)
    thread.start()
    thread.join()
    named = by_name(span_records(exporter))
    [step] = named["rl.step"]
    [score] = named["rl.score"]
    assert carrier["traceparent"].startswith(f"00-{step.trace_id}-{step.span_id}-")
    assert env == {"TRACEPARENT": carrier["traceparent"]}
    assert (score.trace_id, score.parent_id) == (step.trace_id, step.span_id)
    assert got[0]["traceparent"].split("-")[2] == score.span_id


@pytest.mark.parametrize("carrier", ["00-abc-def-01", [("traceparent", "x")], 5])
def test_a_carrier_that_is_no_mapping_is_said_without_a_traceback(
    traced: Any, carrier: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: trace_context("00-...") (the traceparent string, not trace_carrier()'s dict)
    logged a ValueError traceback under 'trace_context failed', naming no mistake."""
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        rlmetrics.trace_context(carrier),
        rlmetrics.phase("x"),
    ):
        pass
    [record] = [r for r in caplog.records if "trace_context" in r.getMessage()]
    assert not record.exc_info and "trace_carrier()" in record.getMessage()


def test_carriers_are_empty_and_harmless_without_tracing() -> None:
    assert rlmetrics.trace_carrier() == {} and rlmetrics.trace_env() == {}
    with rlmetrics.trace_context({"traceparent": "garbage"}), rlmetrics.phase("x"):
        pass


def test_traces_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    with in_memory_tracing() as (handle, _reader, exporter):
        assert handle.tracer_provider is None and not handle.tracing
        with rlmetrics.step(1), rlmetrics.phase("generation"):
            pass
    assert exporter.get_finished_spans() == ()


def test_span_ids_do_not_follow_the_random_module(traced: Any) -> None:
    """Data-parallel ranks seed ``random`` alike; their span ids must still differ."""
    import random

    _handle, _reader, exporter = traced
    ids = []
    for _ in range(2):
        random.seed(1234)
        with rlmetrics.phase("generation"):
            pass
        ids.append(span_records(exporter)[-1].span_id)
    assert ids[0] != ids[1]


def test_a_timer_adds_up_every_thread_and_stays_bounded_unread() -> None:
    from rlmetrics.tracing.accounting import MAX_PENDING

    timer = rlmetrics.PhaseTimer()
    per_thread = MAX_PENDING  # each thread alone would fold at least once

    def worker() -> None:
        for _ in range(per_thread):
            timer.record("idle/buffer_full_backoff", 0.5)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    taken = []
    for thread in threads:
        thread.start()
    taken.append(timer.take())  # read while they record: nothing is lost or counted twice
    for thread in threads:
        thread.join()
    assert len(timer._pending) <= MAX_PENDING + 4
    taken.append(timer.take())
    total = sum(t.get("idle/buffer_full_backoff", 0.0) for t in taken)
    assert total == 4 * per_thread * 0.5
    assert timer.snapshot() == {}


# -- the accounting's windows: a step's, a timer's, a telemetry session's ----------------------


class SimulatedClock:
    """Seconds that move only when the test says so (the phases' and steps' clock). Its
    origin is small, so every reading in ns is exact and the sums can be compared exactly."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


def _timed_steps(clock: SimulatedClock, logger: rlmetrics.Logger) -> EfficiencyTimer:
    """Three steps on ``clock``: the first not summarised, each with a phase of the step's
    own, a collector-loop phase (run window) and a phase of a timer of the loop's own."""
    driver = EfficiencyTimer(clock=clock)
    with rlmetrics.run(clock=clock):
        for n, starving in ((1, 3.0), (2, 2.0), (3, 0.5)):
            with rlmetrics.step(n, logger=logger, summary=n != 1):
                with rlmetrics.phase("idle/buffer_starvation"):
                    clock.spend(starving)
                with rlmetrics.phase("idle/refit_event_wait"):
                    clock.spend(1.0)
                with driver.time("idle/refit_bubble"):  # the timer's, not the step's
                    clock.spend(4.0)
                clock.spend(0.25)
    return driver


#: What the two summarised steps of :func:`_timed_steps` report, exactly.
_TIMED_ROWS = {
    2: {
        "efficiency/idle/buffer_starvation_s": 2.0,
        "efficiency/idle/refit_event_wait_s": 2.0,  # run window: steps 1 and 2
        "efficiency/step_wall_time_s": 7.25,
        "efficiency/total_wall_time_s": 15.5,
    },
    3: {
        "efficiency/idle/buffer_starvation_s": 0.5,
        "efficiency/idle/refit_event_wait_s": 3.0,
        "efficiency/step_wall_time_s": 5.75,
        "efficiency/total_wall_time_s": 21.25,
    },
}


@pytest.mark.parametrize("tracing", [False, True], ids=["untraced", "traced"])
def test_a_step_window_ends_with_its_step_and_a_timer_keeps_its_own(
    tracing: bool, tmp_path: Path
) -> None:
    """Traced or not, the same summaries: a step not summarised takes its seconds with it,
    and a timer's phase counts in the timer only (never in the step's accounting too)."""
    path = tmp_path / "run.jsonl"
    clock = SimulatedClock()
    with contextlib.ExitStack() as stack:
        if tracing:
            _handle, _reader, exporter = stack.enter_context(in_memory_tracing())
        logger = stack.enter_context(rlmetrics.Logger(backends={"jsonl": {"path": str(path)}}))
        driver = _timed_steps(clock, logger)
    rows = {row["step"]: row["metrics"] for row in read_jsonl(path)}
    assert set(rows) == {2, 3}
    for step, expected in _TIMED_ROWS.items():
        got = {key: rows[step][key] for key in expected}
        assert got == expected, step
        assert "efficiency/idle/refit_bubble_s" not in rows[step]
    assert driver.snapshot() == {"idle/refit_bubble": 12.0}
    if tracing:
        [second] = [
            s
            for s in span_records(exporter)
            if s.name == "rl.idle.buffer_starvation" and s.attributes["rl.iteration"] == 2
        ]
        assert second.seconds == rows[2]["efficiency/idle/buffer_starvation_s"]


def test_a_new_telemetry_session_starts_the_run_totals_afresh(tmp_path: Path) -> None:
    """Without rlmetrics.run(): a second start() (another run id) counts its own
    collector-clock and thread-seconds totals and its own wall time."""
    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for run_id, path, seconds in (("run-a", paths[0], 5.0), ("run-b", paths[1], 2.0)):
        with (
            in_memory_telemetry(run_id=run_id),
            rlmetrics.Logger(backends={"jsonl": {"path": str(path)}}) as logger,
        ):
            for n in (1, 2):
                with rlmetrics.step(n, logger=logger):
                    rlmetrics.account("idle/refit_event_wait", seconds)
                    rlmetrics.account("idle/buffer_full_backoff", 2 * seconds)
                    if run_id == "run-a":
                        time.sleep(0.05)  # wall time the second session must not inherit
    first, second = ([row["metrics"] for row in read_jsonl(p)] for p in paths)
    assert [r["efficiency/idle/refit_event_wait_s"] for r in first] == [5.0, 10.0]
    assert [r["efficiency/idle/refit_event_wait_s"] for r in second] == [2.0, 4.0]
    assert [r["efficiency/idle/buffer_full_backoff_s"] for r in second] == [4.0, 8.0]
    # The session's first step starts its wall time: the same two clock readings.
    assert second[0]["efficiency/total_wall_time_s"] == second[0]["efficiency/step_wall_time_s"]
    assert second[1]["efficiency/total_wall_time_s"] < 0.05


# -- misuse: warned once, never raised, never a traceback -------------------------------------


def _unentered() -> list[Any]:
    return [
        rlmetrics.phase("idle/refit_bubble"),
        rlmetrics.phase("generation", bucket="productive"),
        EfficiencyTimer().time("idle/refit_bubble"),
        rlmetrics.step(3),
        rlmetrics.run(),
        rlmetrics.rollout(),
    ]


@pytest.mark.parametrize("tracing", [False, True], ids=["untraced", "traced"])
def test_a_scope_exited_without_being_entered_is_warned_once(
    tracing: bool, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "run.jsonl"
    with contextlib.ExitStack() as stack:
        if tracing:
            _handle, _reader, exporter = stack.enter_context(in_memory_tracing())
        logger = stack.enter_context(rlmetrics.Logger(backends={"jsonl": {"path": str(path)}}))
        for _ in range(2):
            for scope in _unentered():
                scope.__exit__(None, None, None)  # never entered: nothing raised
        with rlmetrics.step(1, logger=logger):  # and the accounting goes on unharmed
            entered = rlmetrics.phase("idle/refit_bubble")
            with entered:
                pass
            entered.__exit__(None, None, None)  # a second exit: counted once
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "exited without being entered" in warnings[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]
    [row] = read_jsonl(path)
    assert set(row["metrics"]) >= {"efficiency/idle/refit_bubble_s"}
    if tracing:
        named = by_name(span_records(exporter))
        [bubble] = named["rl.idle.refit_bubble"]
        assert row["metrics"]["efficiency/idle/refit_bubble_s"] == bubble.seconds
        assert set(named) == {"rl.step", "rl.idle.refit_bubble"}


def test_a_phase_ended_on_another_thread_is_warned_once_without_a_traceback(
    traced: Any, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    _handle, _reader, exporter = traced
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "run.jsonl"
    with rlmetrics.Logger(backends={"jsonl": {"path": str(path)}}) as logger:
        with rlmetrics.step(1, logger=logger):
            for _ in range(3):
                phase = rlmetrics.phase("idle/refit_bubble")
                phase.__enter__()
                thread = threading.Thread(target=phase.__exit__, args=(None, None, None))
                thread.start()
                thread.join(10)
        with rlmetrics.step(2, logger=logger), rlmetrics.phase("generation"):
            pass  # the loop's thread still nests its spans where they belong
    assert not [r for r in caplog.records if r.exc_info], [
        r.getMessage() for r in caplog.records if r.exc_info
    ]
    assert not [r for r in caplog.records if r.name.startswith("opentelemetry")]
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "another thread" in warnings[0], warnings
    named = by_name(span_records(exporter))
    bubbles = named["rl.idle.refit_bubble"]
    assert len(bubbles) == 3
    first, second = read_jsonl(path)
    assert first["metrics"]["efficiency/idle/refit_bubble_s"] == pytest.approx(
        sum(b.seconds for b in bubbles)
    )
    [step_two] = [s for s in named["rl.step"] if s.attributes["rl.iteration"] == 2]
    [generation] = named["rl.generation"]
    assert generation.parent_id == step_two.span_id
    assert "efficiency/idle/refit_bubble_s" not in second["metrics"] or (
        second["metrics"]["efficiency/idle/refit_bubble_s"] == 0
    )


def test_async_with_times_a_step_and_its_phases_in_each_task(traced: Any) -> None:
    """An async loop writes ``async with rlmetrics.step(n):`` as the live trajectory takes
    ``async with``; before, a TypeError (no asynchronous context manager protocol) raised
    into the loop. Two tasks' steps interleave at their awaits; each phase is its own task's
    step's child, and each step's seconds reach the metrics."""
    _handle, reader, exporter = traced

    async def one(n: int) -> None:
        async with rlmetrics.step(n):
            async with rlmetrics.phase("idle/buffer_starvation"):
                await asyncio.sleep(0)
            async with rlmetrics.rollout():
                await asyncio.sleep(0)

    async def both() -> None:
        await asyncio.gather(one(1), one(2))

    asyncio.run(both())
    named = by_name(span_records(exporter))
    steps = {s.attributes["rl.iteration"]: s for s in named["rl.step"]}
    assert sorted(steps) == [1, 2]
    waits = named["rl.idle.buffer_starvation"]
    assert len(waits) == 2
    for wait in waits:
        assert steps[wait.attributes["rl.iteration"]].span_id == wait.parent_id
    assert {r.parent_id for r in named["rl.rollout"]} == {s.span_id for s in steps.values()}
    assert efficiency_seconds(reader)["idle/buffer_starvation"].value >= 0


def test_numpy_integers_are_integers_on_spans_as_for_the_step(traced: Any) -> None:
    """Before: rlmetrics.step took a NumPy step, but dropped a NumPy weight_version,
    num_generations_per_prompt or int tag ('must be int, got an int64')."""
    import numpy as np

    _handle, _reader, exporter = traced
    with (
        rlmetrics.step(
            np.int64(3),
            weight_version=np.int64(7),
            num_generations_per_prompt=np.int32(8),
            tags={"rank": np.int64(0), "sampled": np.bool_(True)},
        ),
        rlmetrics.phase("generation", tags={"shard": np.int64(2)}),
    ):
        pass
    named = by_name(span_records(exporter))
    [step], [phase] = named["rl.step"], named["rl.generation"]
    assert step.attributes == {
        "rl.iteration": 3,
        "rl.weight_version": 7,
        "rl.num_generations_per_prompt": 8,
        "rank": 0,
        "sampled": True,
    }
    assert all(type(v) in (int, bool) for v in step.attributes.values())
    assert phase.attributes["shard"] == 2


@pytest.mark.parametrize("in_a_run", [False, True])
def test_concurrent_tasks_steps_are_not_each_other_s_children_nor_lend_their_iteration(
    traced: Any, in_a_run: bool
) -> None:
    """Before: a task's step entered while another task's step was open became that step's
    child (the fallback meant for a thread with no span of its own), and a phase took the
    rl.iteration of the step entered last in the process, not of its own task's step (its
    parent): step 1's phase said rl.iteration=2."""
    _handle, _reader, exporter = traced
    second_entered = asyncio.Event()

    async def first() -> None:
        async with rlmetrics.step(1):
            await second_entered.wait()
            async with rlmetrics.phase("idle/refit_bubble"):
                await asyncio.sleep(0)

    async def second() -> None:
        async with rlmetrics.step(2):
            second_entered.set()
            async with rlmetrics.phase("idle/refit_bubble"):
                await asyncio.sleep(0)

    async def both() -> None:
        with rlmetrics.run() if in_a_run else contextlib.nullcontext():
            await asyncio.gather(first(), second())

    asyncio.run(both())
    named = by_name(span_records(exporter))
    parent = named["rl.run"][0].span_id if in_a_run else None
    steps = {s.span_id: s for s in named["rl.step"]}
    assert {s.parent_id for s in steps.values()} == {parent}
    phases = named["rl.idle.refit_bubble"]
    assert len(phases) == 2
    for phase in phases:
        assert phase.attributes["rl.iteration"] == steps[phase.parent_id].attributes["rl.iteration"]


@pytest.mark.parametrize("tracing", [False, True])
def test_concurrent_tasks_steps_each_account_their_own_phases(tracing: bool) -> None:
    """Before: every step's per-step categories were one shared account, taken by whichever
    step ended first: task 1's step (ended first) reported task 2's refit bubble too, and
    task 2's step reported none of it. Each step now sums the phases of its own task."""
    clock = iter(float(t) for t in range(100, 200))
    summaries: dict[int, dict[str, float]] = {}

    class Summaries:
        def log_efficiency_summary(self, summary: Any, step: int) -> None:
            summaries[step] = dict(summary.seconds)

    second_timed = asyncio.Event()

    async def first() -> None:
        async with rlmetrics.step(1, logger=Summaries()):  # type: ignore[arg-type]
            async with rlmetrics.phase("idle/buffer_starvation"):  # one tick
                pass
            await second_timed.wait()

    async def second() -> None:
        async with rlmetrics.step(2, logger=Summaries()):  # type: ignore[arg-type]
            async with rlmetrics.phase("idle/refit_bubble"):  # one tick
                pass
            second_timed.set()
            await asyncio.sleep(0)
            await asyncio.sleep(0)

    async def both() -> None:
        with rlmetrics.run(clock=lambda: next(clock)):
            await asyncio.gather(first(), second())

    with in_memory_tracing() if tracing else contextlib.nullcontext():
        asyncio.run(both())
    assert summaries[1] == {"idle/buffer_starvation": 1.0}
    assert summaries[2] == {"idle/refit_bubble": 1.0}


@pytest.mark.parametrize("broken", [None, float("nan"), "5", ZeroDivisionError])
def test_a_clock_that_fails_a_reading_never_raises_into_the_loop(
    tmp_path: Path, broken: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: a run's clock (a simulation's) that raised or gave no number (None, NaN,
    text) raised TypeError / ValueError / its own error out of every phase and step, into
    the loop. Now a failed reading is the clock's last good one (time stands still), said
    once; the step is still logged."""
    path = tmp_path / "run.jsonl"
    readings = iter([100.0, 101.0, 101.5])

    def clock() -> Any:
        value = next(readings, broken)
        if value is ZeroDivisionError:
            raise ZeroDivisionError("the simulation ended")
        return value

    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        with (
            rlmetrics.Logger(backends={"jsonl": {"path": str(path)}}) as logger,
            rlmetrics.run(clock=clock),
            rlmetrics.step(1, logger=logger),  # 101.0 -> (failed: 101.5)
            rlmetrics.phase("idle/refit_bubble"),  # 101.5 -> (failed: 101.5)
        ):
            pass
        EfficiencyTimer(clock=clock).step_summary()
    [row] = read_jsonl(path)
    assert row["metrics"]["efficiency/idle/refit_bubble_s"] == 0.0
    assert row["metrics"]["efficiency/step_wall_time_s"] == 0.5
    said = [r.getMessage() for r in caplog.records if "clock" in r.getMessage()]
    assert len(said) == 1 and "its last reading" in said[0], said


def test_a_tag_that_is_no_utf8_text_drops_itself_not_the_export(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A tag decoded with surrogateescape (a file name that is no UTF-8). Before: the span
    carried it and the OTLP encoder dropped it at every export with an ERROR traceback on
    the SDK's logger. Now the tag alone is dropped, said once; the span and its other tags
    are exported."""
    caplog.set_level(logging.WARNING)
    traces = tmp_path / "traces.jsonl"
    with in_memory_tracing(exporters={"otlp_file": {"path": str(traces)}}) as (
        handle,
        _reader,
        exporter,
    ):
        with rlmetrics.step(1, tags={"dataset": "bad \udc80 name", "env": "math"}):
            pass
        handle.force_flush(timeout_s=5)
        [span] = span_records(exporter)
    assert span.attributes["env"] == "math" and "dataset" not in span.attributes
    said = [r for r in caplog.records if r.name.startswith("rlmetrics")]
    assert any("'dataset'" in r.getMessage() and "UTF-8" in r.getMessage() for r in said)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert traces.read_text(encoding="utf-8").count('"env"') == 1
