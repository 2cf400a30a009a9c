"""to_hyperparams: any configuration a training script keeps, as one nested dict of JSON
values, taken at the call; bad input said once, nothing else lost."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import logging
import math
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tensor_like import Tensor

from rlmetrics.hyperparams import MAX_HYPERPARAMS, flat_hyperparams, to_hyperparams


class Precision(enum.Enum):
    BF16 = "bf16"


@dataclasses.dataclass
class Optimizer:
    lr: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.99)


@attrs.define
class Config:
    optimizer: Optimizer = attrs.Factory(Optimizer)
    precision: Precision = Precision.BF16
    seeds: list[int] = attrs.Factory(lambda: [1, 2])
    name: str = "grpo"


def test_nested_dataclasses_attrs_classes_namespaces_and_enums() -> None:
    params = to_hyperparams(
        {"run": Config(), "cli": argparse.Namespace(steps=10, resume=None), "k": Precision.BF16}
    )
    assert params == {
        "run": {
            "optimizer": {"lr": 1e-6, "betas": [0.9, 0.99]},
            "precision": "bf16",
            "seeds": [1, 2],
            "name": "grpo",
        },
        "cli": {"steps": 10, "resume": None},
        "k": "bf16",
    }
    assert flat_hyperparams(params)["run/optimizer/lr"] == 1e-6


def test_a_config_object_itself_and_numpy_values() -> None:
    np = pytest.importorskip("numpy")
    assert to_hyperparams(Optimizer(lr=np.float32(0.5))) == {"lr": 0.5, "betas": [0.9, 0.99]}
    assert to_hyperparams({"shape": np.arange(3)}) == {"shape": [0, 1, 2]}


def test_omegaconf_configs_are_resolved() -> None:
    omegaconf = pytest.importorskip("omegaconf")
    config = omegaconf.OmegaConf.create(
        {"lr": 1e-6, "warmup": "${lr}", "model": {"layers": [28, 28]}, "missing": "???"}
    )
    assert to_hyperparams({"cfg": config}) == {
        "cfg": {"lr": 1e-6, "warmup": 1e-6, "model": {"layers": [28, 28]}, "missing": "???"}
    }


def test_values_trackers_cannot_store_become_text_said_once(caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        params = to_hyperparams({"path": Path("/ckpt"), "fn": len, "ok": 1, "nan": math.nan})
    assert params["path"] == "/ckpt" and params["fn"] == "<built-in function len>"
    assert params["ok"] == 1 and math.isnan(params["nan"])
    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "logged as its text" in warning.getMessage()


def test_a_cycle_is_cut_and_the_rest_kept() -> None:
    config: dict[str, Any] = {"a": 1}
    config["self"] = config
    assert to_hyperparams(config) == {"a": 1, "self": None}


def test_past_the_cap_the_first_values_are_kept_and_the_cut_said(caplog: Any) -> None:
    config = {f"k{i}": i for i in range(10**5)}
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        params = to_hyperparams(config)
    assert len(params) == MAX_HYPERPARAMS and params["k0"] == 0
    assert f"more than {MAX_HYPERPARAMS} values" in caplog.text


@pytest.mark.parametrize("config", [None, 3, "lr=1", [1, 2]])
def test_what_is_not_a_config_is_said_and_stands_for_nothing(config: Any, caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        assert to_hyperparams(config) == {}
    assert "log_hyperparams takes a dict" in caplog.text


def test_a_mapping_that_raises_costs_only_that_entry() -> None:
    class Broken(dict):  # type: ignore[type-arg]
        def __getitem__(self, key: Any) -> Any:
            if key == "bad":
                raise KeyError(key)
            return super().__getitem__(key)

    broken = Broken(good=1, bad=2)
    assert to_hyperparams({"b": broken}) == {"b": {"good": 1}}


_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.builds(object),
    st.builds(Path, st.text(max_size=5)),
)
_configs = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.one_of(st.text(max_size=8), st.integers()), inner, max_size=4)
    ),
    max_leaves=30,
)


@given(st.dictionaries(st.text(max_size=8), _configs, max_size=6))
def test_any_config_becomes_json(config: dict[str, Any]) -> None:
    params = to_hyperparams(config)
    json.dumps(params)  # NaN and infinities are JSON to Python's encoder; nothing else odd
    assert set(params) == set(config)


def test_an_array_counts_as_one_value_and_the_later_keys_stay(caplog: Any) -> None:
    np = pytest.importorskip("numpy")
    config = {"weights": np.arange(10**5), "lr": 1e-6, "seeds": list(range(20_000)), "n": 8}
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        params = to_hyperparams(config)
    assert params["lr"] == 1e-6 and params["n"] == 8
    assert params["weights"] == list(range(MAX_HYPERPARAMS))  # one value, cut to the cap
    assert params["seeds"] == list(range(MAX_HYPERPARAMS))
    assert "values; the first" not in caplog.text  # four values: no key dropped
    assert caplog.text.count("elements") == 1  # the cut lists: said once


def test_text_no_tracker_can_store_costs_only_itself(caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        params = to_hyperparams(
            {"bad\ud800": "a\udcffb", "seed": 10**5000, "lr": 0.5, "l": ["x\ud800", 2**70]}
        )
    assert params == {
        "bad\\ud800": "a\\udcffb",
        "seed": "<int of 5001 digits>",
        "lr": 0.5,
        "l": ["x\\ud800", 2**70],
    }
    json.dumps(params).encode("utf-8")
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1


def test_a_huge_array_converts_only_the_elements_it_keeps(caplog: Any) -> None:
    """Before: an array of 10^7 values in a config was converted whole (1.5 s, hundreds of
    MB) to keep its first 10,000. Now only those (and one more, to know it was cut)."""
    converted: list[int] = []
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        params = to_hyperparams({"embedding": Tensor(10**6, converted)})
    assert params["embedding"] == [0.5] * MAX_HYPERPARAMS
    assert max(converted) <= MAX_HYPERPARAMS + 1
    assert f"more than {MAX_HYPERPARAMS} elements" in caplog.text


# -- a set's order is no part of the configuration -----------------------------------------------


_SET_ITEMS = st.lists(
    st.one_of(st.integers(-20, 20), st.text(max_size=3), st.floats(), st.none(), st.booleans()),
    unique_by=lambda item: "nan" if item != item else item,  # no two a set would merge
    max_size=8,
)


@given(_SET_ITEMS)
def test_a_set_is_the_same_hyperparameter_whatever_order_it_was_built_in(items: list[Any]) -> None:
    """A set iterates in an order its insertion order and the process's string hashing decide
    (``set([8, 0])`` iterates 8, 0 and ``set([0, 8])`` 0, 8; a set of names differs between
    two runs of one script). Before, it was logged as a list in that order, so one
    configuration read as two: an adapter logged it again, and a resumed run's MLflow params
    "already had another value". Now a set's elements are in one order (numbers by value)."""
    built, reversed_ = set(items), set(reversed(items))  # (equal items merge alike both ways)
    params = to_hyperparams({"tags": built, "frozen": frozenset(built)})
    assert params == to_hyperparams({"tags": reversed_, "frozen": frozenset(reversed_)})
    assert params["tags"] == params["frozen"]


def test_a_sets_numbers_are_in_order_and_a_set_of_tuples_too() -> None:
    assert to_hyperparams({"ids": {8, 0, 3}, "pairs": {(8, 0), (0, 8)}}) == {
        "ids": [0, 3, 8],
        "pairs": [[0, 8], [8, 0]],
    }
