from __future__ import annotations

import logging
import re
import threading
from pathlib import Path
from typing import Any

import pytest

import rlmetrics
from rlmetrics import warn_once
from rlmetrics._warn import INFORMATIONAL, informational
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.plugins import register
from rlmetrics.testing import in_memory_telemetry, own_records


def test_first_warning_has_a_traceback_then_debug(caplog: Any) -> None:
    with caplog.at_level(logging.DEBUG, logger="rlmetrics"):
        for _ in range(3):
            try:
                raise ValueError("sink down")
            except ValueError:
                warn_once("sink", "sink failed")
        warn_once("other", "other failed")
    records = [(r.levelno, r.getMessage(), bool(r.exc_info)) for r in own_records(caplog.records)]
    assert records == [
        (logging.WARNING, "sink failed", True),
        (logging.DEBUG, "sink failed", True),
        (logging.DEBUG, "sink failed", True),
        (logging.WARNING, "other failed", False),
    ]
    assert "ValueError: sink down" in caplog.text
    # Outside an except block the report is its one line: no stack.
    assert not caplog.records[-1].stack_info and not caplog.records[-1].exc_info


def test_no_report_prints_a_logged_string_value(caplog: Any, tmp_path: Any) -> None:
    """A logged string may be a secret: every report gives its type and length instead."""
    import rlmetrics
    from rlmetrics.events import CheckpointOutcome
    from rlmetrics.testing import in_memory_telemetry

    secret = "sk-live-SECRET-0123456789"
    with caplog.at_level(logging.DEBUG, logger="rlmetrics"), in_memory_telemetry():
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}})
        logger.log_metrics({"reward": secret, "loss": [secret]}, step=secret, prefix="train")  # type: ignore[arg-type]
        logger.log_metrics({"efficiency/idle/validation_s": secret}, step=1)
        logger.log_setup_timing({"policy_init_time_s": secret})
        logger.log_metrics({"snapshot_rows": secret}, step=1, prefix="timing/rollout_checkpoint")
        logger.log_rollout_checkpoint(CheckpointOutcome(outcome="failed", reason=secret))
        rlmetrics.record("rl.train", {"reward": secret})
        rlmetrics.record("rl.train", {"reward": 1.0}, {"rl.x": secret})
        logger.finish()
    assert caplog.records, "the bad values were reported"
    assert secret not in caplog.text


def test_an_expected_condition_is_one_line_and_its_traceback_is_at_debug(caplog: Any) -> None:
    with caplog.at_level(logging.DEBUG, logger="rlmetrics"):
        for _ in range(2):
            try:
                raise OSError(28, "No space left on device")
            except OSError:
                warn_once("disk", "disk full: free some space", expected=True)
    records = [(r.levelno, r.getMessage(), bool(r.exc_info)) for r in own_records(caplog.records)]
    assert records == [
        (logging.WARNING, "disk full: free some space", False),
        (logging.DEBUG, "disk full: free some space", True),
        (logging.DEBUG, "disk full: free some space", True),
    ]


# -- strict mode (issue 25): a warning that something asked for is not happening raises --------


class _Offers:
    """A plugin offering a backend that fails to start and one that fails every write."""

    def __init__(self) -> None:
        self.written = threading.Event()

    @rlmetrics.hookimpl
    def register_backends(self, register: Any) -> None:
        offers = self

        class NoStart:
            def __init__(self) -> None:
                raise ConnectionError("no credentials")

        class FailsOnItsThread:  # queued: it writes on a thread of its own
            def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
                offers.written.set()
                raise OSError("store gone")

        register("no-start", NoStart)
        register("fails", FailsOnItsThread)


def test_without_strict_mode_nothing_raises(tmp_path: Path) -> None:
    register(_Offers(), "offers")
    logger = rlmetrics.Logger(backends={"no-start": {}, "jsonl": {"path": tmp_path / "m.jsonl"}})
    logger.log_metrics({"reward": "high"}, step=1, prefix="train")
    logger.finish()


def test_a_backend_that_does_not_start_raises_at_construction(tmp_path: Path) -> None:
    register(_Offers(), "offers")
    with pytest.raises(rlmetrics.StrictModeError, match=r"backend 'no-start'.*failed to start"):
        rlmetrics.Logger(
            backends={"no-start": {}, "jsonl": {"path": tmp_path / "m.jsonl"}}, strict=True
        )
    # Nothing was left running, and strict mode ended with the Logger that asked for it.
    assert not rlmetrics._warn.strict_mode()  # type: ignore[attr-defined]


