"""The adapter contract every trainer adapter is built on (rlmetrics.adapters), held in the core
suite: a Logger given is never finished here; a built one is built when the trainer first logs,
once per adapter life, and finished once (explicitly, with the adapter, or at interpreter exit);
``guarded`` swallows everything but what strict mode asks to raise.

A queued backend (:class:`rlmetrics.testing.trainers.Recorder`, on a thread of its own like
W&B's or MLflow's) stands for the trackers: each instance is one tracker run, so "one instance"
is "one run per run id"."""

from __future__ import annotations

import gc
import logging
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import rlmetrics
from rlmetrics.adapters import AdapterLogger, guarded
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.ranks import RankMerger
from rlmetrics.testing import in_memory_telemetry, own_records
from rlmetrics.testing.trainers import Recorder, recorder

__all__ = ["recorder"]


@pytest.fixture(autouse=True)
def offered(recorder: type[Recorder]) -> None:
    """Every test here may build Loggers with the ``recorder`` backend."""


class Trainer:
    """The smallest adapter: a trainer's hooks, each one Logger call, as the plugins write
    them (the transformers callback's shape: a train phase, an eval phase)."""

    def __init__(self, logs: AdapterLogger) -> None:
        self.logs = logs
        self.step = 0

    @guarded("toy", "log")
    def log(self, metrics: dict[str, Any], prefix: str) -> None:
        logger = self.logs.start()
        if logger is not None:
            logger.log_metrics(metrics, step=self.step, prefix=prefix)

    def train(self, steps: int) -> None:
        for _ in range(steps):
            self.step += 1
            self.log({"loss": 1.0 / self.step}, "train")

    def evaluate(self) -> None:
        self.log({"loss": 0.5}, "eval")


def test_a_built_logger_is_built_when_the_trainer_first_logs_and_serves_its_whole_life() -> None:
    logs = AdapterLogger(backends={"recorder": {}}, adapter="toy")
    assert logs.logger is None and Recorder.made == []  # nothing opened before training
    trainer = Trainer(logs)
    trainer.train(2)
    trainer.evaluate()  # after train(): the same Logger, not a second run
    trainer.train(1)  # a second train()
    trainer.evaluate()
    logs.finish()
    (run,) = Recorder.made
    assert run.finished == 1
    assert [(step, prefix) for step, prefix, _ in run.rows] == [
        (1, "train"),
        (2, "train"),
        (2, "eval"),
        (3, "train"),
        (3, "eval"),
    ]
    assert run.threads == {"rlmetrics-backend-recorder"}  # queued, as the trackers are


def test_finish_is_once_and_the_adapter_then_drops_and_says_so(caplog: Any) -> None:
    logs = AdapterLogger(backends={"recorder": {}}, adapter="toy")
    trainer = Trainer(logs)
    trainer.train(1)
    logs.finish()
    logs.finish()
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        trainer.evaluate()
        trainer.train(2)
    (run,) = Recorder.made  # no second run under the same id, left running
    assert run.finished == 1 and len(run.rows) == 1
    assert logs.finished and logs.logger is None
    said = [r.getMessage() for r in own_records(caplog.records)]
    assert len(said) == 1 and "toy was called after its Logger was finished" in said[0]


def test_in_strict_mode_a_call_after_finish_stops_the_trainer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logs = AdapterLogger(backends={"recorder": {}}, adapter="toy")
    trainer = Trainer(logs)
    trainer.train(1)
    logs.finish()
    monkeypatch.setenv("RLMETRICS_STRICT", "1")
    with pytest.raises(rlmetrics.StrictModeError, match="toy was called after its Logger"):
        trainer.evaluate()
    assert len(Recorder.made) == 1


def test_a_given_logger_is_used_as_it_is_and_never_finished_here() -> None:
    given = rlmetrics.Logger(backends={"recorder": {}})
    logs = AdapterLogger(given, adapter="toy")
    assert logs.logger is given and logs.start() is given
    Trainer(logs).train(1)
    logs.finish()  # the adapter's end: the Logger is its owner's
    (run,) = Recorder.made
    assert run.finished == 0 and not logs.finished
    given.log_metrics({"after": 1.0}, step=9)  # the owner still writes to it...
    Trainer(logs).train(1)  # ...and so does the adapter
    given.finish()
    assert run.finished == 1
    assert [step for step, _, _ in run.rows] == [1, 9, 1]


def test_the_adapter_garbage_collected_finishes_its_logger() -> None:
    logs = AdapterLogger(backends={"recorder": {}}, adapter="toy")
    Trainer(logs).train(3)
    (run,) = Recorder.made
    del logs
    gc.collect()
    assert run.finished == 1 and len(run.rows) == 3  # written before the run was finished


