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


def test_a_status_noted_is_forgotten_between_tests() -> None:
    """A test that calls the watched sys.exit in-process (a CLI's main under
    pytest.raises(SystemExit)) noted its status for the rest of the process: a later test's
    finish(failed=True) read 'the process exited with status 3' (CI run 13, otel144)."""
    from rlmetrics.testing import reset_process_state

    exit_status._note(3)
    assert exit_status.exit_status() == 3
    reset_process_state()
    assert exit_status.exit_status() is None
