"""RLMetricsCallback on real trainers: a ``transformers.Trainer`` and a TRL ``GRPOTrainer``
run a few steps on CPU with a tiny model built here; what they log is read back from the real
SDK's in-memory reader (step by step) and from the JSONL file."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from rlmetrics_transformers import RLMetricsCallback, split_prefix
from transformers import Trainer, TrainerCallback, TrainingArguments
from transformers_support import (
    length_reward,
    lm_dataset,
    prompt_dataset,
    save_tiny_model,
    tiny_model,
    trainer_args,
)

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.ranks import RankMerger
from rlmetrics.testing import points
from rlmetrics.testing.trainers import Recorder

SERIES = {"reward": "rl.reward.mean", "kl": "rl.kl.divergence", "loss": "rl.policy.loss"}


class Readings(TrainerCallback):  # type: ignore[misc]
    """Runs after the callback under test: what the reader holds at each logged step."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.at: dict[int, dict[str, Any]] = {}

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if logs and "loss" in logs:
            found = points(self.reader)
            self.at[state.global_step] = {
                "logged": dict(logs),
                "exported": {p.name: p.value for p in found if not p.attributes},
                "components": {
                    p.attributes["rl.reward.component"]: p.value
                    for p in found
                    if p.name == "rl.reward.component_mean"
                },
            }


def _train_rows(path: Path) -> list[dict[str, Any]]:
    return [row for row in read_jsonl(path) if row["prefix"] == "train"]


def test_a_transformers_trainer_logs_each_step_at_its_global_step(
    tmp_path: Path, telemetry: tuple[Any, Any]
) -> None:
    _handle, reader = telemetry
    path = tmp_path / "metrics.jsonl"
    readings = Readings(reader)
    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(**trainer_args(tmp_path, learning_rate=1e-3)),
        train_dataset=lm_dataset(),
        callbacks=[RLMetricsCallback(backends={"jsonl": {"path": path}}), readings],
    )
    trainer.train()
    assert trainer.state.global_step == 3
    assert sorted(readings.at) == [1, 2, 3]
    for step, seen in readings.at.items():
        logged, exported = seen["logged"], seen["exported"]
        assert exported["rl.policy.loss"] == pytest.approx(logged["loss"]), step
        assert exported["rl.grad_norm"] == pytest.approx(logged["grad_norm"]), step
        assert exported["rl.learning_rate"] == pytest.approx(logged["learning_rate"]), step
    rows = _train_rows(path)
    step_rows = [row for row in rows if "loss" in row["metrics"]]
    assert [row["step"] for row in step_rows] == [1, 2, 3]
    assert [row["metrics"]["loss"] for row in step_rows] == [
        readings.at[s]["logged"]["loss"] for s in (1, 2, 3)
    ]
    # The run's summary at the end, under the trainer's own keys.
    assert "train_runtime" in rows[-1]["metrics"] and rows[-1]["step"] == 3
    # Setup phases at step 0, and the training arguments as the run's hyperparameters.
    setup = {
        p.attributes["rl.setup.phase"] for p in points(reader) if p.name == "rl.setup.duration"
    }
    assert setup == {"total_setup", "trainer_init", "train_begin"}
    hyperparams = [row for row in read_jsonl(path, every_row=True) if "hyperparams" in row]
    assert hyperparams[0]["hyperparams"]["learning_rate"] == 1e-3
    assert hyperparams[0]["hyperparams"]["max_steps"] == 3


@pytest.mark.parametrize("beta", [0.1], ids=["beta>0"])
def test_a_trl_grpo_trainer_gets_reward_kl_and_loss_as_rlmetrics_series(
    tmp_path: Path, telemetry: tuple[Any, Any], beta: float
) -> None:
    from trl import GRPOConfig, GRPOTrainer

    _handle, reader = telemetry
    path = tmp_path / "metrics.jsonl"
    readings = Readings(reader)
    model = save_tiny_model(tmp_path / "model")  # beta > 0: TRL rebuilds the reference model
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=length_reward,
        args=GRPOConfig(
            **trainer_args(tmp_path, max_steps=2),
            num_generations=2,
            max_completion_length=8,
            beta=beta,
        ),
        train_dataset=prompt_dataset(),
        processing_class=_tokenizer(model),
        callbacks=[RLMetricsCallback(backends={"jsonl": {"path": path}}), readings],
    )
    trainer.train()
    assert sorted(readings.at) == [1, 2]
    for step, seen in readings.at.items():
        logged, exported = seen["logged"], seen["exported"]
        for key, series in SERIES.items():
            assert exported[series] == pytest.approx(logged[key]), (step, key)
        assert seen["components"] == {
            "length_reward": pytest.approx(logged["rewards/length_reward/mean"])
        }
    rows = [row for row in _train_rows(path) if "kl" in row["metrics"]]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        logged = readings.at[row["step"]]["logged"]
        assert {k: row["metrics"][k] for k in SERIES} == {k: logged[k] for k in SERIES}
        assert "rewards/length_reward/mean" in row["metrics"]  # the trainer's own keys


