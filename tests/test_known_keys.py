"""The opt-in for typos (issue 32): a key nothing knows — no declared series, no key-map rule,
no documented list — is said by ``Logger(unknown_keys="warn")``, raised in strict mode under
``"error"``, and listed by ``rlmetrics check --run`` by the same decision
(:mod:`rlmetrics.known_keys`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics import Kind, MetricSpec
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.configuration import ConfigurationError
from rlmetrics.keymaps import KeyMap, KeyRule, resolve_key_map
from rlmetrics.known_keys import KeyChecker, Vocabulary, declare_keys, unknown_in_rows
from rlmetrics.registry import LateDeclarationError, default_registry
from rlmetrics.testing import captured_log, in_memory_telemetry, isolated_state

TRL_RUN = Path(__file__).parent / "tools" / "runs" / "trl-grpo.jsonl"
_SAID = "Logger(unknown_keys="


def _logger(tmp_path: Path, **kwargs: Any) -> rlmetrics.Logger:
    return rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}, **kwargs)


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The unknown-key warnings the Logger logged, each as its finding's message."""
    return [
        r.getMessage().removeprefix("rlmetrics: ").split(". " + _SAID)[0]
        for r in caplog.records
        if r.levelno == logging.WARNING and _SAID in r.getMessage()
    ]