def test_a_pickled_adapter_builds_its_own_logger_where_it_lands() -> None:
    logs = AdapterLogger(backends={"recorder": {}}, adapter="toy")
    Trainer(logs).train(1)
    copy = pickle.loads(pickle.dumps(logs))
    assert copy.logger is None
    Trainer(copy).train(1)
    copy.finish()
    logs.finish()
    assert [run.finished for run in Recorder.made] == [1, 1]


_EXIT_SCRIPT = """
import sys, time
import rlmetrics
from rlmetrics.adapters import AdapterLogger
from rlmetrics.plugins import register

class Slow:  # a tracker that takes a while per row: queued rows are still there at exit
    def __init__(self, path):
        self.file = open(path, "a")
    def log_metrics(self, metrics, step, prefix):
        time.sleep(0.05)
        self.file.write(f"{prefix} {step}\\n")
        self.file.flush()
    def finish(self):
        self.file.write("finished\\n")
        self.file.close()

class Offers:
    @rlmetrics.hookimpl
    def register_backends(self, register):
        register("slow", Slow)

register(Offers(), "offers-slow")
logs = AdapterLogger(backends={"slow": {"path": sys.argv[1]}}, adapter="toy")
for step in range(1, 6):
    logs.start().log_metrics({"loss": 1.0}, step=step, prefix="train")
logs.start().log_metrics({"loss": 0.5}, step=5, prefix="eval")
# no finish(): the script ends with the adapter alive
"""


def test_interpreter_exit_finishes_an_adapters_logger(tmp_path: Path) -> None:
    out = tmp_path / "rows.txt"
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_EXIT_SCRIPT), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text().splitlines() == [
        *(f"train {step}" for step in range(1, 6)),
        "eval 5",
        "finished",
    ]
    assert "not written" not in done.stderr


# -- guarded: nothing raises into the trainer, unless strict mode asks ------------------------


