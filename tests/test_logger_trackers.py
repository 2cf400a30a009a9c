"""Logger.log_hyperparams, Logger.log_samples and the run identity, through real backends:
the JSONL file (inline) and a queued third-party backend that implements the optional
methods."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import rlmetrics
from rlmetrics.backends import TakesHyperparams, TakesSamples
from rlmetrics.backends.jsonl import read_jsonl, samples_path
from rlmetrics.identity import RunIdentity
from rlmetrics.plugins import register
from rlmetrics.testing import in_memory_telemetry, wait_until


class Keeper:
    """A third-party tracker with both optional methods; it names ``identity``."""

    made: ClassVar[list[Keeper]] = []

    def __init__(self, identity: RunIdentity | None = None) -> None:
        self.identity = identity
        self.params: list[Mapping[str, Any]] = []
        self.tables: list[tuple[list[Any], int, str]] = []
        self.threads: set[str] = set()
        Keeper.made.append(self)

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        pass

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        self.threads.add(threading.current_thread().name)
        self.params.append(params)

    def log_samples(self, rows: Sequence[Mapping[str, Any]], step: int, name: str) -> None:
        self.threads.add(threading.current_thread().name)
        self.tables.append((list(rows), step, name))

    def finish(self) -> None:
        pass


class Plain:
    """A backend with neither optional method, and a factory that takes only options."""

    def __init__(self, **options: Any) -> None:
        self.options = options

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        pass

    def finish(self) -> None:
        pass


class Offers:
    @rlmetrics.hookimpl
    def register_backends(self, register: Any) -> None:
        register("keeper", Keeper)
        register("plain", Plain)


@pytest.fixture(autouse=True)
def offered() -> Iterator[None]:
    Keeper.made.clear()
    register(Offers(), "offers-keeper")
    yield


def _logger(tmp_path: Path, **options: Any) -> rlmetrics.Logger:
    return rlmetrics.Logger(
        backends={"jsonl": {"path": tmp_path / "m.jsonl"}, "keeper": {}, "plain": {}}, **options
    )


def test_hyperparams_reach_every_backend_that_keeps_them(tmp_path: Path) -> None:
    logger = _logger(tmp_path)
    config = {"lr": 1e-6, "layers": [28]}
    logger.log_hyperparams(config)
    config["lr"] = 2.0  # the loop changes its config after the call: the backends do not see it
    logger.finish()

    (keeper,) = Keeper.made
    assert isinstance(keeper, TakesHyperparams) and isinstance(keeper, TakesSamples)
    assert keeper.params == [{"lr": 1e-6, "layers": [28]}]
    assert keeper.threads == {"rlmetrics-backend-keeper"}  # queued: never the loop's thread
    row, end = read_jsonl(tmp_path / "m.jsonl", every_row=True)
    assert row["hyperparams"] == {"lr": 1e-6, "layers": [28]} and end["kind"] == "end"
    assert logger.backends["plain"].options == {}  # no identity forced on it


def test_samples_reach_every_backend_bounded_and_as_they_were(tmp_path: Path) -> None:
    logger = _logger(tmp_path, max_sample_rows=2, max_cell_bytes=8)
    rows = [{"prompt": "p", "completion": "c" * 20, "reward": 1.0} for _ in range(3)]
    logger.log_samples(rows, step=4)
    rows[0]["prompt"] = "changed"
    logger.finish()

    expected = [{"prompt": "p", "completion": "c" * 8, "reward": 1.0}] * 2
    assert Keeper.made[0].tables == [(expected, 4, "samples")]
    assert [r["sample"] for r in read_jsonl(samples_path(tmp_path / "m.jsonl"))] == expected


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda lg: lg.log_samples({"prompt": "p"}, step=1), "takes a list of dicts"),
        (lambda lg: lg.log_samples([{"a": 1}], step=1, name=3), "'samples' is used"),
        (lambda lg: lg.log_hyperparams("lr=1"), "log_hyperparams takes a dict"),
    ],
)
def test_bad_input_is_said_and_the_rest_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, call: Any, said: str
) -> None:
    logger = _logger(tmp_path)
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        call(logger)
    logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
    logger.finish()
    assert said in caplog.text
    assert [row["metrics"] for row in read_jsonl(tmp_path / "m.jsonl")] == [{"loss": 1.0}]


def test_the_run_id_is_the_telemetrys_and_every_backend_gets_it(tmp_path: Path) -> None:
    with in_memory_telemetry(run_id="run-42") as (handle, _reader):
        logger = _logger(tmp_path)
        logger.log_metrics({"loss": 1.0}, step=1, prefix="train")
        logger.finish()
        assert handle.run_id == "run-42"
    assert Keeper.made[0].identity == RunIdentity("run-42", resume=False)
    assert [row["run_id"] for row in read_jsonl(tmp_path / "m.jsonl")] == ["run-42"]


def test_start_with_resume_makes_every_logger_resume(tmp_path: Path) -> None:
    with in_memory_telemetry(run_id="run-42", resume=True):
        logger = _logger(tmp_path)
        logger.finish()
    assert Keeper.made[0].identity == RunIdentity("run-42", resume=True)
    assert [row.get("kind") for row in read_jsonl(tmp_path / "m.jsonl", every_row=True)] == [
        "resume",
        "end",
    ]


def test_a_run_id_other_than_the_telemetrys_is_refused(tmp_path: Path) -> None:
    with in_memory_telemetry(run_id="run-42"), pytest.raises(ValueError, match="one run has"):
        _logger(tmp_path, run_id="other")


def test_resume_needs_the_id_of_the_run_to_continue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(ValueError, match="pass run_id="):
        _logger(tmp_path, resume=True)
    with pytest.raises(ValueError, match="pass run_id="):
        rlmetrics.start(resume=True)
    logger = _logger(tmp_path, run_id="r", resume=True)
    logger.finish()
    assert Keeper.made[-1].identity == RunIdentity("r", resume=True)


def test_a_backend_that_fails_in_an_optional_method_costs_only_that_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logger = _logger(tmp_path)
    (keeper,) = Keeper.made

    def broken(params: Any) -> None:
        raise OSError("tracker down")

    keeper.log_hyperparams = broken  # type: ignore[method-assign]
    logger.log_hyperparams({"lr": 1.0})
    logger.log_samples([{"prompt": "p"}], step=1)
    wait_until(lambda: len(keeper.tables) == 1, 30, "the samples after the failure")
    logger.finish()
    assert "failed in log_hyperparams" in caplog.text
    row, end = read_jsonl(tmp_path / "m.jsonl", every_row=True)
    assert row["hyperparams"] == {"lr": 1.0} and end["kind"] == "end"


@pytest.mark.parametrize("step", ["x", -1, 2.5, True, 2**70])
def test_a_table_whose_step_is_no_step_lands_at_the_last_step_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, step: Any
) -> None:
    """Before: ``log_samples(rows, step="x")`` handed "x" to every tracker as the step (a
    JSONL row at step "x", W&B refusing the table); log_metrics says such a step once and
    logs at the next. A table belongs to the step already logged: it lands at the last."""
    logger = _logger(tmp_path)
    logger.log_metrics({"loss": 1.0}, step=3, prefix="train")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger.log_samples([{"prompt": "p"}], step=step)
        logger.log_samples([{"prompt": "q"}], step=np.int64(5))  # a NumPy step is a step
    logger.finish()
    assert Keeper.made[0].tables == [
        ([{"prompt": "p"}], 3, "samples"),
        ([{"prompt": "q"}], 5, "samples"),
    ]
    assert type(Keeper.made[0].tables[1][1]) is int
    assert [r["step"] for r in read_jsonl(samples_path(tmp_path / "m.jsonl"))] == [3, 5]
    said = [r.getMessage() for r in caplog.records if "log_samples's step" in r.getMessage()]
    assert len(said) == 1 and "logged at the last step (3)" in said[0], said
