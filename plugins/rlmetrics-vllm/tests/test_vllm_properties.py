"""Properties of step_metrics and engine_signals over random pairs of readings written into
vLLM's exposition (the real fixture's samples with their values changed)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rlmetrics_vllm.engine import (
    GENERATION_LENGTH_MEAN_KEY,
    GENERATIONS_FAILED_KEY,
    GENERATIONS_OK_KEY,
    PREFIX_CACHE_HIT_RATE_KEY,
    PROMPT_LENGTH_MEAN_KEY,
    engine_signals,
    read_text,
    step_metrics,
)
from vllm_support import FINISH_REASONS, EngineValues

# The fixture's reasons plus one vLLM may add later; totals small enough to stay exact.
REASONS = (*FINISH_REASONS, "timeout")
totals = st.integers(min_value=0, max_value=10**9)
# Mostly growth, sometimes a total that went backwards (an engine restart).
changes = st.integers(min_value=-3, max_value=10**6)


@st.composite
def reading_pairs(draw: st.DrawFn) -> tuple[dict[str, EngineValues], dict[str, EngineValues]]:
    engines = draw(st.sampled_from([("0",), ("0", "1"), ("0", "1", "2")]))
    before: dict[str, EngineValues] = {}
    after: dict[str, EngineValues] = {}
    for engine in engines:
        reasons = draw(st.lists(st.sampled_from(REASONS), unique=True, max_size=len(REASONS)))
        old = [draw(totals) for _ in range(6)]
        new = [max(0, v + draw(changes)) for v in old]
        old_finished = {r: draw(totals) for r in reasons}
        new_finished = {r: max(0, v + draw(changes)) for r, v in old_finished.items()}
        before[engine] = EngineValues(*old, finished=old_finished)
        # Sometimes the engine restarted: its series were created anew, whatever its totals.
        created = draw(st.sampled_from([None, None, None, 2e9]))
        after[engine] = EngineValues(*new, finished=new_finished, created=created)
    return before, after


@settings(max_examples=100)
@given(pair=reading_pairs())
def test_ok_plus_failed_is_the_total_delta_and_nothing_is_negative(
    render: Callable[..., str],
    pair: tuple[dict[str, EngineValues], dict[str, EngineValues]],
) -> None:
    before, after = pair
    result = step_metrics(
        read_text(render(before, only_read=True)), read_text(render(after, only_read=True))
    )

    assert all(value >= 0 for value in result.values()), result
    if any(values.created is not None for values in after.values()):
        assert result == {}  # a restarted engine leaves nothing about the step knowable
    reason_deltas = [
        after[engine].finished.get(reason, 0) - before[engine].finished.get(reason, 0)
        for engine in before
        for reason in REASONS
    ]
    if GENERATIONS_OK_KEY in result and GENERATIONS_FAILED_KEY in result:
        assert result[GENERATIONS_OK_KEY] + result[GENERATIONS_FAILED_KEY] == sum(reason_deltas)
    else:
        # Only a reason total that went backwards or a restart can withhold them: the family
        # is in the fixture, so it always matches something.
        restarted = any(values.created is not None for values in after.values())
        assert restarted or any(delta < 0 for delta in reason_deltas)
    for key, count_of in (
        (PROMPT_LENGTH_MEAN_KEY, lambda v: v.prompt_count),
        (GENERATION_LENGTH_MEAN_KEY, lambda v: v.generation_count),
    ):
        if key in result:  # a mean only for a step that served requests
            assert sum(count_of(after[e]) - count_of(before[e]) for e in before) > 0


@st.composite
def prefix_cache_steps(
    draw: st.DrawFn,
) -> tuple[dict[str, EngineValues], dict[str, EngineValues]]:
    """Each engine's prefix-cache queries and hits before and after a step: hits never more
    than queries, any share of them (not only half)."""
    engines = draw(st.sampled_from([("0",), ("0", "1"), ("0", "1", "2")]))
    before: dict[str, EngineValues] = {}
    after: dict[str, EngineValues] = {}
    for engine in engines:
        queries = draw(st.integers(0, 10**9))
        hits = draw(st.integers(0, queries))
        new_queries = draw(st.integers(0, 10**6))
        new_hits = draw(st.integers(0, new_queries))
        before[engine] = EngineValues(prefix_queries=queries, prefix_hits=hits)
        after[engine] = EngineValues(
            prefix_queries=queries + new_queries, prefix_hits=hits + new_hits
        )
    return before, after


@settings(max_examples=100)
@given(step=prefix_cache_steps())
@example(
    step=(
        {"0": EngineValues(prefix_queries=0)},
        {"0": EngineValues(prefix_queries=1000, prefix_hits=300)},
    )
)
def test_the_prefix_cache_hit_rate_is_the_step_s_hits_over_its_queries(
    render: Callable[..., str], step: tuple[dict[str, EngineValues], dict[str, EngineValues]]
) -> None:
    before, after = step
    signals = engine_signals(
        read_text(render(before, only_read=True)), read_text(render(after, only_read=True))
    )
    queries = sum(after[e].prefix_queries - before[e].prefix_queries for e in before)
    hits = sum(after[e].prefix_hits - before[e].prefix_hits for e in before)
    if queries == 0:
        assert PREFIX_CACHE_HIT_RATE_KEY not in signals  # nothing queried: no rate
    else:
        assert signals[PREFIX_CACHE_HIT_RATE_KEY] == pytest.approx(hits / queries, abs=1e-12)


@pytest.mark.parametrize(("hits", "rate"), [(0, 0.0), (300, 0.3), (1000, 1.0)])
def test_a_prefix_cache_that_hits_a_known_share(
    render: Callable[..., str], hits: int, rate: float
) -> None:
    """Reads of the real fixture where hits are not half the queries (its only step is)."""
    before = read_text(render({"0": EngineValues(prefix_queries=4000, prefix_hits=1000)}))
    after = read_text(render({"0": EngineValues(prefix_queries=5000, prefix_hits=1000 + hits)}))
    assert engine_signals(before, after)[PREFIX_CACHE_HIT_RATE_KEY] == rate
