"""One record, three outputs, read back from a real OTLP receiver on 127.0.0.1: the span tree
(trajectory → turn → generation / tool / reward, under the step span, GenAI names as the
conventions spell them), the metrics of the same run (counts per outcome equal to the
trajectory spans per outcome), and exemplars of the duration histogram naming trajectory
spans."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

import rlmetrics
from rlmetrics.testing import OtlpReceiver
from rlmetrics.testing.peers import OtlpPoint, OtlpSpan

from ._records import rollout

semconv = pytest.importorskip("opentelemetry.semconv._incubating.attributes.gen_ai_attributes")
error_attributes = pytest.importorskip("opentelemetry.semconv.attributes.error_attributes")

INTERVAL_S = 0.2
BATCH = 10
#: Spans of one rollout() record with 2 turns: itself, 2 turns of a chat and a tool, a reward.
SPANS_PER_ROLLOUT = 1 + 2 * 3 + 1


async def agent_loop(logger: rlmetrics.Logger, step: int) -> None:
    """Two live trajectories at once, as an async agent loop runs them."""

    async def one(index: int) -> None:
        async with rlmetrics.trajectory(
            f"live{index}", group="live", env="math", agent="solver", logger=logger, step=step
        ) as t:
            async with t.turn():
                await asyncio.sleep(0)
                t.generation("policy", input_tokens=10, output_tokens=5, latency_s=0.001)
                t.tool_call("search", latency_s=0.001)
            t.reward(1.0, component="correct")
            t.finish("success", finish_reason="stop")

    await asyncio.gather(one(0), one(1))


class SimulatedClock:
    """The run's clock, moved by the test (seconds, Unix time)."""

    def __init__(self) -> None:
        self.now = 1_767_225_600.0

    def __call__(self) -> float:
        self.now += 1e-6  # every reading later than the last, as a real clock's
        return self.now


def _exporting_to(receiver: OtlpReceiver, run_id: str) -> rlmetrics.Telemetry:
    """Telemetry exporting its spans and metrics to ``receiver`` every INTERVAL_S."""
    return rlmetrics.start(
        "trajectories-test",
        run_id=run_id,
        exporters=["otlp"],
        otlp_endpoint=receiver.endpoint,
        export_interval_s=INTERVAL_S,
    )


def _completed(receiver: OtlpReceiver) -> dict[str, float]:
    counts: dict[str, float] = Counter()
    for (name, _), point in receiver.latest().items():
        if name == "rl.trajectory.completed":
            counts[point.attributes["rl.trajectory.outcome"]] += point.value or 0
    return counts


def test_a_batch_and_live_trajectories_reach_one_collector_as_spans_and_metrics(
    otlp_receiver: OtlpReceiver,
) -> None:
    expected_trajectories = BATCH + 2
    with _exporting_to(otlp_receiver, "run-traj"):
        logger = rlmetrics.Logger(backends={})
        clock = SimulatedClock()
        with rlmetrics.run(clock=clock), rlmetrics.step(4, logger=logger, summary=False):
            clock.now += 60.0  # the step's rollouts ran, then the trainer logs them
            logger.log_trajectories([rollout(i) for i in range(BATCH)], step=4)
            asyncio.run(agent_loop(logger, 4))
            clock.now += 1.0
        spans: list[OtlpSpan] = otlp_receiver.wait_for(
            lambda r: (
                (found := r.spans())
                and len(found) == 2 + BATCH * SPANS_PER_ROLLOUT + 2 * 5
                and found
            ),
            what="the step's trajectory spans",
        )
        otlp_receiver.wait_for(
            lambda r: sum(_completed(r).values()) == expected_trajectories,
            what="every trajectory counted",
        )
        # Every export's points, not the latest: an exemplar is in the export of the
        # collection after its value, and a later export of the same point (nothing recorded
        # since, on a loaded machine) carries none.
        duration: list[OtlpPoint] = otlp_receiver.wait_for(
            lambda r: [p for p in r.points() if p.name == "rl.trajectory.duration" and p.exemplars],
            what="the duration histogram's exemplars",
        )
    by_id = {s.span_id: s for s in spans}
    [run] = [s for s in spans if s.name == "rl.run"]
    [step] = [s for s in spans if s.name == "rl.step"]
    trajectories = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    assert len(trajectories) == expected_trajectories
    # The tree: every trajectory under the step, every turn under a trajectory, every call
    # under a turn, rewards under a trajectory or a turn; one trace.
    for span in spans:
        assert span.trace_id == step.trace_id
        if span is run or span is step:
            continue
        parent = by_id[span.parent_id]  # type: ignore[index]
        operation = span.attributes.get("gen_ai.operation.name")
        if operation == "invoke_agent":
            assert parent is step
            assert span.name == "invoke_agent solver"
        elif span.name == "rl.turn":
            assert parent.attributes["gen_ai.operation.name"] == "invoke_agent"
        elif operation in ("chat", "execute_tool"):
            assert parent.name == "rl.turn"
        else:
            assert span.name == "rl.reward correct"
            assert parent.name == "rl.turn" or parent in trajectories
        assert parent.start_ns <= span.start_ns <= span.end_ns <= parent.end_ns
    # GenAI names as the conventions spell them.
    chat = next(s for s in spans if s.name == "chat policy")
    assert chat.attributes[semconv.GEN_AI_OPERATION_NAME] == "chat"
    assert chat.attributes[semconv.GEN_AI_REQUEST_MODEL] == "policy"
    assert chat.attributes[semconv.GEN_AI_USAGE_INPUT_TOKENS] in (10, 100, 101)
    assert semconv.GEN_AI_USAGE_OUTPUT_TOKENS in chat.attributes
    tool_error = next(s for s in spans if s.attributes.get("rl.tool.outcome") == "error")
    assert tool_error.name == f"execute_tool {tool_error.attributes[semconv.GEN_AI_TOOL_NAME]}"
    assert tool_error.attributes[error_attributes.ERROR_TYPE] == "ValueError"
    assert tool_error.status == 2
    batch_chat = next(
        s for s in spans if s.attributes.get(semconv.GEN_AI_USAGE_INPUT_TOKENS) == 100
    )
    reasons = batch_chat.attributes[semconv.GEN_AI_RESPONSE_FINISH_REASONS]  # an ArrayValue
    assert [v.string_value for v in reasons.values] == ["tool_calls"]
    s0 = next(s for s in trajectories if s.attributes.get("rl.sample.id") == "s0")
    assert s0.attributes[semconv.GEN_AI_AGENT_NAME] == "solver"
    assert s0.attributes["rl.iteration"] == 4
    assert s0.attributes["rl.weight_version"] == 7
    assert s0.attributes["rl.group.id"] == "g0"
    assert s0.attributes["rl.env"] == "math"
    assert s0.attributes["rl.reward"] == 0.0
    errored = next(s for s in trajectories if s.attributes["rl.trajectory.outcome"] == "error")
    assert errored.attributes[error_attributes.ERROR_TYPE] == "TimeoutError"
    assert errored.status == 2
    # No text left the process: the policy is off by default.
    for span in spans:
        assert not any("messages" in k or "tool.call." in k for k in span.attributes)
    # The metrics of the same run: outcome counts equal the trajectory spans per outcome.
    by_outcome = Counter(s.attributes["rl.trajectory.outcome"] for s in trajectories)
    assert _completed(otlp_receiver) == by_outcome
    # Every exemplar of the duration histogram names an exported trajectory span.
    ids = {s.span_id: s for s in trajectories}
    exemplars = [e for point in duration for e in point.exemplars]
    assert exemplars
    for exemplar in exemplars:
        assert exemplar.span_id in ids
        span = ids[exemplar.span_id]
        assert exemplar.trace_id == span.trace_id
        assert exemplar.value == pytest.approx(span.seconds, abs=1e-6)