@pytest.fixture
def caught(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        yield caplog


# -- typos --------------------------------------------------------------------------------------


def test_a_misspelt_key_is_said_once_with_the_key_it_is_close_to(
    tmp_path: Path, caught: pytest.LogCaptureFixture
) -> None:
    with _logger(tmp_path, unknown_keys="warn") as logger:
        for step in (1, 2, 3):
            logger.log_metrics({"loss": 0.1, "kl_penalti": 0.01}, step=step, prefix="train")
    [said] = _said(caught)
    assert "'kl_penalti'" in said and "did you mean 'kl_penalty'?" in said
    # The key still reaches every backend.
    rows = [r for r in read_jsonl(tmp_path / "m.jsonl") if "metrics" in r]
    assert all("kl_penalti" in r["metrics"] for r in rows) and len(rows) == 3


def test_a_misspelt_prefix_is_said_with_the_prefix_it_is_close_to(
    tmp_path: Path, caught: pytest.LogCaptureFixture
) -> None:
    with _logger(tmp_path, unknown_keys="warn") as logger:
        logger.log_metrics({"loss": 0.1, "kl_penalty": 0.01}, step=1, prefix="trian")
    said = _said(caught)
    assert len(said) == 2
    assert all("a prefix no family reads" in s and "prefix 'train'?" in s for s in said)


def test_a_prefix_written_into_the_keys_of_an_unprefixed_dict_is_read_not_said(
    tmp_path: Path, caught: pytest.LogCaptureFixture
) -> None:
    # A W&B-style loop: the prefix inside the keys of a dict logged without one is read as
    # that prefix (rlmetrics.routing.by_prefix), so those keys are known; a typo among them is
    # said as logged, with the key as logged to write instead.
    with _logger(tmp_path, unknown_keys="warn") as logger:
        logger.log_metrics({"train/kl_penalty": 0.2, "train/reward": 0.9}, step=1)
        logger.log_metrics({"train": {"kl_penalti": 0.2}}, step=2)
    [said] = _said(caught)
    assert "'train/kl_penalti' logged without a prefix" in said
    assert "did you mean 'train/kl_penalty'?" in said


def test_a_prefix_split_between_prefix_and_key_is_said_as_the_prefix_to_give() -> None:
    [unknown] = Vocabulary().unknown("timing", ["setup/model_load_time_s"])
    assert unknown.known_under == ("timing/setup", "model_load_time_s")
    assert "log_metrics({'model_load_time_s': ...}, prefix='timing/setup')" in unknown.message()


def test_an_evaluation_value_in_a_train_dict_is_not_offered_as_the_training_series() -> None:
    # Accelerate hands everything under train: "did you mean 'reward'?" for eval_reward would
    # make an evaluation value the training reward.
    [unknown] = Vocabulary().unknown("train", ["eval_reward"])
    assert unknown.known_under == ("eval", "reward")
    assert "did you mean" not in unknown.message()
    assert "log_metrics({'reward': ...}, prefix='eval')" in unknown.message()
    [unknown] = Vocabulary().unknown("", ["test_loss"])
    assert unknown.known_under == ("test", "loss")


@pytest.mark.parametrize("key", ["eval/reward", "eval/loss", "test/kl_penalty"])
def test_an_evaluation_path_in_a_train_dict_is_not_offered_as_the_training_series(
    key: str,
) -> None:
    # Accelerate hands {"eval/reward": r} under train as it hands eval_reward: "did you mean
    # 'reward'?" would make the evaluation value the training reward.
    [unknown] = Vocabulary().unknown("train", [key])
    evaluation, _, rest = key.partition("/")
    assert unknown.known_under == (evaluation, rest)
    assert "did you mean" not in unknown.message()


def test_a_key_is_never_offered_as_its_own_correction() -> None:
    # {"reward": {"": r}} flattens to 'reward/', which reward/* does not match (a component
    # has a name): filling the pattern's * from the key gave the key itself back.
    [unknown] = Vocabulary().unknown("train", ["reward/"])
    assert "reward/" not in unknown.close


def test_a_key_unknown_under_every_split_keeps_its_close_keys() -> None:
    [unknown] = Vocabulary().unknown("", ["train/kl_penalti"])
    assert unknown.known_under is None
    [unknown] = Vocabulary().unknown("", ["kl_penalti"])
    assert unknown.known_under is None and unknown.close == ("kl_penalty",)


def test_a_pattern_is_offered_only_where_its_written_parts_are_close() -> None:
    [unknown] = Vocabulary().unknown("train", ["extra/metric_0"])
    assert unknown.close == ()  # not 'reward/metric_0': 'extra' is no 'reward'
    [unknown] = Vocabulary().unknown("train", ["reward/format/meen"])
    assert unknown.close[0] == "reward/format/mean"


def test_a_misspelt_per_dataset_metric_is_said_with_its_pattern(
    tmp_path: Path, caught: pytest.LogCaptureFixture
) -> None:
    with _logger(tmp_path, unknown_keys="warn") as logger:
        logger.log_metrics({"validation/gsm8k/acuracy": 0.5}, step=1, prefix="train")
        logger.log_metrics({"gsm8k/acuracy": 0.5}, step=1, prefix="validation")
    said = _said(caught)
    assert len(said) == 2
    assert "did you mean 'validation/gsm8k/accuracy'" in said[0]
    assert "did you mean 'gsm8k/accuracy'" in said[1]


def test_a_key_another_trainers_map_lists_names_that_map(
    tmp_path: Path, caught: pytest.LogCaptureFixture
) -> None:
    with _logger(tmp_path, unknown_keys="warn") as logger:
        logger.log_metrics({"completions/mean_length": 120.0}, step=1, prefix="train")
    [said] = _said(caught)
    assert "key map 'trl' lists it (Logger(key_map='trl'))" in said


# -- what is known ------------------------------------------------------------------------------

KNOWN = [
    ("train", "loss"),
    ("train", "kl_penalty"),
    ("", "reward"),
    ("train", "reward/mean"),  # a statistic of the total: the trackers' on purpose
    ("train", "reward/format"),  # a component
    ("train", "reward/format/mean"),
    ("train", "reward/format/std"),
    ("train", "validation/gsm8k/accuracy"),
    ("validation", "gsm8k/accuracy"),
    ("validation-gsm8k", "accuracy"),
    ("train", "efficiency/idle/refit_bubble_s"),
    ("", "efficiency/step_wall_time_s"),
    ("timing/setup", "anything_time_s"),
    ("timing/rollout_checkpoint", "tq_save_seconds"),
    ("rollout/checkpoint_outcome", "reason_whatever"),
    ("train", "epoch"),
    ("perf", "epoch"),  # the documented list holds under any prefix
    ("eval", "loss"),
    ("eval/gsm8k", "accuracy"),  # per-dataset evaluation: still an evaluation dict
    ("test/mmlu/stem", "accuracy"),
    ("", "eval/gsm8k/accuracy"),
]


@pytest.mark.parametrize(("prefix", "key"), KNOWN)
def test_keys_the_families_read_or_document_are_known(prefix: str, key: str) -> None:
    assert Vocabulary().known(prefix, key)


@pytest.mark.parametrize(
    ("prefix", "key"),
    [
        ("train", "kl_penalti"),
        ("trian", "loss"),
        ("train", "reward/format/meen"),
        ("train", "validation/gsm8k/acuracy"),
        ("train", "kl"),  # TRL's and OpenRLHF's: known only through their key map
        ("evaluation", "accuracy"),  # no evaluation prefix, only its first letters
        ("tests/mmlu", "accuracy"),
    ],
)
def test_keys_nothing_declares_are_unknown(prefix: str, key: str) -> None:
    assert not Vocabulary().known(prefix, key)


def test_every_key_the_trl_run_logs_is_known_under_the_trl_map(tmp_path: Path) -> None:
    rows = list(read_jsonl(TRL_RUN))
    assert unknown_in_rows(rows, resolve_key_map("trl")) == []
    # Replayed through a strict Logger with the map: nothing raises.
    with _logger(tmp_path, key_map="trl", unknown_keys="error", strict=True) as logger:
        for row in rows:
            if "metrics" in row:
                logger.log_metrics(row["metrics"], step=row["step"], prefix=row["prefix"])
    # Without the map, TRL's own keys are what it lists (not a typo among them).
    unknown = {u.key for u in unknown_in_rows(rows)}
    assert {"kl", "completions/mean_length", "clip_ratio/low_mean"} <= unknown


#: What TRL 1.16's GRPOTrainer logs only under some settings, so the recorded run has none of
#: them: vLLM's importance-sampling correction, tools, an entropy bonus, a MoE's router loss,
#: the cispo and vespo losses (trl/trainer/grpo_trainer.py).
_TRL_CONDITIONAL_KEYS = [
    "sampling/sampling_logp_difference/mean",
    "sampling/sampling_logp_difference/max",
    "sampling/importance_sampling_ratio/min",
    "sampling/importance_sampling_ratio/mean",
    "sampling/importance_sampling_ratio/max",
    "tools/call_frequency",
    "tools/failure_frequency",
    "policy_loss",
    "entropy_coef",
    "aux_loss",
    "cispo_clip_ratio",
    "vespo/phi_seq_mean",
]


def test_the_keys_trl_logs_only_under_some_settings_are_known_under_the_trl_map(
    tmp_path: Path,
) -> None:
    vocabulary = Vocabulary(resolve_key_map("trl"))
    assert [k for k in _TRL_CONDITIONAL_KEYS if not vocabulary.known("train", k)] == []
    with _logger(tmp_path, key_map="trl", unknown_keys="error", strict=True) as logger:
        logger.log_metrics(dict.fromkeys(_TRL_CONDITIONAL_KEYS, 0.5), step=1, prefix="train")
    [row] = [r for r in read_jsonl(tmp_path / "m.jsonl") if "metrics" in r]
    assert set(row["metrics"]) == set(_TRL_CONDITIONAL_KEYS)


#: One step of a verl GRPO/PPO run as ray_trainer.RayPPOTrainer logs it: the data, timing and
#: throughput metrics (verl/trainer/ppo/metric_utils.py), the actor's and the critic's update,
#: the step counters and the sequence balance.
_VERL_STEP_KEYS = [
    *(f"global_seqlen/{s}" for s in ("min", "max", "minmax_diff", "balanced_min", "balanced_max")),
    "global_seqlen/mean",
    "actor/entropy",
    "actor/kl_loss",
    "actor/kl_coef",
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/pg_clipfrac_lower",
    "actor/grad_norm",
    "actor/lr",
    "perf/mfu/actor",
    "perf/max_memory_allocated_gb",
    "perf/max_memory_reserved_gb",
    "perf/cpu_memory_used_gb",
    "critic/vf_loss",
    "critic/vf_clipfrac",
    "critic/vpred_mean",
    "critic/grad_norm",
    "critic/lr",
    "training/global_step",
    "training/epoch",
    *(
        f"critic/{what}/{s}"
        for what in ("score", "rewards", "advantages", "returns", "values")
        for s in ("mean", "max", "min")
    ),
    "critic/vf_explained_var",
    *(f"response_length/{s}" for s in ("mean", "max", "min", "clip_ratio")),
    *(f"response_length_non_aborted/{s}" for s in ("mean", "max", "min", "clip_ratio")),
    "response/aborted_ratio",
    *(f"prompt_length/{s}" for s in ("mean", "max", "min", "clip_ratio")),
    *(f"timing_s/{s}" for s in ("gen", "reward", "old_log_prob", "ref", "adv", "update_actor")),
    "timing_s/step",
    *(f"timing_per_token_ms/{s}" for s in ("gen", "adv", "update_actor", "ref")),
    "perf/total_num_tokens",
    "perf/time_per_step",
    "perf/throughput",
]


def test_every_key_of_a_verl_step_is_known_under_the_verl_map() -> None:
    vocabulary = Vocabulary(resolve_key_map("verl"))
    assert [k for k in _VERL_STEP_KEYS if not vocabulary.known("train", k)] == []


#: A verl validation step's keys, logged in its train dict: the data source holds a "/".
_VERL_VALIDATION_KEYS = [
    "val-core/openai/gsm8k/reward/mean@1",
    "val-core/HuggingFaceH4/MATH-500/acc/best@4/mean",
    "val-aux/openai/gsm8k/reward/std@4",
    "val-aux/num_turns/min",
]


def test_verl_s_validation_keys_are_known_and_kept_to_the_backends(tmp_path: Path) -> None:
    key_map = resolve_key_map("verl")
    vocabulary = Vocabulary(key_map)
    assert [k for k in _VERL_VALIDATION_KEYS if not vocabulary.known("train", k)] == []
    for key in _VERL_VALIDATION_KEYS:
        found = key_map.rule_for(key)
        assert found is not None and found[0].series is None and found[0].category is None
    assert key_map.rule_for("val-core") is None  # "**" is one segment or more


#: The status an OpenRLHF PPO step returns: the actor's training step (its loss, lr and every
#: field of the experiences' info), the critic's, and the rollout's and timing keys
#: (openrlhf/trainer/ray/ppo_actor.py, ppo_critic.py).
_OPENRLHF_STATUS_KEYS = [
    "policy_loss",
    "actor_lr",
    "entropy_loss",
    "ppo_clip_ratio",
    "ppo_kl",
    "vllm_kl",
    "kl",
    "reward",
    "return",
    "response_length",
    "total_length",
    "critic_loss",
    "values",
    "critic_lr",
    "critic_grad_norm",
    "rollout/reward_mean",
    "timing/generation",
    "timing/step_total",
]


def test_every_key_of_an_openrlhf_status_is_known_under_the_openrlhf_map() -> None:
    vocabulary = Vocabulary(resolve_key_map("openrlhf"))
    assert [k for k in _OPENRLHF_STATUS_KEYS if not vocabulary.known("train", k)] == []


def test_a_key_map_rule_kept_to_the_backends_is_known() -> None:
    key_map = KeyMap("mine", [KeyRule("my_stat"), KeyRule("timers/*")])
    vocabulary = Vocabulary(key_map)
    assert vocabulary.known("train", "my_stat") and vocabulary.known("", "timers/step")
    assert not vocabulary.known("train", "timers/a/b")


def test_a_declared_key_is_known_and_a_late_one_is_refused() -> None:
    assert not Vocabulary().known("train", "my_stat")
    declare_keys(["my_stat"], backend_only=True, note="logged for the trackers")
    assert Vocabulary().known("train", "my_stat")
    assert not Vocabulary().known("perf", "my_stat")
    with in_memory_telemetry():
        declare_keys(["my_stat"], backend_only=True)  # the same again (a reload): a no-op
        with pytest.raises(LateDeclarationError, match="before rlmetrics"):
            declare_keys(["late"])


@pytest.mark.parametrize(
    ("keys", "prefixes"),
    [(["**"], ["train", ""]), (["*"], ["train"]), (["*/**"], [""]), (["**"], ["**"])],
)
def test_a_pattern_that_knows_every_train_key_is_refused_saying_what_to_declare(
    keys: list[str], prefixes: list[str]
) -> None:
    """``declare_keys(["**"])`` in one installed plugin made every key of every train dict
    known: no user of it was told of a typo again, and nothing said so."""
    from rlmetrics.registry import DeclarationError

    with pytest.raises(DeclarationError, match=r"every key of a train dict.*acme/\*\*"):
        declare_keys(keys, prefixes=prefixes)
    assert not Vocabulary().known("train", "rewrd")


def test_a_wildcard_under_a_prefix_of_its_own_stays_allowed() -> None:
    declare_keys(["**"], prefixes=["acme/event"])
    declare_keys(["*"], prefixes=["acme/*"], backend_only=True)
    assert Vocabulary().known("acme/event", "a/b") and not Vocabulary().known("train", "rewrd")


def test_a_failed_plugins_key_patterns_are_rolled_back() -> None:
    registry = default_registry()
    mark = registry.mark()
    declare_keys(["from_a_broken_plugin"])
    registry.rollback(mark)
    assert not Vocabulary().known("train", "from_a_broken_plugin")


def test_declarations_after_the_logger_was_built_count(
    tmp_path: Path, caught: pytest.LogCaptureFixture
) -> None:
    # A plugin loaded at start() declares after the Logger was made: the decision follows.
    with _logger(tmp_path, unknown_keys="warn") as logger:
        declare_keys(["declared_later"])
        logger.log_metrics({"declared_later": 1.0}, step=1, prefix="train")
    assert _said(caught) == []


def test_the_decision_is_made_once_per_key_sequence() -> None:
    checker = KeyChecker()
    built: list[tuple[Any, ...]] = []
    plan = checker._plan

    def counted(keys: tuple[Any, ...]) -> Any:
        built.append(keys)
        return plan(keys)

    checker._plans._build = counted
    assert [u.key for u in checker("train", {"loss": 1.0, "kl_penalti": 2.0})] == ["kl_penalti"]
    for _ in range(50):  # said once: later steps with the same keys find nothing to say
        assert checker("train", {"loss": 1.0, "kl_penalti": 2.0}) == ()
        assert checker("", {"loss": 1.0}) == ()
    assert built == [("train", "loss", "kl_penalti"), ("", "loss")]
    # New declarations: the decision is made again, and said again.
    declare_keys(["something_else"])
    assert [u.key for u in checker("train", {"loss": 1.0, "kl_penalti": 2.0})] == ["kl_penalti"]


# -- strict mode and the settings ----------------------------------------------------------


def test_error_raises_in_strict_mode_naming_the_key(tmp_path: Path) -> None:
    logger = _logger(tmp_path, unknown_keys="error", strict=True)
    with pytest.raises(rlmetrics.StrictModeError, match=r"'kl_penalti'.*did you mean 'kl_penalty'"):
        logger.log_metrics({"loss": 0.1, "kl_penalti": 0.01}, step=1, prefix="train")
    logger.log_metrics({"loss": 0.1, "kl_penalti": 0.01}, step=2, prefix="train")  # said once
    logger.finish()
    rows = [r for r in read_jsonl(tmp_path / "m.jsonl") if "metrics" in r]
    assert len(rows) == 2  # the call did its work before raising


def test_warn_never_raises_in_strict_mode_and_error_outside_it_warns(
    tmp_path: Path, caught: pytest.LogCaptureFixture
) -> None:
    with _logger(tmp_path, unknown_keys="warn", strict=True) as logger:
        logger.log_metrics({"kl_penalti": 0.01}, step=1, prefix="train")
    with _logger(tmp_path, unknown_keys="error") as logger:
        logger.log_metrics({"kl_penalti": 0.01}, step=1, prefix="train")
    assert len(_said(caught)) == 2


def test_ignore_checks_nothing(tmp_path: Path, caught: pytest.LogCaptureFixture) -> None:
    with _logger(tmp_path, strict=True) as logger:
        assert logger._unknown is None
        logger.log_metrics({"kl_penalti": 0.01}, step=1, prefix="trian")
    assert _said(caught) == []


def test_a_wrong_value_names_its_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=r"unknown_keys='wrn'.*did you mean 'warn'"):
        rlmetrics.Logger(unknown_keys="wrn")
    monkeypatch.setenv("RLMETRICS_UNKNOWN_KEYS", "loud")
    with pytest.raises(ConfigurationError, match="RLMETRICS_UNKNOWN_KEYS='loud'"):
        rlmetrics.Logger()
    monkeypatch.delenv("RLMETRICS_UNKNOWN_KEYS")
    (tmp_path / "r.toml").write_text('[logger]\nunknown_keys = "everything"\n')
    monkeypatch.setenv("RLMETRICS_CONFIG", str(tmp_path / "r.toml"))
    with pytest.raises(ConfigurationError, match=r"r.toml \[logger\] unknown_keys must be one"):
        rlmetrics.Logger()