def _tokenizer(folder: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def test_bad_values_from_the_trainer_drop_only_themselves(
    tmp_path: Path, telemetry: tuple[Any, Any]
) -> None:
    _handle, reader = telemetry
    path = tmp_path / "metrics.jsonl"
    callback = RLMetricsCallback(backends={"jsonl": {"path": path}})
    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(**trainer_args(tmp_path, max_steps=1)),
        train_dataset=lm_dataset(),
        callbacks=[callback],
    )
    trainer.train()
    trainer.state.global_step = 7
    trainer.log(
        {
            "loss": None,
            "kl": torch.tensor(0.5),
            "reward": "high",
            "grad_norm": float("nan"),
            "learning_rate": 2e-4,
            "entropy": torch.ones(3),
        }
    )
    exported = {p.name: p.value for p in points(reader) if not p.attributes}
    callback.finish()
    rows = {row["step"]: row["metrics"] for row in _train_rows(path) if "loss" in row["metrics"]}
    # The good values land...
    assert exported["rl.kl.divergence"] == 0.5
    assert exported["rl.learning_rate"] == 2e-4
    # ...each bad one is dropped on its own: a gauge keeps its last good value or never starts.
    assert "rl.reward.mean" not in exported and "rl.entropy" not in exported
    assert exported["rl.policy.loss"] == rows[1]["loss"]
    assert exported["rl.grad_norm"] == rows[1]["grad_norm"]
    # The backends get the row, each value as JSON can hold it.
    assert rows[7]["learning_rate"] == 2e-4 and rows[7]["kl"] == 0.5 and rows[7]["loss"] is None


class BrokenLogger(rlmetrics.Logger):
    """A Logger with a bug in every call: what the callback's guard is for."""

    def log_metrics(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in rlmetrics")

    log_setup_timing = log_hyperparams = log_metrics  # type: ignore[assignment]


def test_an_rlmetrics_failure_never_fails_the_trainers_step(tmp_path: Path, caplog: Any) -> None:
    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(**trainer_args(tmp_path)),
        train_dataset=lm_dataset(),
        callbacks=[RLMetricsCallback(BrokenLogger(backends={}))],
    )
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        trainer.train()
    assert trainer.state.global_step == 3
    failed = [
        r for r in caplog.records if "rlmetrics-transformers: on_log failed" in r.getMessage()
    ]
    assert len(failed) == 1  # said once, not once a step


def test_a_configuration_mistake_fails_before_the_trainer_starts() -> None:
    with pytest.raises(ValueError, match="unknown backend"):
        RLMetricsCallback(backends={"nope": {}})
    with pytest.raises(ValueError, match="unknown key map 'nope'"):
        RLMetricsCallback(key_map="nope")
    with pytest.raises(ValueError, match="not both"):
        RLMetricsCallback(rlmetrics.Logger(backends={}), key_map="trl")


