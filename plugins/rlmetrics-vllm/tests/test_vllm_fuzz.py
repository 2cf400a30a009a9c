"""The exposition reader under hostile text: it never raises and never hangs; a line that does
not parse costs that line only (the step's value of the family it held is omitted), and every
other line's value is read exactly, so the other families' and engines' deltas land. Runs at
10**5 examples in ``tox -e fuzz``."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rlmetrics_vllm.engine import (
    ENGINE_FAMILIES,
    GENERATION_LENGTH_FAMILY,
    GENERATION_LENGTH_MEAN_KEY,
    GENERATION_TOKENS_FAMILY,
    GENERATION_TOKENS_KEY,
    GENERATIONS_FAILED_KEY,
    GENERATIONS_OK_KEY,
    PROMPT_LENGTH_FAMILY,
    PROMPT_LENGTH_MEAN_KEY,
    PROMPT_TOKENS_FAMILY,
    PROMPT_TOKENS_KEY,
    REQUEST_SUCCESS_FAMILY,
    Snapshot,
    read_text,
    step_metrics,
)
from vllm_support import AFTER, BEFORE, EXPECTED, FIXTURE, render_exposition

TEXT = FIXTURE.read_text()
LINES = TEXT.splitlines()
#: What reading a mutated exposition may cost, in this thread's CPU seconds: a parser gone
#: quadratic fails it, a busy machine cannot (the wall clock counted the time the run was
#: not scheduled: 8 s once, under load, for a 20 ms reading).
PARSE_CPU_BOUND_S = 5.0

_numbers = st.sampled_from(
    ["NaN", "+Inf", "-Inf", "1e400", "-0", "9" * 5000, "0x10", "", "1_000", "٣"]
)
_garbage = st.one_of(st.text(max_size=80), _numbers, st.just("# TYPE vllm:prompt_tokens gauge"))


@st.composite
def corrupted(draw: st.DrawFn) -> str:
    """The real exposition with lines dropped, replaced, truncated or values swapped."""
    lines = list(LINES)
    for _ in range(draw(st.integers(0, 6))):
        if not lines:
            break
        index = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["drop", "replace", "truncate", "value"]))
        if action == "drop":
            del lines[index]
        elif action == "replace":
            lines[index] = draw(_garbage)
        elif action == "truncate":
            lines[index] = lines[index][: draw(st.integers(0, len(lines[index])))]
        elif not lines[index].startswith("#") and " " in lines[index]:
            lines[index] = lines[index].rsplit(" ", 1)[0] + " " + draw(_numbers)
    return "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n# EOF\n"]))


@settings(suppress_health_check=list(HealthCheck))
@given(text=st.one_of(corrupted(), st.text(max_size=300)))
def test_fuzz_read_text_never_raises(text: str) -> None:
    started = time.thread_time()
    snapshot = read_text(text)
    result: Any = step_metrics(snapshot, snapshot)
    assert time.thread_time() - started < PARSE_CPU_BOUND_S
    assert isinstance(snapshot, Snapshot)
    assert all(value == 0 for value in result.values())  # a reading against itself: no work


#: The family each step key is computed from.
_KEY_FAMILY = {
    PROMPT_TOKENS_KEY: PROMPT_TOKENS_FAMILY,
    GENERATION_TOKENS_KEY: GENERATION_TOKENS_FAMILY,
    PROMPT_LENGTH_MEAN_KEY: PROMPT_LENGTH_FAMILY,
    GENERATION_LENGTH_MEAN_KEY: GENERATION_LENGTH_FAMILY,
    GENERATIONS_OK_KEY: REQUEST_SUCCESS_FAMILY,
    GENERATIONS_FAILED_KEY: REQUEST_SUCCESS_FAMILY,
}
_READINGS = {"before": render_exposition(BEFORE), "after": render_exposition(AFTER)}


def _families_in(text: str) -> set[str]:
    """The families read whose name ``text`` mentions (a prefix match, so it over-counts:
    ``vllm:prompt_tokens_by_source`` counts as ``vllm:prompt_tokens``)."""
    return {family for family in ENGINE_FAMILIES if family in text}


@st.composite
def mutated(draw: st.DrawFn, which: str) -> tuple[str, set[str], list[str]]:
    """One reading with lines dropped, replaced, truncated or given bad values: the text, the
    families a mutation touched, and the original lines no mutation touched."""
    lines = _READINGS[which].splitlines()
    touched: set[int] = set()
    families: set[str] = set()
    for _ in range(draw(st.integers(1, 6))):
        index = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["drop", "replace", "truncate", "value"]))
        families |= _families_in(lines[index])
        touched.add(index)
        if action == "drop":
            lines[index] = ""
        elif action == "replace":
            lines[index] = draw(_garbage)
            families |= _families_in(lines[index])
        elif action == "truncate":
            lines[index] = lines[index][: draw(st.integers(0, len(lines[index])))]
        elif not lines[index].startswith("#") and " " in lines[index]:
            lines[index] = lines[index].rsplit(" ", 1)[0] + " " + draw(_numbers)
    kept = [line for i, line in enumerate(_READINGS[which].splitlines()) if i not in touched]
    return "\n".join(lines) + "\n", families, kept


@settings(suppress_health_check=list(HealthCheck))
@given(before=mutated("before"), after=mutated("after"), intact=st.sampled_from([0, 1, 2]))
def test_fuzz_a_malformed_line_costs_only_its_line_and_family(
    before: tuple[str, set[str], list[str]],
    after: tuple[str, set[str], list[str]],
    intact: int,
) -> None:
    # Either reading, or both, mutated; an intact one is the real text.
    texts = [before[0] if intact != 1 else _READINGS["before"]]
    texts.append(after[0] if intact != 2 else _READINGS["after"])
    touched = (before[1] if intact != 1 else set()) | (after[1] if intact != 2 else set())
    started = time.thread_time()
    readings = [read_text(text) for text in texts]
    result = step_metrics(*readings)
    assert time.thread_time() - started < PARSE_CPU_BOUND_S
    # Every line no mutation touched is read, exactly.
    for side, (reading, (_text, _families, kept)) in enumerate(
        zip(readings, (before, after), strict=True), start=1
    ):
        if side != intact:
            untouched = read_text("\n".join(kept)).parts[0]
            assert {k: reading.parts[0].get(k) for k in untouched} == untouched
    # Every family no mutation touched gives its exact delta, both engines summed.
    for key, family in _KEY_FAMILY.items():
        if family not in touched:
            assert result.get(key) == pytest.approx(EXPECTED[key]), (key, touched)