# -- the Logger and check --run agree --------------------------------------------------------

_WORDS = ["loss", "kl_penalty", "reward", "lr", "grad_norm", "epoch", "accuracy", "format", "kl"]
_KEY = st.one_of(
    st.sampled_from(_WORDS),
    st.sampled_from(_WORDS).map(lambda w: w[:-1] + "i"),  # a typo
    st.sampled_from(_WORDS).map(lambda w: f"reward/{w}"),
    st.sampled_from(_WORDS).map(lambda w: f"validation/gsm8k/{w}"),
    st.sampled_from(_WORDS).map(lambda w: f"efficiency/idle/{w}_s"),
    st.sampled_from(_WORDS).map(lambda w: f"rewards/{w}/mean"),  # TRL's, under its map
    st.from_regex(r"[a-z]{1,6}(/[a-z_]{1,6}){0,2}", fullmatch=True),
)
_PREFIX = st.sampled_from(["train", "", "trian", "validation", "eval", "timing/setup", "perf"])
_ROWS = st.lists(
    st.tuples(_PREFIX, st.dictionaries(_KEY, st.floats(0, 1), min_size=1, max_size=6)),
    min_size=1,
    max_size=4,
)


@given(rows=_ROWS, trl=st.booleans())
def test_check_run_lists_what_the_logger_said(
    rows: list[tuple[str, dict[str, float]]], trl: bool
) -> None:
    import tempfile

    with isolated_state(), tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.jsonl"
        with (
            captured_log() as log,
            rlmetrics.Logger(
                backends={"jsonl": {"path": path}},
                unknown_keys="warn",
                key_map="trl" if trl else None,
            ) as logger,
        ):
            for step, (prefix, metrics) in enumerate(rows):
                logger.log_metrics(metrics, step=step, prefix=prefix)
        said = [
            r.getMessage().removeprefix("rlmetrics: ").split(". " + _SAID)[0]
            for r in log.records
            if r.levelno >= logging.WARNING and _SAID in r.getMessage()
        ]
        listed = unknown_in_rows(read_jsonl(path), resolve_key_map("trl") if trl else None)
        assert said == [u.message() for u in listed]