def test_a_given_logger_that_merges_ranks_is_called_on_every_rank(tmp_path: Path) -> None:
    """``RLMetricsCallback(rlmetrics.Logger(ranks="torch"))``: on a process other than the
    world's zero, the setup timing and every logged dict reach the Logger, whose merge every
    rank takes part in (the trainer calls its callbacks on every process, with the same
    keys). Before: only process zero's did, so the merges never paired. (This process stands
    for rank 1 of two.)"""
    other_rank = SimpleNamespace(
        rank=1, world_size=2, all_gather=lambda row: [row, row], all_gather_object=lambda o: [o, o]
    )
    state = SimpleNamespace(is_world_process_zero=False, global_step=3)
    args = SimpleNamespace(to_dict=lambda: {"learning_rate": 0.1})
    merger = RankMerger(other_rank, raw_path=tmp_path / "raw.jsonl")
    with rlmetrics.Logger(backends={}, ranks=merger) as given:
        callback = RLMetricsCallback(given)
        callback.on_train_begin(args, state, None)
        callback.on_log(args, state, None, logs={"loss": 1.5, "eval_loss": 2.0})
        callback.finish()  # a given Logger is its owner's
    raw = [(row["step"], row["prefix"]) for row in read_jsonl(tmp_path / "raw.jsonl")]
    assert raw == [(0, "timing/setup"), (3, "train"), (3, "eval")]


def test_eval_keys_go_under_eval(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    callback = RLMetricsCallback(backends={"jsonl": {"path": path}})
    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(**trainer_args(tmp_path, max_steps=1)),
        train_dataset=lm_dataset(),
        eval_dataset=lm_dataset(count=4),
        callbacks=[callback],
    )
    trainer.train()
    trainer.evaluate()
    callback.finish()
    (row,) = [row for row in read_jsonl(path) if row["prefix"] == "eval"]
    assert row["step"] == 1 and "loss" in row["metrics"] and "runtime" in row["metrics"]


def test_predict_metrics_go_under_test(tmp_path: Path, telemetry: tuple[Any, Any]) -> None:
    """``trainer.predict()`` hands its metrics to the callbacks' ``on_predict``, never to
    ``Trainer.log`` (transformers' own W&B, Trackio and Comet callbacks log them there, as
    ``test/...``). Before, the callback had no ``on_predict``: a prediction's ``test_loss``
    reached no backend. Now they are logged under ``test`` at the trainer's step; even under
    another ``metric_key_prefix`` they are no training values."""
    _handle, reader = telemetry
    path = tmp_path / "metrics.jsonl"
    callback = RLMetricsCallback(backends={"jsonl": {"path": path}})
    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(**trainer_args(tmp_path, max_steps=1)),
        train_dataset=lm_dataset(),
        callbacks=[callback],
    )
    trainer.train()
    trained = {p.name: p.value for p in points(reader) if not p.attributes}
    trainer.predict(lm_dataset(count=4))
    trainer.predict(lm_dataset(count=4), metric_key_prefix="heldout")
    exported = {p.name: p.value for p in points(reader) if not p.attributes}
    callback.finish()
    tested = [row for row in read_jsonl(path) if row["prefix"] == "test"]
    assert [row["step"] for row in tested] == [1, 1]
    assert "loss" in tested[0]["metrics"] and "runtime" in tested[0]["metrics"]
    assert "heldout_loss" in tested[1]["metrics"]
    assert exported["rl.policy.loss"] == trained["rl.policy.loss"]  # no training value


def test_an_evaluation_under_any_metric_key_prefix_is_an_evaluation(tmp_path: Path) -> None:
    """``evaluate(metric_key_prefix="val")`` logs ``val_loss``, ``val_runtime``...: before,
    every key of it that did not begin with ``eval_`` or ``test_`` was logged under ``train``,
    as if training had logged it (and the trainer's ``epoch`` of each evaluation made a train
    row of its own). Now an ``evaluate()``'s dict is one row under ``eval`` (``test`` for a
    ``test`` prefix): ``eval_``/``test_`` taken off, another prefix's keys as they are."""
    path = tmp_path / "metrics.jsonl"
    callback = RLMetricsCallback(backends={"jsonl": {"path": path}})
    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(**trainer_args(tmp_path, max_steps=1)),
        train_dataset=lm_dataset(),
        eval_dataset=lm_dataset(count=4),
        callbacks=[callback],
    )
    trainer.train()
    trained = _train_rows(path)
    trainer.evaluate(metric_key_prefix="val")
    trainer.evaluate(metric_key_prefix="test")
    trainer.evaluate()
    trainer.evaluate(metric_key_prefix="train")  # on the training set: an evaluation too
    callback.finish()
    assert _train_rows(path) == trained  # no evaluation wrote a training row
    evaluations = [row for row in read_jsonl(path) if row["prefix"] in ("eval", "test")]
    assert [(row["prefix"], row["step"]) for row in evaluations] == [
        ("eval", 1),
        ("test", 1),
        ("eval", 1),
        ("eval", 1),
    ]
    val, test, default, on_train = (row["metrics"] for row in evaluations)
    assert {"val_loss", "val_runtime", "epoch"} <= set(val)
    assert {"loss", "runtime", "epoch"} <= set(test) and "test_loss" not in test
    assert {"loss", "runtime", "epoch"} <= set(default)
    assert {"train_loss", "train_runtime", "epoch"} <= set(on_train)


