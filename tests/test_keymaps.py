"""Key maps: a trainer's keys land in the declared series the map names, read back from the
real SDK's in-memory reader, while every backend still gets the trainer's own keys."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rlmetrics
from rlmetrics import KeyMap, KeyRule, Kind, MetricSpec
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.check import check_key_maps
from rlmetrics.keymaps import (
    STEP_WALL_TIME,
    KeyMapper,
    available_key_maps,
    efficiency_key,
    resolve_key_map,
)
from rlmetrics.keymaps.builtin import OPENRLHF, TRL, VERL
from rlmetrics.plugins import register as register_plugin
from rlmetrics.testing import captured_log, in_memory_telemetry, points, single

TRL_STEP = {
    "loss": 0.25,
    "grad_norm": 1.5,
    "learning_rate": 1e-6,
    "reward": 7.5,
    "reward_std": 0.5,
    "rewards/length_reward/mean": 7.5,
    "kl": 0.01,
    "entropy": 4.2,
    "completions/mean_length": 8.0,
    "clip_ratio/low_mean": 0.0,
    "step_time": 0.7,
    "epoch": 0.125,
}


class Tee:
    """An in-process plugin that keeps what the plugins' hooks receive."""

    def __init__(self) -> None:
        self.metrics: list[tuple[dict[str, Any], int, str]] = []
        self.summaries: list[tuple[Any, int]] = []

    @rlmetrics.hookimpl
    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        self.metrics.append((dict(metrics), step, prefix))

    @rlmetrics.hookimpl
    def on_efficiency_summary(self, summary: Any, step: int) -> None:
        self.summaries.append((summary, step))


@pytest.fixture
def tee() -> Tee:
    plugin = Tee()
    assert register_plugin(plugin, "tee")
    return plugin


def _values(found: list[Any]) -> dict[str, float]:
    return {p.name: p.value for p in found if not p.attributes}


def test_trl_keys_land_in_their_series_and_backends_keep_the_trainers_keys(
    tmp_path: Path, tee: Tee
) -> None:
    path = tmp_path / "m.jsonl"
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": path}}, key_map="trl")
        logger.log_metrics(TRL_STEP, step=3, prefix="train")
        found = points(reader)
        logger.finish()
    values = _values(found)
    assert values["rl.reward.mean"] == 7.5
    assert values["rl.kl.divergence"] == 0.01
    assert values["rl.policy.loss"] == 0.25
    assert values["rl.entropy"] == 4.2
    assert values["rl.response.length.mean"] == 8.0
    assert values["rl.grad_norm"] == 1.5
    assert values["rl.learning_rate"] == 1e-6
    # Each reward function is a component of the one declared series, not a key of its own.
    component = {"rl.reward.component": "length_reward"}
    assert single(found, "rl.reward.component_mean", **component).value == 7.5
    # TRL's step time is not turned into an efficiency summary it never measured.
    assert not [p for p in found if p.name.startswith("rl.efficiency")]
    assert tee.summaries == []
    # Every backend gets the trainer's keys unchanged...
    (row,) = read_jsonl(path)
    assert (row["step"], row["prefix"], row["metrics"]) == (3, "train", TRL_STEP)
    # ...and the plugins only what the map does not list.
    ((metrics, step, prefix),) = tee.metrics
    assert (step, prefix) == (3, "train")
    assert metrics == {}


@pytest.mark.parametrize("count", [3, 300])
def test_reward_functions_past_the_cap_are_recorded_as_other(count: int) -> None:
    from rlmetrics.families.training import MAX_REWARD_COMPONENTS

    step = {f"rewards/fn{i:04d}/mean": float(i) for i in range(count)}
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={}, key_map="trl")
        for n in range(2):
            logger.log_metrics(step, step=n, prefix="train")
        found = [p for p in points(reader) if p.name == "rl.reward.component_mean"]
        mapper = logger._key_map
        assert mapper is not None
        admitted = len(next(iter(mapper._bounded.values())))
    names = {p.attributes["rl.reward.component"]: p.value for p in found}
    kept = min(count, MAX_REWARD_COMPONENTS)
    assert admitted == kept  # memory holds the admitted names only, however many arrive
    assert {n: v for n, v in names.items() if n != "other"} == {
        f"fn{i:04d}": float(i) for i in range(kept)
    }
    if count > kept:
        assert names["other"] == float(count - 1)  # the last folded one, as a gauge keeps it