def test_trajectories_on_a_worker_are_children_of_the_carried_step_context() -> None:
    from rlmetrics.testing.traces import in_memory_tracing, span_records

    with in_memory_tracing() as (_handle, _reader, exporter):
        with rlmetrics.step(1, summary=False):
            carrier = rlmetrics.trace_carrier()
        # The worker's side: no step of its own, the driver's context carried to it.
        with rlmetrics.trace_context(carrier):
            logger = rlmetrics.Logger(backends={})
            logger.log_trajectories([rollout(0)], step=1)
            with rlmetrics.trajectory("w0", logger=logger) as t:
                t.generation("policy", latency_s=0.0)
        spans = span_records(exporter)
    [step] = [s for s in spans if s.name == "rl.step"]
    roots: Any = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    assert len(roots) == 2
    assert {s.parent_id for s in roots} == {step.span_id}
    assert {s.trace_id for s in spans} == {step.trace_id}


def test_a_budgeted_batch_s_duration_exemplars_name_its_traced_trajectories(
    otlp_receiver: OtlpReceiver,
) -> None:
    """Before: inside an ``rlmetrics.step``, the durations of the trajectories the span budget
    left without spans were recorded after the traced ones, in the step span's context, and
    every bucket they reached kept the step span as its exemplar: a batch of 200 rollouts
    pointed its latency exemplars at the step, not at a rollout. They now add to the
    histogram without making an exemplar, so every exemplar names a traced trajectory."""
    batch = [rollout(i, outcome="success", reward=float(i)) for i in range(200)]
    with _exporting_to(otlp_receiver, "run-budget"):
        logger = rlmetrics.Logger(backends={})
        with rlmetrics.step(1, logger=logger, summary=False):
            logger.log_trajectories(batch, step=1)
        otlp_receiver.wait_for(
            lambda r: any(s.name == "rl.step" for s in r.spans()), what="the step span"
        )
        # Every trajectory's duration is counted, traced or not (cumulative: the latest).
        otlp_receiver.wait_for(
            lambda r: (
                sum(
                    p.count or 0
                    for (n, _), p in r.latest().items()
                    if n == "rl.trajectory.duration"
                )
                == 200
            ),
            what="200 durations",
        )
        duration: list[OtlpPoint] = otlp_receiver.wait_for(
            lambda r: [p for p in r.points() if p.name == "rl.trajectory.duration" and p.exemplars],
            what="the duration histogram's exemplars",
        )
        spans = otlp_receiver.spans()
    traced = {s.span_id for s in spans if s.name.startswith("invoke_agent")}
    assert 16 <= len(traced) < 200  # the budget dropped most
    exemplars = [e for point in duration for e in point.exemplars]
    assert exemplars
    assert {e.span_id for e in exemplars} <= traced
