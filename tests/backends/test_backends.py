from __future__ import annotations

import logging
import math
import threading

import pytest

from rlmetrics.backends import BackendUnavailable, as_step, first_line, full_key, start_within


def test_full_key_leaves_axis_keys_unprefixed() -> None:
    assert full_key("train", "loss") == "train/loss"
    assert full_key("", "loss") == "loss"
    assert full_key("train", "rlmetrics/step") == "rlmetrics/step"
    assert full_key("rollout/throughput", "telemetry/wall_time_seconds") == (
        "telemetry/wall_time_seconds"
    )


def test_as_step_takes_finite_numbers_only() -> None:
    class Scalar:
        def item(self) -> int:
            return 7

    assert [as_step(v) for v in (3, 3.0, Scalar())] == [3, 3, 7]
    assert [as_step(v) for v in (None, True, "3", math.nan, math.inf)] == [None] * 5


def test_start_within_gives_up_at_its_bound_and_ends_what_starts_late() -> None:
    """A tracker's connection that hangs costs the caller the bound, then a one-line
    ``BackendUnavailable``; if it does connect later, what it made is handed to ``abandon``."""
    release = threading.Event()
    abandoned: list[str] = []
    ended = threading.Event()

    def connect() -> str:
        release.wait(30)
        return "run-1"

    def abandon(run: str) -> None:
        abandoned.append(run)
        ended.set()

    with pytest.raises(BackendUnavailable, match=r"the server at x did not answer within 0\.1 s"):
        start_within(connect, 0.1, "the server at x", abandon=abandon)
    release.set()
    assert ended.wait(10) and abandoned == ["run-1"]
    # In time: its result, or its own exception, is the caller's.
    assert start_within(lambda: 7, 10, "x") == 7
    with pytest.raises(ZeroDivisionError):
        start_within(lambda: 1 // 0, 10, "x")


def test_a_step_axis_keeps_a_dict_without_a_number_at_the_previous_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from rlmetrics.backends import StepAxis

    axis = StepAxis("sometracker")
    with caplog.at_level(logging.DEBUG, logger="rlmetrics"):
        assert [axis(s) for s in (3, "x", None, 5, object())] == [3, 3, 3, 5, 5]
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(said) == 1
    assert said[0].startswith("rlmetrics-sometracker: a step (")
    assert said[0].endswith("is not a number; such dicts are logged at the previous step")


def test_first_line_is_a_trackers_reason_in_one_line() -> None:
    assert first_line(RuntimeError("no key\nTraceback: ...")) == "no key"
    assert first_line(RuntimeError("  \n")) == "RuntimeError"