def test_unlisted_keys_reach_the_plugins_as_they_are(tee: Tee) -> None:
    logger = rlmetrics.Logger(backends={}, key_map="trl")
    logger.log_metrics({"reward": 1.0, "my/custom": 2.0, "kl_penalty": 0.5}, step=1)
    ((metrics, _step, _prefix),) = tee.metrics
    assert metrics == {"my/custom": 2.0, "kl_penalty": 0.5}


def test_a_key_listed_as_backends_only_never_reaches_the_tee_under_another_meaning() -> None:
    # OpenRLHF's "reward" is the training micro-batches' mean; NeMo-RL's "reward" (which the
    # training family tees) is the mean reward. With the map only rollout/reward_mean counts.
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={}, key_map="openrlhf")
        logger.log_metrics({"reward": 1.0, "rollout/reward_mean": 2.0}, step=1, prefix="train")
        assert _values(points(reader))["rl.reward.mean"] == 2.0


def test_without_a_key_map_nothing_changes(tee: Tee) -> None:
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={})
        logger.log_metrics({"reward": 1.0, "kl": 0.5}, step=1, prefix="train")
        values = _values(points(reader))
    assert values["rl.reward.mean"] == 1.0 and "rl.kl.divergence" not in values
    assert tee.metrics == [({"reward": 1.0, "kl": 0.5}, 1, "train")]


def test_other_prefixes_are_not_mapped(tee: Tee) -> None:
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={}, key_map="trl")
        logger.log_metrics({"kl": 0.5, "reward": 3.0}, step=1, prefix="eval")
        assert "rl.kl.divergence" not in _values(points(reader))
    assert tee.metrics == [({"kl": 0.5, "reward": 3.0}, 1, "eval")]


def test_verl_timing_keys_become_efficiency_categories(tee: Tee) -> None:
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={}, key_map="verl")
        logger.log_metrics(
            {
                "timing_s/step": 10.0,
                "timing_s/update_weights": 2.0,
                "timing_s/gen": 5.0,
                "critic/rewards/mean": 0.5,
                "actor/kl_loss": 0.02,
                "actor/pg_loss": -0.1,
            },
            step=4,
            prefix="",
        )
        found = points(reader)
    refit = single(
        found, "rl.efficiency.seconds", **{"rl.efficiency.category": "idle/refit_bubble"}
    )
    assert refit.value == 2.0
    assert refit.attributes["rl.efficiency.window"] == "step"
    assert single(found, "rl.efficiency.pct", **{"rl.efficiency.window": "step"}).value == 80.0
    ((summary, step),) = tee.summaries
    assert step == 4 and summary.step_wall_time_s == 10.0
    assert dict(summary.seconds) == {"idle/refit_bubble": 2.0}
    values = _values(found)
    assert (values["rl.reward.mean"], values["rl.kl.divergence"]) == (0.5, 0.02)
    assert values["rl.policy.loss"] == -0.1
    # The plugins see the category in the hook contract's own form, not verl's key.
    ((metrics, _step, _prefix),) = tee.metrics
    assert metrics == {
        efficiency_key("step_wall_time"): 10.0,
        efficiency_key("idle/refit_bubble"): 2.0,
    }