def test_an_evaluation_only_run_logs_the_training_arguments_once(tmp_path: Path) -> None:
    """A script that only evaluates a checkpoint (``evaluate()``, ``predict()``, no
    ``train()``): before, its run had no hyperparameters (they were logged at
    ``on_train_begin`` only), where transformers' own W&B callback logs the arguments at the
    first log. Now the first dict a trainer that never trained hands over brings the
    arguments, once; no setup phases (there was no training setup)."""
    path = tmp_path / "metrics.jsonl"
    callback = RLMetricsCallback(backends={"jsonl": {"path": path}})
    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(**trainer_args(tmp_path, learning_rate=3e-4)),
        eval_dataset=lm_dataset(count=4),
        callbacks=[callback],
    )
    trainer.evaluate()
    trainer.predict(lm_dataset(count=4))
    trainer.evaluate()
    callback.finish()
    every = list(read_jsonl(path, every_row=True))
    (config,) = [row["hyperparams"] for row in every if "hyperparams" in row]
    assert config["learning_rate"] == 3e-4
    assert [row["prefix"] for row in every if "metrics" in row] == ["eval", "test", "eval"]


@given(st.dictionaries(st.text(max_size=10), st.floats(allow_nan=False), max_size=8))
def test_split_prefix_keeps_every_value_once(logs: dict[str, float]) -> None:
    split = split_prefix(logs)
    assert sum(len(d) for d in split.values()) == len(logs)
    for prefix, metrics in split.items():
        for key, value in metrics.items():
            original = key if prefix == "train" else f"{prefix}_{key}"
            assert logs[original] == value


def test_split_prefix_keeps_each_orders_own_plan() -> None:
    # The plans are cached per key sequence: the same keys in another order must not get the
    # first order's plan (which would swap train/loss and eval/loss).
    assert split_prefix({"loss": 1.0, "eval_loss": 2.0}) == {
        "train": {"loss": 1.0},
        "eval": {"loss": 2.0},
    }
    assert split_prefix({"eval_loss": 3.0, "loss": 4.0}) == {
        "eval": {"loss": 3.0},
        "train": {"loss": 4.0},
    }


# -- one Logger per trainer for its whole life (issue 31) -------------------------------------


def test_train_evaluate_predict_and_a_second_train_are_one_run_finished_once(
    tmp_path: Path, recorder: type[Recorder]
) -> None:
    callback = RLMetricsCallback(backends={"recorder": {}})
    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(**trainer_args(tmp_path, max_steps=2)),
        train_dataset=lm_dataset(),
        eval_dataset=lm_dataset(count=4),
        callbacks=[callback],
    )
    trainer.train()
    trainer.evaluate()
    trainer.predict(lm_dataset(count=4))
    trainer.train()  # a second train(), from step 0 again
    trainer.evaluate()
    (run,) = recorder.made  # one tracker run: never a second one under the same run id
    assert run.finished == 0  # the trainer is still there: so is its run
    callback.finish()
    callback.finish()
    assert run.finished == 1
    assert run.threads == {"rlmetrics-backend-recorder"}  # a queued backend, as the trackers
    steps = [(step, prefix) for step, prefix, metrics in run.rows if "loss" in metrics]
    first, second = [(1, "train"), (2, "train"), (2, "eval")], [(1, "train"), (2, "train")]
    assert steps == [*first, (2, "test"), *second, (2, "eval")]  # predict()'s under test
    assert [row[0] for row in run.rows if "train_runtime" in row[2]] == [2, 2]  # each summary
    assert len(run.hyperparams) == 1  # the arguments once: the second train() has no setup
    trainer.evaluate()  # after finish(): dropped, never a new run
    assert len(recorder.made) == 1 and run.finished == 1


