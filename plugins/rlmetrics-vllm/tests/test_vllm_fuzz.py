"""The exposition reader under hostile text: it never raises and never hangs; text that does
not parse is an empty reading (the step's rl.vllm.* series are then omitted), and the values
of text that does are read exactly. Runs at 10**5 examples in ``tox -e fuzz``."""

from __future__ import annotations

import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rlmetrics_vllm.engine import Snapshot, read_text, step_metrics
from vllm_support import FIXTURE

TEXT = FIXTURE.read_text()
LINES = TEXT.splitlines()

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


@settings(deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.one_of(corrupted(), st.text(max_size=300)))
def test_fuzz_read_text_never_raises(text: str) -> None:
    started = time.monotonic()
    snapshot = read_text(text)
    result: Any = step_metrics(snapshot, snapshot)
    assert time.monotonic() - started < 5.0
    assert isinstance(snapshot, Snapshot)
    assert all(value == 0 for value in result.values())  # a reading against itself: no work