@pytest.mark.parametrize(
    "bad",
    [None, "7.5", float("nan"), float("inf"), [1.0, 2.0], object()],
    ids=["none", "string", "nan", "inf", "list", "object"],
)
def test_a_bad_value_from_the_trainer_costs_only_itself(bad: Any, tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    with captured_log() as log, in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": path}}, key_map="verl")
        verl_step = {"actor/kl_loss": 0.01, "actor/pg_loss": 0.25}
        logger.log_metrics({**verl_step, "critic/rewards/mean": bad}, step=1, prefix="train")
        values = _values(points(reader))
        logger.finish()
    assert "rl.reward.mean" not in values
    # Said once, naming the key the trainer logged (what the user can find in their code),
    # a None as much as a NaN or a string.
    [said] = [r.getMessage() for r in log.matching("dropped a value", logging.WARNING)]
    assert "'critic/rewards/mean'" in said and "rl.reward.mean" in said and "'verl'" in said
    (row,) = read_jsonl(path)
    assert row["metrics"]["actor/kl_loss"] == 0.01


@pytest.mark.parametrize(
    "bad",
    [None, "7.5", float("nan"), float("inf"), [1.0, 2.0], object()],
    ids=["none", "string", "nan", "inf", "list", "object"],
)
def test_a_bad_trl_value_costs_only_itself(bad: Any, tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": path}}, key_map="trl")
        logger.log_metrics({**TRL_STEP, "reward": bad}, step=1, prefix="train")
        values = _values(points(reader))
        logger.finish()
    assert "rl.reward.mean" not in values
    assert values["rl.kl.divergence"] == 0.01 and values["rl.policy.loss"] == 0.25
    (row,) = read_jsonl(path)
    assert row["metrics"]["kl"] == 0.01


def test_a_tensor_like_value_is_read_like_any_logged_value() -> None:
    numpy = pytest.importorskip("numpy")
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={}, key_map="trl")
        logger.log_metrics(
            {"kl": numpy.float32(0.5), "loss": numpy.array([0.25]), "reward": numpy.ones(3)},
            step=1,
            prefix="train",
        )
        values = _values(points(reader))
    assert values["rl.kl.divergence"] == 0.5 and values["rl.policy.loss"] == 0.25
    assert "rl.reward.mean" not in values  # three elements: not one number


def test_an_unknown_map_name_fails_early_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown key map 'nope'.*'openrlhf', 'trl', 'verl'"):
        rlmetrics.Logger(backends={}, key_map="nope")


@pytest.mark.parametrize(("given", "meant"), [("tlr", "trl"), ("Trl", "trl"), ("verll", "verl")])
def test_a_misspelt_map_name_says_the_name_meant(given: str, meant: str) -> None:
    with pytest.raises(
        ValueError, match=rf"unknown key map '{given}' \(did you mean '{meant}'\?\)"
    ):
        rlmetrics.Logger(backends={}, key_map=given)


def test_the_core_offers_its_maps_through_the_hook() -> None:
    offered = available_key_maps()
    assert {name: owner for name, (owner, _map) in offered.items()} == {
        "trl": "builtin_key_maps",
        "verl": "builtin_key_maps",
        "openrlhf": "builtin_key_maps",
    }
    assert resolve_key_map("verl") is VERL


class AcmeMaps:
    """A downstream project's plugin: a series of its own and the map of its trainer."""

    @rlmetrics.hookimpl
    def register_key_maps(self, register: Any) -> None:
        register(
            KeyMap(
                "acme",
                [
                    KeyRule("score", series="rl.reward.mean"),
                    KeyRule("judge/*/score", series="acme.judge.score", attribute="acme.judge"),
                    KeyRule("wait_s", category="idle/buffer_starvation"),
                    KeyRule("step_s", category=STEP_WALL_TIME),
                ],
            )
        )


def test_a_plugin_ships_the_map_of_its_own_trainer(tee: Tee) -> None:
    rlmetrics.declare(
        "acme",
        [
            MetricSpec(
                "acme.judge.score",
                Kind.GAUGE,
                description="one judge's score",
                attributes={"acme.judge": rlmetrics.OPEN},
            )
        ],
    )
    assert register_plugin(AcmeMaps(), "acme")
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={}, key_map="acme")
        logger.log_metrics(
            {
                "score": 0.9,
                "judge/a/score": 0.1,
                "judge/b/score": 0.2,
                "wait_s": 1.0,
                "step_s": 4.0,
            },
            step=2,
            prefix="train",
        )
        found = points(reader)
    assert _values(found)["rl.reward.mean"] == 0.9
    assert single(found, "acme.judge.score", **{"acme.judge": "a"}).value == 0.1
    assert single(found, "acme.judge.score", **{"acme.judge": "b"}).value == 0.2
    starving = {"rl.efficiency.category": "idle/buffer_starvation"}
    assert single(found, "rl.efficiency.seconds", **starving).value == 1.0
    assert single(found, "rl.efficiency.pct", **{"rl.efficiency.window": "step"}).value == 75.0


def test_a_map_onto_an_undeclared_series_warns_once_and_the_rest_lands(caplog: Any) -> None:
    key_map = KeyMap(
        "gone", [KeyRule("a", series="no.such.series"), KeyRule("b", series="rl.grad_norm")]
    )
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={}, key_map=key_map)
        for step in range(3):
            logger.log_metrics({"a": 1.0, "b": 2.0}, step=step)
        assert _values(points(reader))["rl.grad_norm"] == 2.0
    warnings = [r for r in caplog.records if "no.such.series" in r.getMessage()]
    assert len([r for r in warnings if r.levelname == "WARNING"]) == 1


