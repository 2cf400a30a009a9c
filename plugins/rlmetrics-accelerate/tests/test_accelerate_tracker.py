"""RLMetricsTracker in a real ``Accelerator(log_with=[...])`` loop on CPU: a few optimizer
steps of a toy model, logged with ``Accelerator.log``, read back from the JSONL file and the
real SDK's in-memory reader."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from accelerate import Accelerator
from rlmetrics_accelerate import RLMetricsTracker

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.ranks import RankMerger
from rlmetrics.testing import points
from rlmetrics.testing.trainers import Recorder


def _loop(tracker: RLMetricsTracker, steps: int = 3) -> list[float]:
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("grpo", config={"lr": 0.1, "model": {"layers": 2}})
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    losses = []
    for step in range(1, steps + 1):
        x, y = torch.randn(4, 2), torch.randn(4, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        # NeMo-RL's keys: the training family tees them without a key map.
        accelerator.log({"loss": loss.item(), "reward": float(step), "kl_penalty": loss}, step=step)
    accelerator.end_training()
    return losses


def test_accelerate_logs_each_step_the_configuration_and_finishes(
    tmp_path: Path, telemetry: tuple[Any, Any]
) -> None:
    _handle, reader = telemetry
    path = tmp_path / "metrics.jsonl"
    tracker = RLMetricsTracker(backends={"jsonl": {"path": path}})
    losses = _loop(tracker)
    rows = list(read_jsonl(path))
    assert [(row["step"], row["prefix"]) for row in rows] == [
        (1, "train"),
        (2, "train"),
        (3, "train"),
    ]
    assert [row["metrics"]["loss"] for row in rows] == losses
    assert rows[-1]["metrics"]["kl_penalty"] == pytest.approx(losses[-1])  # a tensor, read
    exported = {p.name: p.value for p in points(reader) if not p.attributes}
    assert exported["rl.policy.loss"] == losses[-1]
    assert exported["rl.reward.mean"] == 3.0
    assert exported["rl.kl.divergence"] == pytest.approx(losses[-1])
    (config,) = [row for row in read_jsonl(path, every_row=True) if "hyperparams" in row]
    assert config["hyperparams"]["lr"] == 0.1
    assert tracker.tracker is None  # end_training finished the Logger it built


def test_a_key_map_makes_the_loops_keys_series(telemetry: tuple[Any, Any]) -> None:
    _handle, reader = telemetry
    tracker = RLMetricsTracker(backends={}, key_map="verl")
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("verl-like")
    accelerator.log({"critic/rewards/mean": 0.75, "actor/kl_loss": torch.tensor(0.5)}, step=2)
    exported = {p.name: p.value for p in points(reader) if not p.attributes}
    accelerator.end_training()
    assert exported["rl.reward.mean"] == 0.75 and exported["rl.kl.divergence"] == 0.5


def test_a_loop_that_writes_its_prefix_into_the_keys_uses_no_tracker_prefix(
    tmp_path: Path, telemetry: tuple[Any, Any]
) -> None:
    # What Accelerate's own W&B tracker takes as written: with prefix="", the trackers keep
    # the keys and the series read train/ as the train prefix, eval/ as evaluation.
    _handle, reader = telemetry
    path = tmp_path / "m.jsonl"
    tracker = RLMetricsTracker(backends={"jsonl": {"path": path}}, prefix="")
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("wandb-style")
    accelerator.log({"train/reward": 0.25, "train/loss": 1.5, "eval/reward": 0.9}, step=1)
    exported = {p.name: p.value for p in points(reader) if not p.attributes}
    accelerator.end_training()
    assert exported["rl.reward.mean"] == 0.25 and exported["rl.policy.loss"] == 1.5
    [row] = [r for r in read_jsonl(path) if "metrics" in r]
    assert row["prefix"] == "" and set(row["metrics"]) >= {"train/reward", "eval/reward"}


class BrokenLogger(rlmetrics.Logger):
    def log_metrics(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug in rlmetrics")

    log_hyperparams = log_metrics  # type: ignore[assignment]


def test_an_rlmetrics_failure_never_fails_the_loop(caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        losses = _loop(RLMetricsTracker(BrokenLogger(backends={})))
    assert len(losses) == 3
    failed = [r for r in caplog.records if "rlmetrics-accelerate: log failed" in r.getMessage()]
    assert len(failed) == 1


def test_bad_values_drop_only_themselves(tmp_path: Path, telemetry: tuple[Any, Any]) -> None:
    _handle, reader = telemetry
    path = tmp_path / "metrics.jsonl"
    tracker = RLMetricsTracker(backends={"jsonl": {"path": path}})
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("bad")
    accelerator.log(
        {"loss": float("nan"), "reward": None, "kl_penalty": torch.tensor(0.25), "lr": "high"},
        step=5,
    )
    exported = {p.name: p.value for p in points(reader) if not p.attributes}
    accelerator.end_training()
    assert exported["rl.kl.divergence"] == 0.25  # a 0-d tensor, read
    training = {"rl.policy.loss", "rl.reward.mean", "rl.learning_rate"}
    assert training.isdisjoint(exported)  # the NaN, the None and the string dropped alone
    (row,) = list(read_jsonl(path))
    assert (
        row["step"] == 5 and row["metrics"]["kl_penalty"] == 0.25 and row["metrics"]["lr"] == "high"
    )


def test_the_default_jsonl_lands_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As docs/integrations/accelerate.md says: ./rlmetrics.jsonl where the main process runs.
    monkeypatch.chdir(tmp_path)
    losses = _loop(RLMetricsTracker(), steps=2)
    rows = list(read_jsonl(tmp_path / "rlmetrics.jsonl"))
    assert [row["metrics"]["loss"] for row in rows] == losses


# -- one Logger per tracker, finished once at end_training (issue 31) -------------------------


def test_end_training_finishes_the_one_run_and_later_logs_are_dropped(
    recorder: type[Recorder], caplog: Any
) -> None:
    tracker = RLMetricsTracker(backends={"recorder": {}})
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("grpo", config={"lr": 0.1})
    for step in (1, 2):
        accelerator.log({"loss": 1.0 / step}, step=step)
    accelerator.end_training()
    (run,) = recorder.made
    assert run.finished == 1
    assert run.threads == {"rlmetrics-backend-recorder"}  # a queued backend, as the trackers
    assert [(step, metrics) for step, _, metrics in run.rows] == [
        (1, {"loss": 1.0}),
        (2, {"loss": 0.5}),
    ]
    assert run.hyperparams == [{"lr": 0.1}]
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        accelerator.log({"loss": 0.25}, step=3)  # after end_training: never a second run
        accelerator.log({"loss": 0.125}, step=4)
        accelerator.end_training()
    assert len(recorder.made) == 1 and run.finished == 1 and len(run.rows) == 2
    (said,) = [r.getMessage() for r in caplog.records if "after its Logger" in r.getMessage()]
    assert said.startswith("rlmetrics: rlmetrics-accelerate was called after its Logger was")


# -- strict mode wins over the guard (issue 32) -----------------------------------------------


def test_in_strict_mode_a_strict_mode_error_stops_the_loop(
    tmp_path: Path, telemetry: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLMETRICS_STRICT", "1")
    path = tmp_path / "metrics.jsonl"
    tracker = RLMetricsTracker(backends={"jsonl": {"path": path}})
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("strict")
    accelerator.log({"reward": 1.0}, step=1)
    with pytest.raises(rlmetrics.StrictModeError, match=r"rl.reward.mean \(key 'reward'\)"):
        accelerator.log({"reward": "high"}, step=2)
    accelerator.end_training()
    assert [row["step"] for row in read_jsonl(path)] == [1, 2]  # the call did its work first


def test_a_given_logger_that_merges_ranks_is_refused_for_log_ranks() -> None:
    """Accelerate calls its trackers on the main process only, so a Logger that merges ranks
    given to the tracker would merge with ranks that never call it. Before: accepted, its
    merges never paired. Refused where the tracker is made, naming log_ranks."""
    other_rank = SimpleNamespace(
        rank=1, world_size=2, all_gather=lambda row: [row, row], all_gather_object=lambda o: [o, o]
    )
    merger = RankMerger(other_rank, raw_path=None)
    with (
        rlmetrics.Logger(backends={}, ranks=merger) as given,
        pytest.raises(ValueError, match="log_ranks") as refused,
    ):
        RLMetricsTracker(given)
    assert "rlmetrics.Logger() without ranks=" in str(refused.value)


# -- init_trackers twice -------------------------------------------------------------------------


def test_init_trackers_twice_writes_each_row_and_the_configuration_once(
    recorder: type[Recorder],
) -> None:
    """``init_trackers`` appends every tracker object of ``log_with`` to the Accelerator's
    trackers again, so after a second call (a script that calls it in each phase, a notebook
    cell run twice) ``Accelerator.log`` called the tracker twice per dict and the
    configuration was stored again each time: before, each row reached the run twice (three
    configuration rows). Now the tracker writes a dict it was just handed at that step once,
    and an unchanged configuration once."""
    tracker = RLMetricsTracker(backends={"recorder": {}})
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("grpo", config={"lr": 0.1})
    accelerator.log({"loss": 1.0}, step=1)
    accelerator.init_trackers("grpo", config={"lr": 0.1})
    accelerator.log({"loss": 0.5}, step=2)
    accelerator.log({"loss": 0.25}, step=2)  # the loop's own second dict at a step: kept
    accelerator.end_training()
    (run,) = recorder.made
    assert [(step, metrics) for step, _, metrics in run.rows] == [
        (1, {"loss": 1.0}),
        (2, {"loss": 0.5}),
        (2, {"loss": 0.25}),
    ]
    assert run.hyperparams == [{"lr": 0.1}]
    assert run.finished == 1


def test_a_second_rlmetrics_tracker_on_the_accelerator_stands_down_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``Accelerator(log_with=[RLMetricsTracker(), RLMetricsTracker()])`` (one per backend,
    say): before, each built a Logger and every row and the configuration reached the run
    twice (and the tee every value twice). Now the first RLMetricsTracker on the Accelerator
    logs; the others say so once and log nothing."""
    caplog.set_level(logging.WARNING, logger="rlmetrics")
    path = tmp_path / "metrics.jsonl"
    first = RLMetricsTracker(backends={"jsonl": {"path": path}})
    second = RLMetricsTracker(backends={"jsonl": {"path": path}})
    accelerator = Accelerator(cpu=True, log_with=[first, second])
    accelerator.init_trackers("grpo", config={"lr": 0.1})
    for step in (1, 2):
        accelerator.log({"loss": 1.0 / step}, step=step)
    accelerator.end_training()
    every = list(read_jsonl(path, every_row=True))
    assert len({row["run_id"] for row in every}) == 1
    assert [row["step"] for row in every if "metrics" in row] == [1, 2]
    assert len([row for row in every if "hyperparams" in row]) == 1
    said = [r for r in caplog.records if "more than one RLMetricsTracker" in r.getMessage()]
    assert len(said) == 1


