"""mlflow_key / KeyMap: only names MLflow accepts, never two keys on one name, idempotent."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mlflow.exceptions import MlflowException
from mlflow.utils.validation import _validate_metric, _validate_param_name, _validate_tag_name
from rlmetrics_mlflow.keys import MAX_KEY_LENGTH, KeyMap, is_valid_key, mlflow_key

# Keys as training loops build them, plus the characters and path shapes MLflow refuses.
_tricky = st.sampled_from(list("ab/._- :@#()[]=%é\0\n\t\\*")) | st.characters()
_keys = st.text(_tricky, max_size=300) | st.builds(
    "/".join,
    st.lists(st.sampled_from(["train", "", ".", "..", "loss", "acc@1", "a b"]), max_size=6),
)


def _mlflow_accepts(name: str) -> bool:
    try:
        _validate_metric(name, 1.0, 0, 0)
        _validate_param_name(name)
        _validate_tag_name(name)
    except MlflowException:
        return False
    return True


@settings(max_examples=400)
@given(_keys)
def test_every_name_is_one_mlflow_accepts(key: str) -> None:
    assert _mlflow_accepts(mlflow_key(key))


@settings(max_examples=400)
@given(_keys)
def test_valid_keys_are_kept_and_the_mapping_is_idempotent(key: str) -> None:
    if is_valid_key(key):
        assert _mlflow_accepts(key) and mlflow_key(key) == key
    elif _mlflow_accepts(key):
        # MLflow's pattern ends in "$", which also matches before a final newline; such a
        # name is the only one MLflow takes that is still cleaned (the newline is an accident).
        assert key.endswith("\n")
    assert mlflow_key(mlflow_key(key)) == mlflow_key(key)


@settings(max_examples=300)
@given(st.sets(_keys, max_size=30))
def test_distinct_keys_get_distinct_names(keys: set[str]) -> None:
    assert len({mlflow_key(key) for key in keys}) == len(keys)
    names = KeyMap()
    resolved = [names(key) for key in keys]
    assert None not in resolved and len(set(resolved)) == len(keys)


def test_cleaned_names_stay_readable_and_apart() -> None:
    assert mlflow_key("train/loss") == "train/loss"
    assert mlflow_key("vllm:prompt_tokens") == "vllm:prompt_tokens"
    at, hash_ = mlflow_key("acc@1"), mlflow_key("acc#1")
    assert at.startswith("acc_1-") and hash_.startswith("acc_1-") and at != hash_
    assert mlflow_key("/abs//path/").startswith("_/abs/_/path/_-")
    assert mlflow_key("../up").startswith("_/up-")
    assert mlflow_key("..x").startswith("_..x-")


def test_long_keys_are_cut_to_the_limit_and_kept_apart() -> None:
    a, b = "x" * 300 + "a", "x" * 300 + "b"
    assert len(mlflow_key(a)) == MAX_KEY_LENGTH
    assert mlflow_key(a) != mlflow_key(b)


def test_keymap_moves_a_key_that_spells_out_another_keys_name() -> None:
    names = KeyMap()
    dirty = names("acc@1")
    assert dirty is not None
    clean = names(dirty)  # a key literally equal to the hashed name of "acc@1"
    assert clean is not None and clean != dirty and _mlflow_accepts(clean)
    assert names("acc@1") == dirty and names(dirty) == clean


def test_the_first_renamed_key_of_each_run_is_said_and_named_as_a_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # docs/trackers.md: "The first renamed key of a run is reported once at WARNING". It was
    # once per process (a sweep's later runs said nothing), and called a hyperparameter a metric.
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        for _run in range(2):
            keys = KeyMap()
            keys("optimizer/lr@warmup")
            keys("eval/acc@1")
    said = [r.getMessage() for r in caplog.records if "is logged to MLflow as" in r.getMessage()]
    assert len(said) == 2
    assert all(m.startswith("rlmetrics-mlflow: key 'optimizer/lr@warmup'") for m in said)