# -- the rules and the maps themselves --------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"key": "a/*/b/*"}, "one '\\*'"),
        ({"key": "a", "series": "x.y", "category": "idle/validation"}, "not both"),
        ({"key": "a/*", "series": "x.y"}, "needs attribute="),
        ({"key": "a", "series": "x.y", "attribute": "k"}, "for a pattern"),
        ({"key": "a/*", "category": "idle/validation"}, "one exact key"),
        ({"key": "a", "attributes": {"k": "v"}}, "needs a series"),
        ({"key": ""}, "non-empty"),
        ({"key": "a", "series": "x.y", "attributes": {"k": 1}}, "strings to strings"),
    ],
)
def test_a_malformed_rule_fails_at_construction(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KeyRule(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"key": "val/**", "series": "rl.reward.mean"}, "backends only"),
        ({"key": "val/**", "category": "idle/refit_bubble"}, "backends only"),
        ({"key": "val/**/mean"}, "at the end"),
        ({"key": "val**"}, "at the end"),
    ],
)
def test_a_rest_pattern_is_for_backend_only_keys_at_the_end(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        KeyRule(**kwargs)
    rule = KeyRule("val/*/x/**")
    key_map = KeyMap("m", [rule])
    assert key_map.rule_for("val/a/x/b/c") == (rule, "a")
    assert key_map.rule_for("val/a/x") is None


def test_a_key_listed_twice_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="listed twice"):
        KeyMap("dup", [KeyRule("a"), KeyRule("a", series="rl.grad_norm")])


def test_an_exact_key_wins_over_a_pattern_and_a_star_is_one_segment() -> None:
    key_map = KeyMap(
        "m", [KeyRule("t/*"), KeyRule("t/step", category=STEP_WALL_TIME), KeyRule("r/*/mean")]
    )
    assert key_map.rule_for("t/step") == (key_map.rules[1], None)
    assert key_map.rule_for("t/gen") == (key_map.rules[0], "gen")
    assert key_map.rule_for("t/a/b") is None
    assert key_map.rule_for("r/fn/mean") == (key_map.rules[2], "fn")
    assert key_map.rule_for("r//mean") is None


@pytest.mark.parametrize("key_map", [TRL, VERL, OPENRLHF], ids=lambda m: m.name)
def test_the_core_maps_pass_their_own_lint(key_map: KeyMap) -> None:
    from rlmetrics.check import efficiency_categories
    from rlmetrics.plugins import get_plugins
    from rlmetrics.registry import default_registry

    assert (
        check_key_maps(
            [("core", key_map)], default_registry().declared(), efficiency_categories(get_plugins())
        )
        == []
    )


def test_the_lint_names_each_broken_target() -> None:
    from rlmetrics.check import efficiency_categories
    from rlmetrics.plugins import get_plugins
    from rlmetrics.registry import default_registry

    rlmetrics.declare(
        "lint",
        [
            MetricSpec(
                "lint.closed",
                Kind.GAUGE,
                description="d",
                attributes={"lint.kind": {"a", "b"}},
            ),
            MetricSpec("lint.seen", Kind.OBSERVABLE_GAUGE, description="d", callback=lambda: []),
        ],
    )
    key_map = KeyMap(
        "broken",
        [
            KeyRule("missing", series="no.such.series"),
            KeyRule("obs", series="lint.seen"),
            KeyRule("pat/*", series="lint.closed", attribute="lint.kind"),
            KeyRule("pat2/*", series="rl.grad_norm", attribute="nope"),
            KeyRule("fixed", series="lint.closed", attributes={"lint.kind": "c"}),
            KeyRule("cat", category="productive/made_up"),
            KeyRule("loss", series="rl.policy.loss"),
            KeyRule("pg_loss", series="rl.policy.loss"),
            KeyRule("t1", category="idle/validation"),
            KeyRule("t2", category="idle/validation"),
        ],
    )
    findings = check_key_maps(
        [("acme:maps", key_map)],
        default_registry().declared(),
        efficiency_categories(get_plugins()),
    )
    by_key = {f.attribute: f.message for f in findings}
    assert all(
        (f.rule, f.plugin, f.metric) == ("key-map", "acme:maps", "keymap:broken") for f in findings
    )
    assert "no loaded plugin declares" in by_key["missing"]
    assert "observable" in by_key["obs"]
    assert "closes 'lint.kind'" in by_key["pat/*"]
    assert "does not declare" in by_key["pat2/*"]
    assert "does not allow lint.kind='c'" in by_key["fixed"]
    assert "is no phase a plugin offers" in by_key["cat"]
    assert "also the target of key 'loss'" in by_key["pg_loss"]
    assert "also the target of key 't1'" in by_key["t2"]
    assert set(by_key) == {"missing", "obs", "pat/*", "pat2/*", "fixed", "cat", "pg_loss", "t2"}


