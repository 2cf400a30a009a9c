"""A real TRL GRPO run's completions as trajectories: one per completion, with the rewards TRL
computed (per reward function as components, TRL's weighted sum as the total), read back
from the real SDK's in-memory span exporter and metric reader and from the JSONL samples file;
prompt and completion text reach no output under the default text policy."""

from __future__ import annotations

import logging
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset
from rlmetrics_transformers import RLMetricsCallback
from transformers import AutoTokenizer, TrainerCallback
from transformers_support import length_reward, save_tiny_model, trainer_args

from rlmetrics.backends.jsonl import read_jsonl, samples_path
from rlmetrics.testing import points
from rlmetrics.testing.traces import in_memory_tracing, span_records

#: In every prompt, so a search of every output finds any prompt text that leaked.
MARKER = "zqxmarkerzqx"
WEIGHTS = (1.0, 0.5)
PER_STEP = 2  # completions a step trains on
STEPS_PER_GENERATION = 2  # one generation batch (4 completions) serves two steps
MAX_STEPS = 4


def odd_length_reward(completions: list[str], **_kwargs: Any) -> list[float | None]:
    """A reward function that does not apply to even-length completions (None: TRL's NaN)."""
    return [float(len(c.split())) if len(c.split()) % 2 else None for c in completions]


class TrlCompletions(TrainerCallback):  # type: ignore[misc]
    """Runs after the callback under test: what TRL holds for its completions at each log."""

    def __init__(self) -> None:
        self.trainer: Any = None
        self.at: dict[int, dict[str, list[Any]]] = {}

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if logs and "loss" in logs:
            kept = self.trainer._logs
            self.at[state.global_step] = {
                "completion": list(kept["completion"]),
                "advantages": list(kept["advantages"]),
                **{name: list(values) for name, values in kept["rewards"].items()},
            }


def _grpo(tmp_path: Path, callbacks: list[Any], **config: Any) -> Any:
    from trl import GRPOConfig, GRPOTrainer

    model = save_tiny_model(tmp_path / "model")
    prompts = [f"{MARKER} w{i} w{i + 1}" for i in range(8)]
    return GRPOTrainer(
        model=model,
        reward_funcs=[length_reward, odd_length_reward],
        args=GRPOConfig(
            **{
                **trainer_args(tmp_path, per_device_train_batch_size=PER_STEP, max_steps=MAX_STEPS),
                "steps_per_generation": STEPS_PER_GENERATION,
                "num_generations": 2,
                "max_completion_length": 8,
                "beta": 0.0,
                "reward_weights": list(WEIGHTS),
                **config,
            }
        ),
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        eval_dataset=Dataset.from_dict({"prompt": prompts[:4]}),
        processing_class=AutoTokenizer.from_pretrained(model),
        callbacks=callbacks,
    )


def _trl_total(values: list[float]) -> float | None:
    scored = [v * w for v, w in zip(values, WEIGHTS, strict=True) if not math.isnan(v)]
    return math.fsum(scored) if scored else None


def test_a_grpo_run_yields_one_trajectory_per_completion_with_trls_rewards(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="rlmetrics")
    path = tmp_path / "metrics.jsonl"
    callback = RLMetricsCallback(backends={"jsonl": {"path": path}})
    trl = TrlCompletions()
    with in_memory_tracing() as (_handle, reader, exporter):
        trainer = _grpo(tmp_path, [callback, trl])
        trl.trainer = trainer
        trainer.train()
        callback.finish()
        spans = span_records(exporter)
        found = points(reader)

    # TRL generated a batch of 4 at steps 1 and 3; steps 2 and 4 trained on the same batch.
    assert sorted(trl.at) == [1, 2, 3, 4]
    assert trl.at[2]["advantages"] == trl.at[1]["advantages"]
    batches = {step: trl.at[step] for step in (1, 3)}
    completions = sum(len(b["completion"]) for b in batches.values())
    assert completions == 2 * PER_STEP * STEPS_PER_GENERATION

    rows = [
        line["sample"] | {"step": line["step"]}
        for line in read_jsonl(samples_path(path), every_row=True)
    ]
    assert len(rows) == completions
    assert Counter(row["step"] for row in rows) == {1: 4, 3: 4}
    for row in rows:
        batch = batches[row["step"]]
        index = int(row["sample_id"].split("-")[1])
        values = [batch["length_reward"][index], batch["odd_length_reward"][index]]
        assert row["reward/length_reward"] == values[0]
        if math.isnan(values[1]):  # the function returned None: no component
            assert "reward/odd_length_reward" not in row
        else:
            assert row["reward/odd_length_reward"] == values[1]
        assert row["reward"] == pytest.approx(_trl_total(values))
        assert row["group_id"] == f"{row['step']}-g{index // 2}"
        assert (row["turns"], row["outcome"]) == (1, "success")
        assert "prompt" not in row and "completion" not in row

    agents = [s for s in spans if s.name.startswith("invoke_agent")]
    assert len(agents) == completions
    by_id = {(s.attributes["rl.iteration"], s.attributes["rl.sample.id"]): s for s in agents}
    assert set(by_id) == {(row["step"], row["sample_id"]) for row in rows}
    for row in rows:
        agent = by_id[(row["step"], row["sample_id"])]
        assert agent.attributes["rl.reward"] == pytest.approx(row["reward"])
        children = [s for s in spans if s.parent_id == agent.span_id]
        components = sorted(
            s.attributes["rl.reward.component"] for s in children if s.name.startswith("rl.reward")
        )
        assert components == sorted(k.split("/", 1)[1] for k in row if k.startswith("reward/"))
        assert [s.name for s in children if s.name == "rl.turn"] == ["rl.turn"]

    completed = sum(p.value for p in found if p.name == "rl.trajectory.completed")
    assert completed == completions
    rewarded = Counter()
    for p in found:
        if p.name == "rl.trajectory.reward.count":
            rewarded[p.attributes["rl.reward.component"]] += p.value
    nan = sum(math.isnan(b["odd_length_reward"][i]) for b in batches.values() for i in range(4))
    assert rewarded["length_reward"] == completions
    assert rewarded["odd_length_reward"] == completions - nan

    # Text policy off: no prompt text anywhere (every prompt holds the marker).
    for output in (path, samples_path(path)):
        assert MARKER not in output.read_text()
    assert not any(MARKER in str(s.attributes) for s in spans)
    # A reward function's None is TRL's NaN: no reward of that function (as TRL leaves it
    # out of its means), no bad value to warn about; the rest landed (the seeded run has some).
    assert 0 < nan < completions
    said = [r for r in caplog.records if "'reward.value' must be a finite" in r.getMessage()]
    assert not said


