"""RLMetricsLogger in a real ``lightning.Trainer.fit`` on a toy module (CPU, a few steps):
what the module logs is read back from the JSONL file and the real SDK's in-memory reader."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning
import pytest
import torch
from lightning.pytorch.utilities import rank_zero_only
from rlmetrics_lightning import RLMetricsLogger
from torch.utils.data import DataLoader, TensorDataset

import rlmetrics
from rlmetrics import KeyMap, KeyRule
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.ranks import RankMerger
from rlmetrics.testing import points
from rlmetrics.testing.trainers import Recorder

#: The toy module's keys as rlmetrics series: the map a user of their own loop would write.
TOY_MAP = KeyMap(
    "toy",
    [KeyRule("train_loss", series="rl.policy.loss"), KeyRule("reward", series="rl.reward.mean")],
)


class Toy(lightning.LightningModule):  # type: ignore[misc]
    """A linear regression that logs its loss, a fake reward, and what a trainer may pass
    badly (a NaN, a string is refused by Lightning itself, so a NaN and a tensor)."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        self.log("reward", float(self.global_step))
        self.log("nan_metric", float("nan"))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def _data() -> DataLoader[Any]:
    torch.manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)


def _trainer(logger: Any, steps: int = 3) -> lightning.Trainer:
    return lightning.Trainer(
        max_steps=steps,
        logger=logger,
        log_every_n_steps=1,
        accelerator="cpu",
        devices=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def _fit(logger: Any, steps: int = 3) -> lightning.Trainer:
    trainer = _trainer(logger, steps)
    trainer.fit(Toy(), _data())
    return trainer


def test_fit_logs_each_step_the_hyperparameters_and_finishes(
    tmp_path: Path, telemetry: tuple[Any, Any]
) -> None:
    _handle, reader = telemetry
    path = tmp_path / "metrics.jsonl"
    logger = RLMetricsLogger(backends={"jsonl": {"path": path}}, key_map=TOY_MAP)
    trainer = _fit(logger)
    assert trainer.global_step == 3
    rows = [row for row in read_jsonl(path) if "train_loss" in row["metrics"]]
    assert [row["step"] for row in rows] == [0, 1, 2]  # Lightning logs before it steps
    assert [row["metrics"]["reward"] for row in rows] == [0.0, 1.0, 2.0]
    assert all(row["prefix"] == "train" for row in rows)
    exported = {p.name: p.value for p in points(reader) if not p.attributes}
    assert exported["rl.policy.loss"] == pytest.approx(rows[-1]["metrics"]["train_loss"])
    assert exported["rl.reward.mean"] == 2.0
    hyperparams = [row for row in read_jsonl(path, every_row=True) if "hyperparams" in row]
    assert hyperparams[0]["hyperparams"]["lr"] == 0.1
    assert logger.experiment is not None  # finalize ends fit, not the run: still open
    logger.finish()
    assert logger.experiment is None


def test_a_given_logger_is_written_to_and_left_to_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with rlmetrics.Logger(backends={"jsonl": {"path": path}}) as owned:
        _fit(RLMetricsLogger(owned), steps=2)
        owned.log_metrics({"after": 1.0}, step=9)  # still open after fit
    assert [row["step"] for row in read_jsonl(path)][-1] == 9


def test_a_given_logger_that_merges_ranks_is_called_on_every_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``RLMetricsLogger(rlmetrics.Logger(ranks="torch"))`` (the advice of the error for a
    Logger and ranks= both): on a rank other than zero its log_metrics reaches the Logger,
    whose merge every rank takes part in. Before: only rank zero's did, so the merges never
    paired. (This process stands for rank 1 of two; the DDP test runs it on two.)"""
    other_rank = SimpleNamespace(
        rank=1, world_size=2, all_gather=lambda row: [row, row], all_gather_object=lambda o: [o, o]
    )
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    merger = RankMerger(other_rank, raw_path=tmp_path / "raw.jsonl")
    with rlmetrics.Logger(backends={}, ranks=merger) as given:
        logger = RLMetricsLogger(given)
        logger.log_metrics({"reward": 0.5}, step=4)
        logger.finish()  # a given Logger is its owner's
    assert [(row["step"], row["metrics"]) for row in read_jsonl(tmp_path / "raw.jsonl")] == [
        (4, {"reward": 0.5})
    ]


class BrokenLogger(rlmetrics.Logger):
    def log_metrics(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in rlmetrics")

    log_hyperparams = log_metrics  # type: ignore[assignment]


def test_an_rlmetrics_failure_never_fails_the_trainers_step(caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        trainer = _fit(RLMetricsLogger(BrokenLogger(backends={})))
    assert trainer.global_step == 3
    failed = [r for r in caplog.records if "rlmetrics-lightning: log_metrics" in r.getMessage()]
    assert len(failed) == 1


def test_bad_values_drop_only_themselves(tmp_path: Path, telemetry: tuple[Any, Any]) -> None:
    _handle, reader = telemetry
    path = tmp_path / "metrics.jsonl"
    logger = RLMetricsLogger(backends={"jsonl": {"path": path}}, key_map=TOY_MAP)
    logger.log_metrics(
        {"train_loss": None, "reward": torch.tensor(0.5), "x": "text", "y": float("nan")}, step=4
    )
    exported = {p.name: p.value for p in points(reader) if not p.attributes}
    logger.finalize("success")
    assert exported["rl.reward.mean"] == 0.5  # a 0-d tensor, read
    assert "rl.policy.loss" not in exported  # its None dropped alone
    ((row),) = list(read_jsonl(path))
    assert row["step"] == 4 and row["metrics"]["reward"] == 0.5 and row["metrics"]["x"] == "text"


def test_a_configuration_mistake_fails_before_fit() -> None:
    with pytest.raises(ValueError, match="unknown backend"):
        RLMetricsLogger(backends={"nope": {}})
    with pytest.raises(ValueError, match="unknown key map"):
        RLMetricsLogger(key_map="nope")


# -- one Logger per trainer for its whole life (issue 31) -------------------------------------


def test_fit_validate_test_and_a_second_fit_are_one_run_finished_once(
    tmp_path: Path, recorder: type[Recorder]
) -> None:
    logger = RLMetricsLogger(backends={"recorder": {}})
    trainer = _trainer(logger, steps=2)
    module = Toy()
    trainer.fit(module, _data())
    trainer.validate(module, _data())  # finalize("success") ran after fit: the run goes on
    trainer.test(module, _data())
    trainer.fit_loop.epoch_loop.max_steps = 4
    trainer.fit(module, _data())  # a second fit, on from step 2
    (run,) = recorder.made  # one tracker run: never a second one under the same run id
    assert run.finished == 0
    logger.finish()
    logger.finish()
    assert run.finished == 1
    assert run.threads == {"rlmetrics-backend-recorder"}  # a queued backend, as the trackers
    keys = [
        (step, next(k for k in ("train_loss", "val_loss", "test_loss") if k in metrics))
        for step, _, metrics in run.rows
        if {"train_loss", "val_loss", "test_loss"} & set(metrics)
    ]
    assert keys == [
        (0, "train_loss"),
        (1, "train_loss"),
        (2, "val_loss"),
        (2, "test_loss"),
        (2, "train_loss"),
        (3, "train_loss"),
    ]
    trainer.validate(module, _data())  # after finish(): dropped, never a new run
    assert len(recorder.made) == 1 and run.finished == 1


def test_the_first_logged_step_is_the_one_lightnings_own_loggers_report(tmp_path: Path) -> None:
    import csv

    from lightning.pytorch.loggers import CSVLogger

    path = tmp_path / "metrics.jsonl"
    ours = RLMetricsLogger(backends={"jsonl": {"path": path}})
    theirs = CSVLogger(tmp_path / "csv", name="toy", version=0)
    _fit([ours, theirs], steps=3)
    with open(Path(theirs.log_dir) / "metrics.csv", newline="") as handle:
        csv_rows = [row for row in csv.DictReader(handle) if row.get("train_loss")]
    jsonl_rows = [row for row in read_jsonl(path) if "train_loss" in row["metrics"]]
    assert [int(row["step"]) for row in csv_rows] == [row["step"] for row in jsonl_rows]
    assert [row["step"] for row in jsonl_rows] == [0, 1, 2]  # the first step is 0, as theirs
    assert [float(row["train_loss"]) for row in csv_rows] == pytest.approx(
        [row["metrics"]["train_loss"] for row in jsonl_rows]
    )
    ours.finish()


def test_the_default_jsonl_lands_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As docs/integrations/lightning.md says: ./rlmetrics.jsonl, not under default_root_dir.
    monkeypatch.chdir(tmp_path)
    logger = RLMetricsLogger()
    _fit(logger, steps=1)
    logger.finish()
    assert [row["step"] for row in read_jsonl(tmp_path / "rlmetrics.jsonl")] == [0]


# -- strict mode wins over the guard (issue 32) -----------------------------------------------


class SaysNaN(Toy):
    """Logs a reward that is no number at step 1, which strict mode refuses."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        self.log("reward", float("nan") if self.global_step == 1 else 1.0)
        return loss


def test_in_strict_mode_a_strict_mode_error_stops_the_fit(
    tmp_path: Path, telemetry: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLMETRICS_STRICT", "1")
    path = tmp_path / "metrics.jsonl"
    logger = RLMetricsLogger(backends={"jsonl": {"path": path}}, key_map=TOY_MAP)
    trainer = _trainer(logger, steps=4)
    with pytest.raises(rlmetrics.StrictModeError, match=r"rl.reward.mean \(key 'reward'\)"):
        trainer.fit(SaysNaN(), _data())
    assert trainer.global_step == 2  # stopped in the step that logged it, the fit unfinished
    assert [row["step"] for row in read_jsonl(path)] == [0, 1]  # the call did its work first
    logger.finish()


# -- validation and test are no training ------------------------------------------------------


class ScoresEveryStage(Toy):
    """Logs ``reward`` in training, validation and test alike, as an RL module scoring its
    held-out prompts does: each stage's value is its own (1, 10, 100)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("reward", 1.0)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("reward", 10.0)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("reward", 100.0)


def test_validation_and_test_metrics_are_logged_under_eval_and_test_not_train(
    tmp_path: Path, telemetry: tuple[Any, Any]
) -> None:
    """Before: every dict went under ``train``, so a validation's ``reward`` was a training
    row and, through the key map, the exported rl.reward.mean (the last value seen was the
    test's 100). Now the validation loop (in fit and ``validate()``) logs under ``eval`` and
    ``test()`` under ``test``, as the transformers adapter does: the tee reads training only."""
    _handle, reader = telemetry
    path = tmp_path / "metrics.jsonl"
    logger = RLMetricsLogger(backends={"jsonl": {"path": path}}, key_map=TOY_MAP)
    trainer = lightning.Trainer(
        max_steps=4,
        val_check_interval=2,
        logger=logger,
        log_every_n_steps=1,
        accelerator="cpu",
        devices=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    module = ScoresEveryStage()
    trainer.fit(module, _data(), _data())
    trainer.validate(module, _data())
    trainer.test(module, _data())
    exported = {p.name: p.value for p in points(reader) if not p.attributes}
    logger.finish()
    rows = [row for row in read_jsonl(path) if "reward" in row["metrics"]]
    rewards = {(row["prefix"], row["metrics"]["reward"]) for row in rows}
    assert rewards == {("train", 1.0), ("eval", 10.0), ("test", 100.0)}
    assert exported["rl.reward.mean"] == 1.0


# -- logger.experiment is the rlmetrics Logger --------------------------------------------------


class LogsThroughTheExperiment(lightning.LightningModule):  # type: ignore[misc]
    """No ``save_hyperparameters()``: nothing is logged before the first step, whose
    ``training_step`` logs a row of its own through ``self.logger.experiment``."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        self.logger.experiment.log_metrics({"reward": 0.5}, step=self.global_step)
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_the_experiment_is_the_rlmetrics_logger_from_the_first_step(tmp_path: Path) -> None:
    """As docs/integrations/lightning.md says, ``logger.experiment`` is the rlmetrics Logger
    (to log trajectories from the module, say). Before, it was None until Lightning's first
    log_metrics, so using it in the first training_step raised AttributeError out of fit."""
    path = tmp_path / "metrics.jsonl"
    logger = RLMetricsLogger(backends={"jsonl": {"path": path}})
    trainer = _trainer(logger, steps=2)
    trainer.fit(LogsThroughTheExperiment(), _data())
    logger.finish()
    rows = [row for row in read_jsonl(path) if "reward" in row["metrics"]]
    assert [row["step"] for row in rows] == [0, 1]


def test_the_trainers_log_dir_is_its_root_dir_as_without_a_logger(tmp_path: Path) -> None:
    """``trainer.log_dir`` is the first logger's ``save_dir`` (Lightning's own for TensorBoard
    and CSV); LightningCLI's SaveConfigCallback asserts it is not None, profilers write their
    files there, and Lightning's docs save images to it. Before, it was None (the base
    Logger's save_dir), so ``LightningCLI(..., trainer_defaults={"logger": RLMetricsLogger()})``
    stopped with an AssertionError before the first step. Now it is the trainer's
    ``default_root_dir``, as with no logger at all, and checkpoints stay where they were."""
    logger = RLMetricsLogger(backends={})
    trainer = lightning.Trainer(
        max_steps=1,
        logger=logger,
        default_root_dir=tmp_path,
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    assert trainer.log_dir == str(tmp_path)
    trainer.fit(Toy(), _data())
    logger.finish()
    (checkpoint,) = tmp_path.glob("**/*.ckpt")
    assert checkpoint.parent == tmp_path / "rlmetrics" / str(logger.version) / "checkpoints"


# -- each stage's hyperparameters, each logger once ---------------------------------------------


def test_the_hyperparameters_are_logged_once_for_fit_validate_and_test(tmp_path: Path) -> None:
    """Lightning hands its loggers the module's hyperparameters at the start of every stage:
    before, each of fit, validate and test wrote the same configuration to the run again (a
    JSONL header row each). Now an unchanged configuration is logged once; a changed one (a
    second module's) is logged when it comes."""
    path = tmp_path / "metrics.jsonl"
    logger = RLMetricsLogger(backends={"jsonl": {"path": path}})
    trainer = _trainer(logger, steps=2)
    module = Toy()
    trainer.fit(module, _data())
    trainer.validate(module, _data())
    trainer.test(module, _data())
    trainer.test(Toy(lr=0.5), _data())
    logger.finish()
    configs = [
        row["hyperparams"] for row in read_jsonl(path, every_row=True) if "hyperparams" in row
    ]
    assert configs == [{"lr": 0.1}, {"lr": 0.5}]


def test_a_second_rlmetrics_logger_on_the_same_trainer_stands_down_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``Trainer(logger=[RLMetricsLogger(), RLMetricsLogger()])`` (one per backend, say):
    before, Lightning called each and each built a Logger, so every row and the
    hyperparameters reached the run twice (and the tee every value twice). Now the first
    RLMetricsLogger on the trainer logs; the others say so once and log nothing."""
    caplog.set_level(logging.WARNING, logger="rlmetrics")
    path = tmp_path / "metrics.jsonl"
    first = RLMetricsLogger(backends={"jsonl": {"path": path}})
    second = RLMetricsLogger(backends={"jsonl": {"path": path}})
    trainer = _trainer([first, second], steps=2)
    module = Toy()
    trainer.fit(module, _data())
    trainer.test(module, _data())
    first.finish()
    second.finish()
    every = list(read_jsonl(path, every_row=True))
    assert len({row["run_id"] for row in every}) == 1
    assert [row["step"] for row in every if "train_loss" in row.get("metrics", {})] == [0, 1]
    assert len([row for row in every if "test_loss" in row.get("metrics", {})]) == 1
    assert len([row for row in every if "hyperparams" in row]) == 1
    said = [r for r in caplog.records if "more than one RLMetricsLogger" in r.getMessage()]
    assert len(said) == 1


def test_one_rlmetrics_logger_listed_twice_writes_each_row_once(tmp_path: Path) -> None:
    """``Trainer(logger=[logger, logger])``: Lightning hands the one dict to each entry, so
    before, every row reached the run twice. Now a dict just handed at the same step is
    written once; the loop's next dict at that step (the epoch's end) is written."""
    path = tmp_path / "metrics.jsonl"
    logger = RLMetricsLogger(backends={"jsonl": {"path": path}})
    _fit([logger, logger], steps=2)
    logger.finish()
    every = list(read_jsonl(path, every_row=True))
    assert [row["step"] for row in every if "train_loss" in row.get("metrics", {})] == [0, 1]
    assert len([row for row in every if "hyperparams" in row]) == 1


# -- the version: the run's id ---------------------------------------------------------------


def _checkpointed_fit(
    root: Path, logger: RLMetricsLogger, steps: int, ckpt_path: str | None = None
) -> lightning.Trainer:
    trainer = lightning.Trainer(
        max_steps=steps,
        logger=logger,
        log_every_n_steps=1,
        default_root_dir=root,
        callbacks=[lightning.pytorch.callbacks.ModelCheckpoint(save_last=True)],
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Toy(), _data(), ckpt_path=ckpt_path)
    logger.finish()
    return trainer


def test_each_run_checkpoints_in_the_folder_of_its_run_id(tmp_path: Path) -> None:
    """Lightning names a run's checkpoint folder by its first logger's ``name`` and
    ``version``: its CSV and TensorBoard loggers take the next free ``version_N``, W&B and
    MLflow the run's id. Before, the version was always 0, so every run in a root folder
    checkpointed into ``rlmetrics/version_0/checkpoints`` (the second run's ``last.ckpt``
    replaced the first's, and Lightning warned that the folder was not empty). Now the
    version is the rlmetrics run's id, the id every row of the run carries."""
    path = tmp_path / "metrics.jsonl"
    first, second = (RLMetricsLogger(backends={"jsonl": {"path": path}}) for _ in range(2))
    for logger in (first, second):
        _checkpointed_fit(tmp_path, logger, steps=2)
    runs = list(dict.fromkeys(row["run_id"] for row in read_jsonl(path)))
    assert [first.version, second.version] == runs and len(set(runs)) == 2
    for run_id in runs:
        folder = tmp_path / "rlmetrics" / run_id / "checkpoints"
        assert sorted(p.name for p in folder.iterdir()) == ["epoch=0-step=2.ckpt", "last.ckpt"]


def test_a_run_restarted_under_its_id_resumes_from_its_last_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restarted job that keeps its run id (a requeued SLURM job, the id in
    ``OTEL_RESOURCE_ATTRIBUTES``) has the same version, so ``fit(ckpt_path="last")`` finds
    the checkpoint its first attempt left, and the rows go on from its step."""
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "rlmetrics.run.id=run-7")
    path = tmp_path / "metrics.jsonl"
    _checkpointed_fit(tmp_path, RLMetricsLogger(backends={"jsonl": {"path": path}}), steps=2)
    resumed = RLMetricsLogger(backends={"jsonl": {"path": path}})
    trainer = _checkpointed_fit(tmp_path, resumed, steps=4, ckpt_path="last")
    assert resumed.version == "run-7" and trainer.global_step == 4
    rows = [row for row in read_jsonl(path) if "train_loss" in row["metrics"]]
    assert [(row["run_id"], row["step"]) for row in rows] == [("run-7", s) for s in range(4)]


def test_a_version_given_is_the_version(tmp_path: Path) -> None:
    """``RLMetricsLogger(version=0)`` keeps one folder for every run (as before)."""
    logger = RLMetricsLogger(backends={}, version=0)
    _checkpointed_fit(tmp_path, logger, steps=1)
    assert logger.version == 0
    assert (tmp_path / "rlmetrics" / "version_0" / "checkpoints" / "last.ckpt").is_file()