def test_the_trainer_gone_finishes_the_run(tmp_path: Path, recorder: type[Recorder]) -> None:
    import gc

    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(**trainer_args(tmp_path, max_steps=2)),
        train_dataset=lm_dataset(),
        callbacks=[RLMetricsCallback(backends={"recorder": {}})],
    )
    trainer.train()
    (run,) = recorder.made
    assert run.finished == 0
    del trainer
    gc.collect()
    assert run.finished == 1
    assert [step for step, _, metrics in run.rows if "loss" in metrics] == [1, 2]


# -- strict mode wins over the guard (issue 32) -----------------------------------------------


class SaysHigh(TrainerCallback):  # type: ignore[misc]
    """Runs before the callback under test: at step 2 the trainer's dict holds a reward that
    is no number, which strict mode refuses."""

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if logs is not None and state.global_step == 2:
            logs["reward"] = "high"


def test_in_strict_mode_a_strict_mode_error_stops_the_trainer(
    tmp_path: Path, telemetry: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLMETRICS_STRICT", "1")
    path = tmp_path / "metrics.jsonl"
    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(**trainer_args(tmp_path, max_steps=4)),
        train_dataset=lm_dataset(),
        callbacks=[SaysHigh(), RLMetricsCallback(backends={"jsonl": {"path": path}})],
    )
    with pytest.raises(rlmetrics.StrictModeError, match=r"rl.reward.mean \(key 'reward'\)"):
        trainer.train()
    assert trainer.state.global_step == 2  # stopped at the step that broke it
    assert [row["step"] for row in _train_rows(path)] == [1, 2]  # the call did its work first


def test_in_strict_mode_a_backend_that_cannot_start_stops_the_trainer_before_a_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLMETRICS_STRICT", "1")
    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(**trainer_args(tmp_path)),
        train_dataset=lm_dataset(),
        callbacks=[RLMetricsCallback(backends={"jsonl": {"path": tmp_path}})],  # a folder
    )
    with pytest.raises(rlmetrics.StrictModeError, match="backend 'jsonl'"):
        trainer.train()
    assert trainer.state.global_step == 0


def test_the_default_jsonl_lands_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As docs/integrations/trl.md says: ./rlmetrics.jsonl where the process runs, not output_dir.
    monkeypatch.chdir(tmp_path)
    callback = RLMetricsCallback()
    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(**trainer_args(tmp_path, max_steps=1)),
        train_dataset=lm_dataset(),
        callbacks=[callback],
    )
    trainer.train()
    callback.finish()
    assert [row["step"] for row in _train_rows(tmp_path / "rlmetrics.jsonl")] == [1, 1]
    assert not list((tmp_path / "out").glob("**/*.jsonl"))


# -- the callback added twice ------------------------------------------------------------------


def test_a_second_callback_on_the_same_trainer_stands_down_and_says_so(
    tmp_path: Path, telemetry: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """``callbacks=[RLMetricsCallback()]`` and another one added (``add_callback``, or the
    same instance listed twice): transformers calls each, so before, every row, the setup
    phases and the hyperparameters were written twice to the same run (and a GRPO run's
    trajectories counted twice). Now the first on the trainer logs; the others say so once."""
    caplog.set_level(logging.WARNING, logger="rlmetrics")
    path = tmp_path / "metrics.jsonl"
    first = RLMetricsCallback(backends={"jsonl": {"path": path}})
    trainer = Trainer(
        model=tiny_model(),
        args=TrainingArguments(**trainer_args(tmp_path, max_steps=2)),
        train_dataset=lm_dataset(),
        callbacks=[first, first],
    )
    second = RLMetricsCallback(backends={"jsonl": {"path": path}})
    trainer.add_callback(second)
    trainer.train()
    first.finish()
    second.finish()
    every = list(read_jsonl(path, every_row=True))
    steps = [row["step"] for row in every if "loss" in row.get("metrics", {})]
    assert steps == [1, 2]
    assert len([row for row in every if "hyperparams" in row]) == 1
    assert len([row for row in every if row.get("prefix") == "timing/setup"]) == 1
    said = [r for r in caplog.records if "more than one RLMetricsCallback" in r.getMessage()]
    assert len(said) == 1