# -- the mapping as a property --------------------------------------------------------------

_KEYS = st.sampled_from(
    [
        "loss",
        "kl",
        "reward",
        "rewards/f/mean",
        "clip_ratio/low_mean",
        "timing_s/step",
        "timing_s/update_weights",
        "timing_s/gen",
        "critic/rewards/mean",
        "other",
        "kl_penalty",
    ]
) | st.text(max_size=12)
_VALUES = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(),
    st.text(max_size=4),
    st.booleans(),
)


@given(
    key_map=st.sampled_from([TRL, VERL, OPENRLHF]),
    flat=st.dictionaries(_KEYS, _VALUES, max_size=12),
    prefix=st.sampled_from(["train", "", "eval"]),
)
def test_the_tee_is_the_dict_without_the_listed_keys_plus_the_categories(
    key_map: KeyMap, flat: dict[str, Any], prefix: str
) -> None:
    original = dict(flat)
    tee = KeyMapper(key_map).tee(flat, prefix)
    # The backends' dict is never changed.
    assert flat.keys() == original.keys() and all(flat[k] is original[k] for k in original)
    if prefix == "eval":
        assert tee is flat
        return
    expected = {k: v for k, v in flat.items() if key_map.rule_for(k) is None}
    for key, value in flat.items():
        found = key_map.rule_for(key)
        if found is not None and found[0].category is not None:
            expected[efficiency_key(found[0].category)] = value
    assert tee.keys() == expected.keys()
    assert all(tee[k] is expected[k] for k in tee)


