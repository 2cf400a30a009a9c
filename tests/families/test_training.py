from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics.families import training
from rlmetrics.families.training import tee_scalar
from rlmetrics.testing import in_memory_telemetry, points, single

ROWS = [
    ("reward", "rl.reward.mean", "1"),
    ("kl_penalty", "rl.kl.divergence", "1"),
    ("loss", "rl.policy.loss", "1"),
    ("critic/loss", "rl.value.loss", "1"),
    ("approx_entropy", "rl.entropy", "1"),
    ("mean_gen_tokens_per_sample", "rl.response.length.mean", "{token}"),
    ("grad_norm", "rl.grad_norm", "1"),
    ("lr", "rl.learning_rate", "1"),
    ("loader_latency_max", "rl.sft_v2.loader.latency.max", "s"),
    ("policy_time", "rl.sft_v2.policy.duration", "s"),
    ("total_step_time", "rl.sft_v2.step.duration", "s"),
    ("valid_tokens_per_second", "rl.sft_v2.valid_tokens_per_second", "{token}/s"),
]


def _nested(flat: dict[str, float]) -> dict[str, Any]:
    """Log ``critic/loss`` the way PPO does, as a nested dict."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        head, _, tail = key.partition("/")
        if tail:
            nested.setdefault(head, {})[tail] = value
        else:
            nested[key] = value
    return nested


@pytest.mark.parametrize("prefix", ["train", ""])
def test_every_row_is_teed_as_an_unlabelled_gauge(exporting: Any, prefix: str) -> None:
    logger, reader = exporting
    values = {key: float(i + 1) / 4 for i, (key, _, _) in enumerate(ROWS)}
    logger.log_metrics(_nested(values), step=1, prefix=prefix)
    found = points(reader)
    for key, name, unit in ROWS:
        point = single(found, name)
        assert (point.kind, point.unit, point.attributes, point.value) == (
            "gauge",
            unit,
            {},
            values[key],
        ), name


def test_last_step_wins_and_other_prefixes_are_not_teed(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_metrics({"reward": 1.0, "loss": 3.0}, step=1, prefix="train")
    logger.log_metrics({"reward": 2.0}, step=2, prefix="train")
    logger.log_metrics({"reward": 99.0, "loss": 99.0}, step=2, prefix="validation")
    found = points(reader)
    assert single(found, "rl.reward.mean").value == 2.0
    assert single(found, "rl.policy.loss").value == 3.0


def test_a_none_or_non_numeric_value_drops_only_itself(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_metrics(
        {"reward": None, "loss": "nan?", "grad_norm": [1.0, 2.0], "lr": 1e-5, "kl_penalty": True},
        step=1,
        prefix="train",
    )
    found = points(reader)
    assert single(found, "rl.learning_rate").value == 1e-5
    teed = [p for p in found if p.name.startswith("rl.") and not p.name.startswith("rl.step.")]
    assert [p.name for p in teed] == ["rl.learning_rate"]


def test_nothing_is_recorded_unless_exporting() -> None:
    logger = rlmetrics.Logger(backends={})
    logger.log_metrics({"reward": 1.0}, step=1, prefix="train")  # no telemetry: no error
    with in_memory_telemetry() as (_handle, reader):
        # rlmetrics' own delivery counters (rlmetrics.*) report whatever Logger is alive.
        assert [p for p in points(reader) if p.name.startswith("rl.")] == []


def test_a_downstream_algorithm_declares_its_own_row() -> None:
    accuracy = "accuracy"
    spec = tee_scalar(accuracy, "rl.dpo.accuracy", description="Preference accuracy")
    assert spec.key == accuracy
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.Logger(backends={}).log_metrics({accuracy: 0.75}, step=1, prefix="train")
        assert single(points(reader), "rl.dpo.accuracy").value == 0.75


def test_a_conflicting_row_fails_at_declaration() -> None:
    with pytest.raises(rlmetrics.DeclarationError, match=r"rlmetrics\.families\.training"):
        tee_scalar("reward", "rl.reward.mean", unit="s")


# -- reward components and per-dataset metrics -------------------------------------------------

COMPONENT = "rl.reward.component_mean"
CAP = training.MAX_REWARD_COMPONENTS


def _by_attribute(reader: Any, name: str, attribute: str) -> dict[str, float]:
    found = [p for p in points(reader) if p.name == name]
    assert all(p.kind == "gauge" and set(p.attributes) == {attribute} for p in found), found
    return {p.attributes[attribute]: p.value for p in found}


def test_reward_components_are_one_gauge_with_the_component_as_attribute(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_metrics(
        {
            "reward": 0.75,
            "reward/format": 1.0,
            "reward/accuracy": 0.5,
            "reward/judge/mean": 0.25,  # prime-rl's shape: the component's mean
            "reward/judge/std": 9.0,  # another statistic of it: not a component
            "reward/mean": 9.0,  # statistics of the total reward (prime-rl): not components
            "reward/std": 9.0,
        },
        step=1,
        prefix="train",
    )
    found = points(reader)
    assert single(found, "rl.reward.mean").value == 0.75
    assert _by_attribute(reader, COMPONENT, "rl.reward.component") == {
        "format": 1.0,
        "accuracy": 0.5,
        "judge": 0.25,
    }


def test_nested_reward_dict_and_last_step_wins(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_metrics({"reward": {"format": 1.0, "accuracy": 0.0}}, step=1, prefix="")
    logger.log_metrics({"reward": {"format": 0.5}}, step=2, prefix="")
    assert _by_attribute(reader, COMPONENT, "rl.reward.component") == {
        "format": 0.5,
        "accuracy": 0.0,
    }


@pytest.mark.parametrize("one_dict", [True, False], ids=["one-dict", "one-name-a-step"])
@pytest.mark.parametrize("distinct", [3, 300, 3000])
def test_reward_components_past_the_cap_are_other(
    exporting: Any, distinct: int, one_dict: bool
) -> None:
    logger, reader = exporting
    names = [f"c{i}" for i in range(distinct)]
    if one_dict:
        logger.log_metrics({f"reward/{n}": float(i) for i, n in enumerate(names)}, 1, "train")
    else:
        for i, n in enumerate(names):
            logger.log_metrics({f"reward/{n}": float(i)}, step=i, prefix="train")
    exported = _by_attribute(reader, COMPONENT, "rl.reward.component")
    kept = {n: float(i) for i, n in enumerate(names[:CAP])}
    if distinct <= CAP:
        assert exported == kept
    else:
        # other holds the last folded component's value: it says components were folded.
        assert exported == {**kept, "other": float(distinct - 1)}
    assert len(training._components.bounded) == min(distinct, CAP)
    assert len(training._components._sets) == min(distinct, CAP)


def test_reward_component_memory_stays_flat_past_the_cap(exporting: Any) -> None:
    import tracemalloc

    logger, _reader = exporting

    def log(first: int, last: int) -> None:
        for i in range(first, last):
            logger.log_metrics({"reward/format": 1.0, f"reward/c{i}": float(i)}, i, "train")

    log(0, 300)  # the cap is full
    tracemalloc.start()
    readings = []
    try:
        for first in range(300, 6300, 1000):
            log(first, first + 1000)
            readings.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    # 6000 more distinct names. What is held is bounded by the per-key-sequence caches (a
    # few hundred dicts' keys, cleared when full), never by the names seen: a leak of even
    # 50 bytes a name would pass 300 KB.
    assert max(readings) < 128 * 1024, readings


def test_a_new_session_admits_its_own_first_components() -> None:
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={})
        logger.log_metrics({f"reward/a{i}": 1.0 for i in range(CAP + 5)}, 1, "train")
        assert "other" in _by_attribute(reader, COMPONENT, "rl.reward.component")
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={})
        logger.log_metrics({"reward/b": 2.0}, 1, "train")
        assert _by_attribute(reader, COMPONENT, "rl.reward.component") == {"b": 2.0}


def test_an_unsafe_or_bad_component_drops_only_itself(
    exporting: Any, caplog: pytest.LogCaptureFixture
) -> None:
    logger, reader = exporting
    logger.log_metrics(
        {"reward/with space": 1.0, "reward/ok": 0.5, "reward/text": "high", "reward/none": None},
        step=1,
        prefix="train",
    )
    assert _by_attribute(reader, COMPONENT, "rl.reward.component") == {"ok": 0.5}
    assert any("reward component" in r.getMessage() for r in caplog.records)
    assert not any("with space" in r.getMessage() for r in caplog.records)


def test_record_reward_components_for_adapters(exporting: Any) -> None:
    _logger, reader = exporting
    training.record_reward_components({"accuracy_reward": 0.5, "format_reward": 1.0})
    assert _by_attribute(reader, COMPONENT, "rl.reward.component") == {
        "accuracy_reward": 0.5,
        "format_reward": 1.0,
    }


@pytest.mark.parametrize(
    ("prefix", "metrics"),
    [
        ("train", {"validation/gsm8k/accuracy": 0.5, "validation/math500/accuracy": 0.25}),
        ("", {"validation": {"gsm8k": {"accuracy": 0.5}, "math500": {"accuracy": 0.25}}}),
        ("validation", {"gsm8k/accuracy": 0.5, "math500/accuracy": 0.25}),
    ],
    ids=["train-dict", "nested", "validation-prefix"],
)
def test_per_dataset_validation_metrics(exporting: Any, prefix: str, metrics: Any) -> None:
    logger, reader = exporting
    logger.log_metrics(metrics, step=3, prefix=prefix)
    assert _by_attribute(reader, "rl.validation.accuracy", "rl.dataset") == {
        "gsm8k": 0.5,
        "math500": 0.25,
    }


def test_a_validation_dict_of_one_unnamed_dataset_is_exported(exporting: Any) -> None:
    """NeMo-RL's GRPO logs its validation as ``{"accuracy", "avg_length"}`` under the
    ``validation`` prefix, SFT as ``{"val_loss"}``: one dataset, named nowhere. Before, none
    of it reached a series (only ``<dataset>/<metric>`` keys did), so the run's validation
    accuracy was in the trackers and missing from every dashboard and alert."""
    logger, reader = exporting
    logger.log_metrics({"accuracy": 0.75, "avg_length": 310.0}, step=10, prefix="validation")
    logger.log_metrics({"val_loss": 1.25}, step=10, prefix="validation")
    found = points(reader)
    unnamed = {"rl.dataset": "default"}
    assert single(found, "rl.validation.accuracy", **unnamed).value == 0.75
    assert single(found, "rl.validation.response.length.mean", **unnamed).value == 310.0
    assert single(found, "rl.validation.loss", **unnamed).value == 1.25
    assert training.UNNAMED_DATASET == "default"


def test_dpo_per_dataset_prefix(exporting: Any) -> None:
    logger, reader = exporting
    logger.log_metrics({"accuracy": 0.5, "loss": 1.5, "avg_length": 120}, 1, "validation-gsm8k")
    logger.log_metrics({"accuracy": 0.25}, step=1, prefix="validation-data-math500")
    found = points(reader)
    assert single(found, "rl.validation.accuracy", **{"rl.dataset": "gsm8k"}).value == 0.5
    assert single(found, "rl.validation.accuracy", **{"rl.dataset": "data-math500"}).value == 0.25
    assert single(found, "rl.validation.loss").value == 1.5
    length = single(found, "rl.validation.response.length.mean")
    assert (length.unit, length.value) == ("{token}", 120)


def test_undeclared_dataset_metric_reaches_backends_only(exporting: Any, tmp_path: Any) -> None:
    _logger, reader = exporting
    path = tmp_path / "m.jsonl"
    logger = rlmetrics.Logger(backends={"jsonl": {"path": str(path)}})
    logger.log_metrics({"gsm8k/pass@1": 0.5, "gsm8k/accuracy": 0.5}, 1, "validation")
    logger.finish()
    assert "gsm8k/pass@1" in path.read_text()
    assert {p.name for p in points(reader) if p.name.startswith("rl.validation")} == {
        "rl.validation.accuracy"
    }


def test_a_downstream_project_declares_its_dataset_metric() -> None:
    training.tee_dataset_metric("pass_at_1", "rl.validation.pass_at_1", description="pass@1")
    with in_memory_telemetry() as (_handle, reader):
        rlmetrics.Logger(backends={}).log_metrics(
            {"validation/aime/pass_at_1": 0.125}, step=1, prefix="train"
        )
        assert _by_attribute(reader, "rl.validation.pass_at_1", "rl.dataset") == {"aime": 0.125}


@pytest.mark.parametrize("distinct", [3, 300, 3000])
def test_datasets_past_the_cap_are_other(exporting: Any, distinct: int) -> None:
    logger, reader = exporting
    logger.log_metrics({f"d{i}/accuracy": i / 4096 for i in range(distinct)}, 1, "validation")
    exported = _by_attribute(reader, "rl.validation.accuracy", "rl.dataset")
    kept = min(distinct, training.MAX_DATASETS)
    assert {k: v for k, v in exported.items() if k != "other"} == {
        f"d{i}": i / 4096 for i in range(kept)
    }
    assert ("other" in exported) == (distinct > training.MAX_DATASETS)
    assert len(training._datasets._sets) == kept


# Property tests for the two key parsers, against a model of the documented shapes.

_SEGMENT = st.text(alphabet="abc/_", min_size=0, max_size=6)
_KEYS = st.lists(
    st.one_of(
        st.builds("{}/{}".format, st.sampled_from(["reward", "validation", "x"]), _SEGMENT),
        _SEGMENT,
    ),
    max_size=12,
)


@given(_KEYS)
def test_reward_components_property(keys: list[str]) -> None:
    metrics = {k: i for i, k in enumerate(keys)}
    expected = {}
    for key, value in metrics.items():
        head, *rest = key.split("/")
        if head != "reward" or not rest or not rest[0]:
            continue
        plain = len(rest) == 1 and rest[0] not in training._REWARD_STATISTICS
        if plain or rest[1:] == ["mean"]:
            expected[rest[0]] = value
    assert training.reward_components(metrics) == expected


@given(_KEYS, st.sampled_from(["train", "", "validation", "validation-ds", "validation-"]))
def test_dataset_metrics_property(keys: list[str], prefix: str) -> None:
    metrics = {k: i for i, k in enumerate(keys)}
    expected = []
    for key, value in metrics.items():
        parts = key.split("/")
        if prefix == "validation-ds":
            parts = ["validation", "ds", *parts]
        elif prefix == "validation":
            parts = ["validation", *parts]
        elif prefix == "validation-":
            continue
        if len(parts) == 3 and parts[0] == "validation" and parts[1] and parts[2]:
            expected.append((parts[1], parts[2], value))
        elif prefix == "validation" and len(parts) == 2 and parts[1]:  # a dict of no dataset
            metric = {"val_loss": "loss"}.get(parts[1], parts[1])
            expected.append((training.UNNAMED_DATASET, metric, value))
    assert training.dataset_metrics(metrics, prefix) == expected


#: Keys NeMo-RL's GRPO loop logs in its train dict beside the ones NEMO_RL_BACKEND_ONLY already
#: listed (nemo_rl/algorithms/grpo.py, loss/loss_functions.py ClippedPGLossFn,
#: experience/rollouts.py): the sequence log-prob error metrics it always logs, the truncated
#: importance-sampling ratio, tool-call and thinking penalties, dynamic sampling, the
#: baseline's reward mix and the async multi-turn rollout's statistics.
NEMO_RL_GRPO_KEYS = (
    *("max_seq_mult_prob_error", "mean_seq_mult_prob_error", "min_seq_mult_prob_error"),
    "max_seq_mult_prob_error_after_mask",
    "mean_seq_mult_prob_error_after_mask",
    "min_seq_mult_prob_error_after_mask",
    *("num_masked_seqs_by_logprob_error", "masked_correct_pct", "is_oob_ratio"),
    *("invalid_tool_call_rate", "malformed_thinking_rate", "num_invalid_tool_calls"),
    *("num_malformed_thinking", "num_assistant_messages"),
    *("dynamic_sampling_num_gen_batches", "dynamic_sampling_num_discarded_valid_samples"),
    *("baseline_reward/pct_0", "baseline_reward/pct_1", "baseline_reward/pct_mixed"),
    *("max_turns_per_sample", "max_gen_tokens_per_turn/max", "max_gen_tokens_per_turn/mean"),
    *("mean_total_reward", "max_total_reward", "min_total_reward"),
)


def test_nemo_rl_grpo_train_keys_are_known_backend_only() -> None:
    from rlmetrics.known_keys import Vocabulary

    assert [u.key for u in Vocabulary().unknown("train", NEMO_RL_GRPO_KEYS)] == []


@pytest.mark.parametrize(
    ("key", "said"),
    [
        # Before: declared, then {"train/acc": v} logged without a prefix (read as "acc"
        # under train) and {"acc": v} under prefix="train" both missed it, silently.
        ("train/acc", r"tee_scalar\('acc', 'rl\.my\.acc'\)"),
        ("eval/acc", r"'eval/' .* never the training scalars"),
    ],
)
def test_tee_scalar_of_a_key_carrying_its_prefix_says_the_key_to_declare(
    key: str, said: str
) -> None:
    with pytest.raises(rlmetrics.DeclarationError, match=said):
        tee_scalar(key, "rl.my.acc")