def test_a_failure_is_said_once_and_the_trainer_goes_on(caplog: Any) -> None:
    calls = []

    @guarded("toy", "on_log")
    def on_log(step: int) -> int:
        calls.append(step)
        raise RuntimeError("a bug")

    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        assert [on_log(step) for step in range(3)] == [None, None, None]
    assert calls == [0, 1, 2]
    (said,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert said.getMessage().startswith("rlmetrics: toy: on_log failed; the trainer goes on")


def test_in_strict_mode_a_strict_mode_error_stops_the_trainer(tmp_path: Path) -> None:
    with in_memory_telemetry():
        logs = AdapterLogger(
            rlmetrics.Logger(backends={"recorder": {}}, strict=True), adapter="toy"
        )
        trainer = Trainer(logs)
        trainer.train(1)
        with pytest.raises(rlmetrics.StrictModeError, match=r"rl.reward.mean \(key 'reward'\)"):
            trainer.log({"reward": "high", "loss": 0.5}, "train")
        logs.logger.finish()  # type: ignore[union-attr]
    (run,) = Recorder.made
    assert run.rows[-1] == (1, "train", {"reward": "high", "loss": 0.5})  # the call did its work


def test_in_strict_mode_the_adapters_own_failure_stops_the_trainer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RLMETRICS_STRICT", "1")

    @guarded("toy", "on_log")
    def on_log() -> None:
        raise RuntimeError("a bug in the adapter")

    with pytest.raises(rlmetrics.StrictModeError, match="toy: on_log failed") as raised:
        on_log()
    assert isinstance(raised.value.__context__, RuntimeError)  # the bug, with its traceback


def test_strict_mode_at_the_built_loggers_start_stops_the_trainer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RLMETRICS_STRICT", "1")
    # A JSONL path that is a folder: the backend cannot start, which strict mode refuses.
    trainer = Trainer(AdapterLogger(backends={"jsonl": {"path": tmp_path}}, adapter="toy"))
    with pytest.raises(rlmetrics.StrictModeError, match="backend 'jsonl'"):
        trainer.train(1)


def test_ranks_on_one_process_log_as_they_are_and_a_mistake_fails_at_once(
    tmp_path: Path,
) -> None:
    """``ranks="torch"`` with no process group (the script run without a launcher) builds a
    Logger that merges nothing; a Logger given with ranks=, or an unknown engine, is refused."""
    path = tmp_path / "m.jsonl"
    logs = AdapterLogger(backends={"jsonl": {"path": str(path)}}, ranks="torch")
    assert logs.merges
    logger = logs.start()
    assert logger is not None
    logger.log_metrics({"reward": 1.0}, step=0, prefix="train")
    logs.finish()
    assert [row["metrics"] for row in read_jsonl(path)] == [{"reward": 1.0}]
    assert not list(tmp_path.glob("rlmetrics.rank*.jsonl"))
    with rlmetrics.Logger(backends={}) as given, pytest.raises(ValueError, match="or ranks="):
        AdapterLogger(given, ranks="torch")
    with pytest.raises(ValueError, match="pass 'torch'"):
        AdapterLogger(ranks="nccl")


def test_a_given_logger_that_merges_ranks_is_called_on_every_rank(tmp_path: Path) -> None:
    """The advice for ``ranks=`` with a Logger is a Logger built with ranks: the adapters call
    that Logger on every rank (its merge is a collective), as they do one built with ranks=.
    Before: ``merges`` was False for it, so the adapters called it on rank zero only and its
    merges never paired (rank 0's waited for ranks that never joined)."""
    other_rank = SimpleNamespace(
        rank=1, world_size=2, all_gather=lambda row: [row, row], all_gather_object=lambda o: [o, o]
    )
    merger = RankMerger(other_rank, raw_path=tmp_path / "raw.jsonl")
    with rlmetrics.Logger(backends={}, ranks=merger) as given:
        logs = AdapterLogger(given)
        assert logs.merges
        logs_start = logs.start()
        assert logs_start is given
    with rlmetrics.Logger(backends={}) as plain:
        assert not AdapterLogger(plain).merges
    with rlmetrics.Logger(backends={}) as given, pytest.raises(ValueError) as refused:
        AdapterLogger(given, ranks="torch")
    # What to do instead, either way: ranks= alone, or a Logger of yours built with ranks.
    assert "ranks= alone" in str(refused.value)
    assert "rlmetrics.Logger(ranks='torch')" in str(refused.value)


# -- the run's id before the Logger is built ---------------------------------------------------


@pytest.fixture
def unnamed(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No launcher names the run."""
    for variable in ("OTEL_RESOURCE_ATTRIBUTES", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


def test_the_run_id_told_before_the_logger_is_built_is_the_runs(
    unnamed: pytest.MonkeyPatch,
) -> None:
    """A trainer names things by the run before it logs (Lightning's checkpoint folder is its
    logger's version): the id told then is the one the Logger built later writes under —
    made up here and handed to it, or the one that names the run (the launcher's); a Logger
    gives its own. Nothing is built for it."""
    logs = AdapterLogger(backends={"recorder": {}}, adapter="toy")
    told = logs.run_id()
    assert logs.logger is None and Recorder.made == []
    assert logs.start().identity.run_id == told == logs.run_id()
    logs.finish()
    assert logs.run_id() == told  # the last run's, once finished
    unnamed.setenv("SLURM_JOB_ID", "4242")
    launched = AdapterLogger(backends={"recorder": {}}, adapter="toy")
    assert launched.run_id() == "4242" == launched.start().identity.run_id
    launched.finish()
    with rlmetrics.Logger(backends={}, run_id="given") as given:
        assert AdapterLogger(given, adapter="toy").run_id() == "given"


@pytest.mark.usefixtures("unnamed")
def test_telemetry_started_after_the_id_was_told_names_the_run() -> None:
    """An id made up before ``rlmetrics.start()`` ran is dropped for the telemetry's (a Logger
    given another id than the running telemetry's is refused: the rows would be lost)."""
    logs = AdapterLogger(backends={"recorder": {}}, adapter="toy")
    logs.run_id()
    with in_memory_telemetry(run_id="telemetry-run"):
        assert logs.run_id() == "telemetry-run"
        assert logs.start().identity.run_id == "telemetry-run"
        logs.finish()
    (run,) = Recorder.made
    assert run.finished == 1


def test_one_configuration_in_another_order_is_logged_once() -> None:
    """Trainers hand the configuration again at each stage, rebuilt (Lightning's hparams,
    Accelerate's ``init_trackers``): the same keys in another order, a set built in another
    order (``{8, 0}`` iterates 8, 0 or 0, 8 as it was built), is the same configuration and
    logged once; a changed value is logged."""
    logs = AdapterLogger(backends={"recorder": {}}, adapter="toy")
    logs.log_hyperparams({"lr": 0.1, "ids": set([8, 0]), "model": {"a": 1, "b": 2}})
    logs.log_hyperparams({"model": {"b": 2, "a": 1}, "ids": set([0, 8]), "lr": 0.1})
    logs.log_hyperparams({"lr": 0.2, "ids": {0, 8}, "model": {"a": 1, "b": 2}})
    logs.finish()
    (run,) = Recorder.made
    assert [params["lr"] for params in run.hyperparams] == [0.1, 0.2]
    assert run.hyperparams[0]["ids"] == [0, 8]
