"""What ``exit_status.failure()`` says of a failing end, for a tracker's error text."""

from __future__ import annotations

import sys

import pytest

from rlmetrics.backends import exit_status


@pytest.fixture(autouse=True)
def _no_exit_noted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exit_status, "_status", None)
    monkeypatch.delattr(sys, "last_exc", raising=False)
    monkeypatch.delattr(sys, "last_value", raising=False)
    monkeypatch.setattr(exit_status, "interactive", lambda: False)


def test_nothing_known_is_none() -> None:
    assert exit_status.failure() is None


def test_a_failing_status_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exit_status, "_status", 143)
    assert exit_status.failure() == "the process exited with status 143"


def test_the_uncaught_exception_is_named_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "last_value", RuntimeError("x" * 2000), raising=False)
    text = exit_status.failure()
    assert text is not None
    assert text.startswith("the training loop ended with an exception: RuntimeError: xxx")
    assert len(text) == 500
    monkeypatch.setattr(sys, "last_value", KeyError(), raising=False)
    assert exit_status.failure() == "the training loop ended with an exception: KeyError"