def test_check_run_prints_and_writes_the_loggers_findings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlmetrics.cli import main

    path = tmp_path / "m.jsonl"
    with rlmetrics.Logger(backends={"jsonl": {"path": path}}) as logger:
        logger.log_metrics({"loss": 0.1, "kl_penalti": 0.01}, step=1, prefix="train")
        logger.log_metrics({"kl_penalty": 0.01}, step=2, prefix="trian")
    assert main(["check", "--run", str(path)]) == 1
    out = capsys.readouterr().out
    assert "2 keys logged are known to no declared series, key-map rule or documented list" in out
    said = [line.split() for line in out.splitlines() if "did you mean" in line]
    assert [(words[0], words[-1]) for words in said] == [
        ("kl_penalti", "'kl_penalty'?"),
        ("trian/kl_penalty", "'train'?"),
    ]
    assert main(["check", "--run", str(path), "--json"]) == 1
    found = json.loads(capsys.readouterr().out)["run"]["unknown_keys"]
    assert [(u["prefix"], u["key"], u["did_you_mean"]) for u in found] == [
        ("train", "kl_penalti", ["kl_penalty"]),
        ("trian", "kl_penalty", ["train"]),
    ]
    assert found[0]["message"] == unknown_in_rows(read_jsonl(path))[0].message()


