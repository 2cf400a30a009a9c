"""to_wandb: values go to W&B as wandb.log takes them; None is skipped, odd objects are text."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest
from rlmetrics_wandb.values import SKIP, to_wandb


@pytest.mark.parametrize("value", [1, 2.5, True, "text", math.inf, [1, 2]])
def test_values_wandb_takes_go_through(value: object) -> None:
    assert to_wandb(value) == value


def test_nan_goes_through_and_tuples_become_lists() -> None:
    assert math.isnan(to_wandb(math.nan))
    assert to_wandb((1.0, "a")) == [1.0, "a"]


def test_none_is_skipped_but_kept_inside_a_list() -> None:
    assert to_wandb(None) is SKIP
    assert to_wandb([1, None]) == [1, None]


def test_objects_json_cannot_hold_become_text_or_floats() -> None:
    assert to_wandb(Path("/ckpt")) == "/ckpt"
    assert to_wandb(Fraction(1, 2)) == 0.5
    assert to_wandb(Decimal("1.5")) == 1.5  # the number, as every other tracker has it
    assert to_wandb(Decimal("1e400")) == "1E+400"  # no float holds it
    assert to_wandb(complex(1, 2)) == "(1+2j)"
    assert to_wandb([Path("/a"), 1]) == ["/a", 1]


def test_numpy_values_are_left_to_wandb() -> None:
    np = pytest.importorskip("numpy")
    array = np.arange(40.0)
    assert to_wandb(array) is array
    assert to_wandb(np.float32(1.5)) == np.float32(1.5)