def test_a_value_not_exported_raises_after_the_call_did_its_work(tmp_path: Path) -> None:
    with in_memory_telemetry():
        logger = rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}, strict=True)
        with pytest.raises(rlmetrics.StrictModeError, match=r"rl.reward.mean \(key 'reward'\)"):
            logger.log_metrics({"reward": "high", "loss": 0.5}, step=1, prefix="train")
        logger.log_metrics({"reward": 0.5}, step=2, prefix="train")  # raised once, not again
        logger.finish()
    assert [r["metrics"] for r in read_jsonl(tmp_path / "m.jsonl")] == [
        {"reward": "high", "loss": 0.5},
        {"reward": 0.5},
    ]


def test_a_failure_on_another_thread_raises_from_the_next_call(tmp_path: Path) -> None:
    offers = _Offers()
    register(offers, "offers")
    logger = rlmetrics.Logger(backends={"fails": {}}, strict=True)
    logger.log_metrics({"loss": 1.0}, step=1)  # queued: fails on the backend's thread
    assert offers.written.wait(30)
    with pytest.raises(rlmetrics.StrictModeError, match="backend 'fails'"):
        logger.finish()


def test_an_informational_warning_never_raises(tmp_path: Path) -> None:
    logger = rlmetrics.Logger(
        backends={"jsonl": {"path": tmp_path / "m.jsonl"}}, strict=True, max_sample_rows=2
    )
    logger.log_samples([{"prompt": "p"}] * 5, step=1)  # rows past the bound are cut, and said
    logger.finish()


@pytest.mark.parametrize("value", ["1", "true", "yes", "on"])
def test_the_environment_turns_strict_mode_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str
) -> None:
    monkeypatch.setenv("RLMETRICS_STRICT", value)
    register(_Offers(), "offers")
    with pytest.raises(rlmetrics.StrictModeError):
        rlmetrics.Logger(backends={"no-start": {}})


def test_a_bad_strict_variable_is_a_configuration_mistake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLMETRICS_STRICT", "maybe")
    with pytest.raises(ValueError, match="RLMETRICS_STRICT='maybe' is neither on"):
        rlmetrics.Logger(backends={"console": {}})
    with pytest.raises(ValueError, match="RLMETRICS_STRICT"):
        rlmetrics.start()
    assert rlmetrics.current() is None


def test_start_in_strict_mode_raises_for_a_hook_that_failed_and_stops() -> None:
    class Broken:
        @rlmetrics.hookimpl
        def telemetry_started(self, telemetry: Any) -> None:
            raise RuntimeError("a plugin's bug")

    register(Broken(), "broken")
    with pytest.raises(rlmetrics.StrictModeError, match="broken"):
        rlmetrics.start(exporters=["console"], strict=True)
    assert rlmetrics.current() is None


def test_shutdown_raises_what_went_unmet_and_ends_strict_mode() -> None:
    handle = rlmetrics.start(readers=[_reader()], strict=True)
    rlmetrics.record("no.such.group", {"x": 1.0})  # a value with nowhere to go
    with pytest.raises(rlmetrics.StrictModeError, match=r"no metric group 'no\.such\.group'"):
        handle.shutdown()
    assert rlmetrics.current() is None
    assert not rlmetrics._warn.strict_mode()  # type: ignore[attr-defined]


def _reader() -> Any:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    return InMemoryMetricReader()


def test_every_informational_cause_is_a_real_warning() -> None:
    """The documented exceptions to strict mode name causes the code warns about (a renamed
    key would otherwise turn an informational warning strict without anyone noticing)."""
    root = Path(__file__).resolve().parents[1]
    sources = "".join(
        path.read_text() for path in root.glob("**/src/**/*.py") if ".tox" not in path.parts
    )
    for cause in INFORMATIONAL:
        if cause.startswith("*"):
            assert re.search(r'f"\{what\}-clash:', sources)
        else:
            assert f'"{cause}' in sources, cause
    assert informational("backend-clash:jsonl") and informational("samples:rows")
    assert not informational("backend-start:jsonl") and not informational("samples:not-a-list")