@pytest.mark.parametrize("backends", ["jsonl", ["jsonl"], ("jsonl",)], ids=["one", "list", "tuple"])
def test_backends_named_as_the_logger_takes_them(
    backends: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Logger(backends=...)`` takes a mapping, one name or names (docs/configuration.md:
    ``backends=["jsonl", "wandb"]``); the adapters pass theirs on. Before, a name or a list
    raised ``ValueError: dictionary update sequence element #0 has length 5`` where the
    tracker was made. Now each starts the named backends with their defaults."""
    monkeypatch.chdir(tmp_path)
    losses = _loop(RLMetricsTracker(backends=backends), steps=2)
    rows = list(read_jsonl(tmp_path / "rlmetrics.jsonl"))
    assert [row["metrics"]["loss"] for row in rows] == losses


def test_backends_of_another_kind_fail_saying_what_they_take() -> None:
    with pytest.raises(ValueError, match="takes a mapping of backend names to options"):
        RLMetricsTracker(backends=[{"jsonl": {}}])  # type: ignore[list-item]


def test_a_misspelt_backend_option_fails_where_the_tracker_is_made() -> None:
    """``backends={"jsonl": {"pathh": ...}}``: before, the tracker was made, the loop ran, and
    each call (start, the configuration, every log) failed inside the guard, so the whole
    run's rows were lost behind three warnings. A configuration mistake fails before the
    loop starts (docs/integrations.md: "an unknown backend or key map fails before the
    trainer starts"), as the Logger itself says it."""
    with pytest.raises(ValueError, match=r"has no option 'pathh' \(did you mean 'path'\?\)"):
        RLMetricsTracker(backends={"jsonl": {"pathh": "metrics.jsonl"}})


# -- float steps -----------------------------------------------------------------------------


def test_a_whole_float_step_is_that_step(recorder: type[Recorder]) -> None:
    """``accelerator.log(values, step=step / accumulation)`` (a true division) or
    ``step=torch.tensor(3.0)`` hands a float. Before, the Logger refused every float step and
    logged the row at the step after the last: steps 1.0, 2.0, 3.0 became rows 0, 1, 2, each
    row one step off its values, and a later step-less call counted on. Now a whole number is
    that step."""
    tracker = RLMetricsTracker(backends={"recorder": {}})
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("floats")
    for step in (1.0, 2.0):
        accelerator.log({"loss": step}, step=step)
    accelerator.log({"loss": 3.0}, step=torch.tensor(3.0))
    accelerator.log({"lr": 0.1})  # no step: the last one again
    accelerator.end_training()
    (run,) = recorder.made
    assert [(step, metrics) for step, _, metrics in run.rows] == [
        (1, {"loss": 1.0}),
        (2, {"loss": 2.0}),
        (3, {"loss": 3.0}),
        (3, {"lr": 0.1}),
    ]
    assert all(type(step) is int for step, _, _ in run.rows)


def test_epoch_fraction_steps_land_at_their_whole_part_in_order(
    recorder: type[Recorder], caplog: pytest.LogCaptureFixture
) -> None:
    """``step=epoch + batch / batches`` (0.0, 0.5, 1.0, 1.5, 2.0): a fraction is no trainer
    step. Before, every float was logged at "the step after the last", so epoch 2.0 was row
    4. Now a fraction lands at its whole part, as Accelerate's TensorBoard tracker writes it
    (``int(step)``): in order and at the whole steps a whole float gives, said once."""
    caplog.set_level(logging.WARNING, logger="rlmetrics")
    tracker = RLMetricsTracker(backends={"recorder": {}})
    accelerator = Accelerator(cpu=True, log_with=[tracker])
    accelerator.init_trackers("fractions")
    for step in (0.0, 0.5, 1.0, 1.5, 2.0):
        accelerator.log({"epoch": step}, step=step)
    accelerator.end_training()
    (run,) = recorder.made
    assert [(step, metrics["epoch"]) for step, _, metrics in run.rows] == [
        (0, 0.0),
        (0, 0.5),
        (1, 1.0),
        (1, 1.5),
        (2, 2.0),
    ]
    (said,) = [r.getMessage() for r in caplog.records if "whole" in r.getMessage()]
    assert "0.5" in said and "at step 0" in said
