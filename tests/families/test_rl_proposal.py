"""The RL naming profile (``start(naming="rl_proposal")``) against the real SDK: an in-memory
metric reader and span exporter. With it, the phase timer's readings are also the proposal's
``rl.<stage>.duration`` histograms and span names, and the resource carries ``rl.run.id``,
``rl.algorithm`` and ``rl.system``; without it, none of them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import rlmetrics
from rlmetrics import ConfigurationError
from rlmetrics.families.rl_proposal import DURATIONS
from rlmetrics.testing import Point, points, single

# Each step: (phase, bucket, simulated seconds). generation, reward, policy_training and
# idle/refit_bubble are the proposal's sample, reward, train and sync; logging is no stage.
PHASES = (
    ("generation", "productive", 3.0),
    ("reward", "overhead", 0.5),
    ("policy_training", "productive", 10.0),
    ("idle/refit_bubble", None, 2.0),
    ("logging", "overhead", 0.25),
)
STEP_S = sum(seconds for _, _, seconds in PHASES)
RESOURCE = {"rl.algorithm": "grpo", "rl.system": "nemo-rl"}


def _simulated_run(steps: int = 2) -> None:
    """``steps`` steps of :data:`PHASES` on a simulated clock (exact, reproducible times)."""
    now = [1_767_225_600.0]
    clock: Callable[[], float] = lambda: now[0]  # noqa: E731
    with rlmetrics.run(clock=clock):
        for n in range(1, steps + 1):
            with rlmetrics.step(n):
                for name, bucket, seconds in PHASES:
                    with rlmetrics.phase(name, bucket=bucket):
                        now[0] += seconds


@pytest.fixture
def traced() -> Iterator[Callable[..., tuple[list[Point], list[ReadableSpan], Any]]]:
    handles: list[Any] = []

    def run(**options: Any) -> tuple[list[Point], list[ReadableSpan], Any]:
        reader, spans = InMemoryMetricReader(), InMemorySpanExporter()
        handle = rlmetrics.start(
            run_id="r-7",
            readers=[reader],
            span_processors=[SimpleSpanProcessor(spans)],
            **options,
        )
        handles.append(handle)
        _simulated_run()
        found = points(reader)
        handle.shutdown()
        return found, list(spans.get_finished_spans()), handle

    yield run
    for handle in handles:
        handle.shutdown()


def _seconds(span: ReadableSpan) -> float:
    assert span.start_time is not None and span.end_time is not None
    return (span.end_time - span.start_time) / 1e9


def test_the_profile_records_each_stage_as_the_proposal_names_it(traced: Any) -> None:
    found, spans, handle = traced(naming="rl_proposal", resource=RESOURCE)
    assert handle.naming == "rl_proposal"
    expected = {"loop": STEP_S, "sample": 3.0, "reward": 0.5, "train": 10.0, "sync": 2.0}
    for stage, seconds in expected.items():
        point = single(found, DURATIONS[stage])
        assert (point.count, point.unit) == (2, "s")
        assert point.sum == pytest.approx(2 * seconds)
    # The same readings as the default series: the spans, and the efficiency family's
    # refit bubble (the last step's).
    by_name: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    assert sorted(by_name) == [
        "rl.logging",
        "rl.loop",
        "rl.reward",
        "rl.run",
        "rl.sample",
        "rl.sync",
        "rl.train",
    ]
    for stage in expected:
        spans_of = by_name[f"rl.{stage}"]
        assert sum(map(_seconds, spans_of)) == pytest.approx(single(found, DURATIONS[stage]).sum)
    bubble = single(
        found, "rl.efficiency.seconds", **{"rl.efficiency.category": "idle/refit_bubble"}
    )
    assert bubble.value == pytest.approx(2.0)
    # The phase's own name stays on the span; the loop carries both iterations.
    assert {dict(s.attributes or {})["rl.phase"] for s in by_name["rl.train"]} == {
        "policy_training"
    }
    loops = [dict(s.attributes or {}) for s in by_name["rl.loop"]]
    assert [(a["rl.iteration"], a["rl.loop.iteration"]) for a in loops] == [(1, 1), (2, 2)]
    resource = single(found, DURATIONS["loop"]).resource
    assert resource["rl.run.id"] == resource["rlmetrics.run.id"] == "r-7"
    assert (resource["rl.algorithm"], resource["rl.system"]) == ("grpo", "nemo-rl")
    assert dict(by_name["rl.loop"][0].resource.attributes)["rl.run.id"] == "r-7"


def test_without_the_profile_none_of_its_names_appear(traced: Any) -> None:
    found, spans, handle = traced(resource=RESOURCE)
    assert handle.naming == "rlmetrics"
    assert not [p for p in found if p.name in DURATIONS.values()]
    assert sorted({s.name for s in spans}) == [
        "rl.generation",
        "rl.idle.refit_bubble",
        "rl.logging",
        "rl.policy_training",
        "rl.reward",
        "rl.run",
        "rl.step",
    ]
    assert not [s for s in spans if "rl.loop.iteration" in (s.attributes or {})]
    assert (
        "rl.run.id"
        not in single(
            found, "rl.efficiency.seconds", **{"rl.efficiency.category": "idle/refit_bubble"}
        ).resource
    )


def test_the_histograms_need_no_tracing() -> None:
    reader = InMemoryMetricReader()
    with rlmetrics.start(readers=[reader], naming="rl_proposal", resource=RESOURCE):
        _simulated_run(steps=1)
        found = points(reader)
    assert single(found, DURATIONS["train"]).sum == pytest.approx(10.0)
    assert single(found, DURATIONS["loop"]).sum == pytest.approx(STEP_S)


def test_a_missing_algorithm_or_system_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        rlmetrics.start(readers=[InMemoryMetricReader()], naming="rl_proposal") as handle,
    ):
        assert handle.resource["rl.run.id"] == handle.run_id
        assert "rl.algorithm" not in handle.resource
    said = [r.getMessage() for r in caplog.records if "rl_proposal" in r.getMessage()]
    assert len(said) == 1 and "rl.algorithm and rl.system" in said[0]


def test_an_unknown_naming_fails_loudly_naming_the_choices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigurationError, match=r"\['rlmetrics', 'rl_proposal'\]"):
        rlmetrics.start(naming="otel")
    monkeypatch.setenv("RLMETRICS_NAMING", "both")
    with pytest.raises(ConfigurationError, match="RLMETRICS_NAMING"):
        rlmetrics.start()