def test_a_logged_dict_reaches_the_jsonl_exactly_as_logged(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    logger = rlmetrics.Logger(backends={"jsonl": {"path": path}}, key_map="verl")
    logger.log_metrics({"timing_s/step": 1.0, "actor/kl_loss": 0.5}, step=1)
    logger.finish()
    (line,) = [line for line in path.read_text().splitlines() if '"metrics"' in line]
    assert json.loads(line)["metrics"] == {"timing_s/step": 1.0, "actor/kl_loss": 0.5}


#: One step of TRL 1.16's RewardTrainer: transformers' keys and the reward model's scores.
REWARD_TRAINER_STEP = {
    "loss": 0.69,
    "grad_norm": 2.5,
    "learning_rate": 1e-5,
    "num_tokens": 640.0,
    "min_reward": -0.4,
    "mean_reward": 0.02,
    "max_reward": 0.5,
    "accuracy": 0.5,
    "margin": 0.01,
    "epoch": 0.5,
}


def test_a_reward_trainers_loss_is_no_policy_loss(tmp_path: Path, tee: Tee) -> None:
    """Before: the trl map made RewardTrainer's ``loss`` (the reward model's pairwise loss)
    ``rl.policy.loss``: a dashboard of the policy showed a reward model's training. No series
    means a reward model's loss (the spec names none), so beside the reward model's own keys
    it reaches the backends only; a policy trainer's ``loss`` is the policy loss as before."""
    path = tmp_path / "m.jsonl"
    with in_memory_telemetry() as (_handle, reader):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": path}}, key_map="trl")
        logger.log_metrics(REWARD_TRAINER_STEP, step=1, prefix="train")
        reward_model = _values(points(reader))
        logger.log_metrics({"loss": 0.25, "reward": 1.0}, step=2, prefix="train")
        policy = _values(points(reader))
        logger.finish()
    assert "rl.policy.loss" not in reward_model
    assert reward_model["rl.grad_norm"] == 2.5 and reward_model["rl.learning_rate"] == 1e-5
    assert policy["rl.policy.loss"] == 0.25
    assert [row["metrics"]["loss"] for row in read_jsonl(path)] == [0.69, 0.25]
    # The plugins never get the reward model's loss under the policy's key either.
    assert all("loss" not in metrics for metrics, _step, _prefix in tee.metrics)


#: Keys verl logs beside its mapped ones that its map did not list: multi-turn and tool-call
#: counts (trainer/ppo/metric_utils.py compute_data_metrics), the gradient-variance proxies
#: (compute_variance_proxy_metrics), the rollout-vs-actor probability check
#: (calculate_log_probs=True) and the rollout-correction metrics (rollout_corr/<name>).
VERL_UNLISTED = (
    *(f"num_turns/{s}" for s in ("min", "max", "mean")),
    *(f"tool_call_counts/{s}" for s in ("min", "max", "mean")),
    "variance_proxy/proxy1_signal_strength",
    "variance_proxy/expected_w",
    *(f"training/rollout_probs_diff_{s}" for s in ("valid", "max", "mean", "std")),
    "training/rollout_actor_probs_pearson_corr",
    "rollout_corr/kl",
    "rollout_corr/rollout_is_mean",
)


def test_verl_keys_beside_the_mapped_ones_are_known_to_its_map(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        rlmetrics.Logger(
            backends={"jsonl": {"path": tmp_path / "m.jsonl"}}, key_map="verl", unknown_keys="warn"
        ) as logger,
    ):
        logger.log_metrics({key: 1.0 for key in VERL_UNLISTED}, step=1)
    said = [r.getMessage() for r in caplog.records if "unknown_keys" in r.getMessage()]
    assert said == []


def test_trl_grpo_with_the_liger_loss_logs_a_key_its_map_lists(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # GRPOTrainer with use_liger_kernel=True logs one clip_ratio, not clip_ratio/<region>.
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        rlmetrics.Logger(
            backends={"jsonl": {"path": tmp_path / "m.jsonl"}}, key_map="trl", unknown_keys="warn"
        ) as logger,
    ):
        logger.log_metrics({"loss": 0.1, "clip_ratio": 0.02}, step=1, prefix="train")
    assert [r.getMessage() for r in caplog.records if "unknown_keys" in r.getMessage()] == []


#: Keys OpenRLHF's PPOTrainer status carries beside the mapped ones that its map did not list:
#: the reward function's score, the per-sample KL estimate's log-prob difference, the group
#: reward spread, the dynamic-filtering pass rate (trainer/ppo_trainer.py,
#: trainer/ppo_utils/experience_maker.py) and the episode field truncated (ppo_utils/experience.py).
OPENRLHF_UNLISTED = (
    "score",
    "logprobs_diff",
    "group_reward_std",
    "dynamic_filtering_pass_rate",
    "truncated",
)


def test_openrlhf_status_keys_beside_the_mapped_ones_are_known_to_its_map(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="rlmetrics"),
        rlmetrics.Logger(
            backends={"jsonl": {"path": tmp_path / "m.jsonl"}},
            key_map="openrlhf",
            unknown_keys="warn",
        ) as logger,
    ):
        logger.log_metrics({key: 0.5 for key in OPENRLHF_UNLISTED}, step=1, prefix="train")
    assert [r.getMessage() for r in caplog.records if "unknown_keys" in r.getMessage()] == []


def test_a_map_onto_a_misspelt_series_names_the_series_meant(caplog: Any) -> None:
    # Before: "maps 'kl' to 'rl.kl.divergance', which no loaded plugin declares", at run
    # time and in rlmetrics check alike, the right name left to be found.
    from rlmetrics.check import efficiency_categories
    from rlmetrics.plugins import get_plugins
    from rlmetrics.registry import default_registry

    key_map = KeyMap("mine", [KeyRule("kl", series="rl.kl.divergance")])
    meant = "(did you mean 'rl.kl.divergence'?)"
    [finding] = check_key_maps(
        [("acme:maps", key_map)],
        default_registry().declared(),
        efficiency_categories(get_plugins()),
    )
    assert meant in finding.message
    with in_memory_telemetry(), caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger = rlmetrics.Logger(backends={}, key_map=key_map)
        logger.log_metrics({"kl": 0.1}, step=1, prefix="train")
        logger.finish()
    assert meant in caplog.text