def test_trajectories_false_logs_no_trajectories(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    callback = RLMetricsCallback(backends={"jsonl": {"path": path}}, trajectories=False)
    with in_memory_tracing() as (_handle, reader, exporter):
        trainer = _grpo(tmp_path, [callback])
        trainer.train()
        callback.finish()
        spans = span_records(exporter)
        found = points(reader)
    assert not samples_path(path).exists()
    assert not [s for s in spans if s.name.startswith("invoke_agent")]
    assert not [p for p in found if p.name == "rl.trajectory.completed"]
    assert [row["step"] for row in read_jsonl(path) if "loss" in row["metrics"]] == [1, 2, 3, 4]


def test_under_the_full_text_policy_each_row_holds_trls_prompt_and_completion(
    tmp_path: Path,
) -> None:
    """And an evaluation's completions (GRPO keeps them where it keeps training's) are not
    training rollouts: none is logged."""
    from rlmetrics.trajectories import configure

    configure(text="full")
    path = tmp_path / "metrics.jsonl"
    callback = RLMetricsCallback(backends={"jsonl": {"path": path}})
    trl = TrlCompletions()
    with in_memory_tracing():
        trainer = _grpo(
            tmp_path,
            [callback, trl],
            eval_strategy="steps",
            eval_steps=2,
            per_device_eval_batch_size=4,
        )
        trl.trainer = trainer
        trainer.train()
        callback.finish()
    evaluated = [row for row in read_jsonl(path) if row["prefix"] == "eval"]
    assert [row["step"] for row in evaluated if "loss" in row["metrics"]] == [2, 4]
    lines = list(read_jsonl(samples_path(path), every_row=True))
    assert len(lines) == 2 * PER_STEP * STEPS_PER_GENERATION
    assert {line["step"] for line in lines} == {1, 3}
    for line in lines:
        row = line["sample"]
        index = int(row["sample_id"].split("-")[1])
        assert row["completion"] == trl.at[line["step"]]["completion"][index]
        assert row["prompt"].startswith(MARKER)


class Wrapped:
    """A callback that wraps another, as a profiler's does: the trainer holds the wrapper."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_wrapped_callback_still_finds_its_trainers_completions(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    callback = RLMetricsCallback(backends={"jsonl": {"path": path}})
    with in_memory_tracing():
        trainer = _grpo(tmp_path, [Wrapped(callback)])
        trainer.train()
        callback.finish()
    lines = list(read_jsonl(samples_path(path), every_row=True))
    assert len(lines) == 2 * PER_STEP * STEPS_PER_GENERATION


def test_an_rloo_run_yields_one_trajectory_per_completion_too(tmp_path: Path) -> None:
    from trl import RLOOConfig, RLOOTrainer

    model = save_tiny_model(tmp_path / "model")
    path = tmp_path / "metrics.jsonl"
    callback = RLMetricsCallback(backends={"jsonl": {"path": path}})
    trl = TrlCompletions()
    with in_memory_tracing():
        trainer = RLOOTrainer(
            model=model,
            reward_funcs=length_reward,
            args=RLOOConfig(
                **trainer_args(tmp_path, max_steps=2),
                num_generations=2,
                max_completion_length=8,
                beta=0.0,
            ),
            train_dataset=Dataset.from_dict({"prompt": [f"w{i} w{i + 1}" for i in range(8)]}),
            processing_class=AutoTokenizer.from_pretrained(model),
            callbacks=[callback, trl],
        )
        trl.trainer = trainer
        trainer.train()
        callback.finish()
    lines = list(read_jsonl(samples_path(path), every_row=True))
    assert sorted(trl.at) == [1, 2]
    assert len(lines) == sum(len(trl.at[step]["completion"]) for step in (1, 2))
    for line in lines:
        index = int(line["sample"]["sample_id"].split("-")[1])
        assert line["sample"]["reward"] == trl.at[line["step"]]["length_reward"][index]


def test_a_callback_handed_to_a_second_trainer_logs_that_trainers_completions(
    tmp_path: Path,
) -> None:
    """One callback, two trainers in turn (a notebook's second run while the first trainer is
    still referenced): the second's completions are its own. Before, the callback kept the
    first trainer it found and read its completions, all logged already: the second run's
    trajectories were lost without a word."""
    path = tmp_path / "metrics.jsonl"
    callback = RLMetricsCallback(backends={"jsonl": {"path": path}})
    with in_memory_tracing():
        first = _grpo(tmp_path / "first", [callback])
        first.train()
        second = _grpo(tmp_path / "second", [callback])
        second.train()
        callback.finish()
    lines = list(read_jsonl(samples_path(path), every_row=True))
    # Each run: a generation batch of 4 completions at steps 1 and 3, each serving two steps.
    per_run = 2 * PER_STEP * STEPS_PER_GENERATION
    assert len(lines) == 2 * per_run
    assert Counter(line["step"] for line in lines) == {1: per_run, 3: per_run}
    assert first is not None  # the first trainer was alive throughout


def test_every_generation_batch_is_logged_when_logging_steps_exceed_a_generation(
    tmp_path: Path,
) -> None:
    """TRL's GRPOConfig logs every 10 steps by default, while each step (or each
    steps_per_generation steps) generates a new batch and TRL keeps only the last. Before, the
    callback read completions at each log only: here, logging at step 4 of 4, the batch of
    steps 1-2 was never logged (4 of 8 rollouts missing from the samples table and
    rl.trajectory.completed, without a word; with TRL's defaults, 9 in 10). Now each batch is
    read at the end of the optimizer step that first trains on it."""
    path = tmp_path / "metrics.jsonl"
    callback = RLMetricsCallback(backends={"jsonl": {"path": path}})
    with in_memory_tracing() as (_handle, reader, _exporter):
        trainer = _grpo(tmp_path, [callback], logging_steps=MAX_STEPS)
        trainer.train()
        callback.finish()
        found = points(reader)
    lines = list(read_jsonl(samples_path(path), every_row=True))
    per_batch = PER_STEP * STEPS_PER_GENERATION
    assert Counter(line["step"] for line in lines) == {1: per_batch, 3: per_batch}
    assert sum(p.value for p in found if p.name == "rl.trajectory.completed") == 2 * per_batch
    assert [row["step"] for row in read_jsonl(path) if "loss" in row["metrics"]] == [MAX_STEPS]


def test_a_reward_function_that_returns_none_is_no_bad_value_even_in_strict_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """TRL lets a reward function return None for a completion it does not apply to (its NaN,
    left out of TRL's means). Before, the callback handed that NaN to the trajectory as a
    reward value: a WARNING that it 'must be a finite number', and in strict mode a
    StrictModeError that stopped train() at the first step. Now the component is left out of
    that completion's record, as TRL leaves it out, without a word."""
    monkeypatch.setenv("RLMETRICS_STRICT", "1")
    caplog.set_level(logging.WARNING, logger="rlmetrics")
    path = tmp_path / "metrics.jsonl"
    callback = RLMetricsCallback(backends={"jsonl": {"path": path}})
    trl = TrlCompletions()
    with in_memory_tracing():
        trainer = _grpo(tmp_path, [callback, trl])
        trl.trainer = trainer
        trainer.train()
        callback.finish()
    assert trainer.state.global_step == MAX_STEPS
    rows = [
        line["sample"] | {"step": line["step"]}
        for line in read_jsonl(samples_path(path), every_row=True)
    ]
    assert len(rows) == 2 * PER_STEP * STEPS_PER_GENERATION
    skipped = 0
    for row in rows:
        index = int(row["sample_id"].split("-")[1])
        if math.isnan(trl.at[row["step"]]["odd_length_reward"][index]):
            assert "reward/odd_length_reward" not in row
            skipped += 1
    assert skipped > 0  # the seeded run has some
    assert not [
        r for r in caplog.records if "reward" in r.getMessage() and "finite" in r.getMessage()
    ]