def test_a_series_recorded_through_its_api_has_no_logger_key(
    tmp_path: Path, caught: pytest.LogCaptureFixture
) -> None:
    """Before: every declared series' registry key was known in a train dict, so a loop that
    logged ``rl.step.number`` or ``gen_ai.execute_tool.duration`` by hand (keys no Logger dict
    feeds: their families record through their APIs) was never told that the value reaches
    the trackers only. A series' key is a Logger key when it is a key of its own (``key=``,
    as ``tee_scalar`` gives), not its name."""
    rlmetrics.declare("acme.api", [MetricSpec("acme.api.seconds", Kind.GAUGE, unit="s")])
    rlmetrics.declare("acme.teed", [MetricSpec("acme.teed.depth", Kind.GAUGE, key="acme/depth")])
    vocabulary = Vocabulary()
    assert vocabulary.known("train", "acme/depth")
    assert not vocabulary.known("train", "acme.api.seconds")
    assert not vocabulary.known("train", "rl.step.number")  # the liveness family's
    with _logger(tmp_path, unknown_keys="warn") as logger:
        logger.log_metrics(
            {"loss": 0.1, "acme/depth": 3, "rl.step.number": 7}, step=1, prefix="train"
        )
    [said] = _said(caught)
    assert "'rl.step.number'" in said and "reaches the trackers only" in said


def test_declare_keys_of_a_key_carrying_its_prefix_says_the_key_to_declare(
    caught: pytest.LogCaptureFixture,
) -> None:
    # Before: declared, and {"train/acme": v} logged without a prefix (read as "acme" under
    # train) was still said as unknown, with the advice to declare it with declare_keys.
    with pytest.raises(
        rlmetrics.DeclarationError,
        match=r"declare_keys\(\['acme'\]\) .*\{'train/acme': v\}",
    ):
        declare_keys(["train/acme"], backend_only=True)
    declare_keys(["acme"], backend_only=True)  # what it says: both forms are then known
    logger = rlmetrics.Logger(backends={}, unknown_keys="warn")
    logger.log_metrics({"train/acme": 1}, step=1)
    logger.log_metrics({"acme": 1}, step=2, prefix="train")
    logger.finish()
    assert _said(caught) == []
