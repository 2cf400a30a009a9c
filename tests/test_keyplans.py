"""KeyPlans: what a dict's keys decide, built once per key sequence and bounded."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlmetrics.keyplans import KeyPlans
from rlmetrics.testing import reset_process_state


def test_a_sequence_is_built_once_and_looked_up_after() -> None:
    built: list[tuple[Any, ...]] = []

    def build(keys: tuple[Any, ...]) -> tuple[str, ...]:
        built.append(keys)
        return tuple(k for k in keys if k.startswith("efficiency/"))

    plans = KeyPlans(build)
    keys = ("loss", "efficiency/idle_s", "reward")
    assert plans(keys) == ("efficiency/idle_s",)
    assert plans(("loss", "efficiency/idle_s", "reward")) == ("efficiency/idle_s",)
    assert plans(("efficiency/idle_s", "loss")) == ("efficiency/idle_s",)  # another order
    assert built == [keys, ("efficiency/idle_s", "loss")]
    assert len(plans) == 2


def test_the_same_keys_in_another_order_get_their_own_plan() -> None:
    # A plan is positional (the transformers callback zips it with the keys): the table must
    # key on the order, or ('eval_loss', 'loss') would get ('loss', 'eval_loss')'s plan and
    # swap train/loss and eval/loss.
    plans = KeyPlans(lambda keys: tuple(key.startswith("eval_") for key in keys))
    assert plans(("loss", "eval_loss")) == (False, True)
    assert plans(("eval_loss", "loss")) == (True, False)
    assert plans(("loss", "eval_loss")) == (False, True)
    assert len(plans) == 2


def test_past_its_limit_the_table_starts_over() -> None:
    plans = KeyPlans(lambda keys: len(keys), limit=3)
    for n in range(3):
        plans(tuple(range(n)))
    assert len(plans) == 3
    assert plans(("new",)) == 1  # the fourth sequence: the table starts over with it
    assert len(plans) == 1


@pytest.mark.parametrize("limit", [0, -1, True, 2.5, "8"])
def test_a_limit_that_is_no_positive_int_is_refused(limit: Any) -> None:
    with pytest.raises(ValueError, match="limit must be a positive int"):
        KeyPlans(lambda keys: keys, limit=limit)


def _positional(keys: tuple[Any, ...]) -> tuple[tuple[int, Any], ...]:
    return tuple(enumerate(keys))


@given(
    st.lists(
        st.lists(st.sampled_from(["a", "b", "reward/x", "eval_loss"]), max_size=4)
        | st.permutations(["a", "b", "eval_loss"]),
    )
)
def test_every_answer_is_what_build_gives_and_the_table_stays_bounded(
    calls: list[list[str]],
) -> None:
    # An order-sensitive plan, and the same keys in several orders among the calls.
    plans = KeyPlans(_positional, limit=4)
    for keys in calls:
        assert plans(tuple(keys)) == _positional(tuple(keys))
        assert len(plans) <= 4


def test_a_reset_of_process_state_empties_every_table() -> None:
    # How full a table is decides when it starts over: a test that measures memory must not
    # depend on what the tests before it logged.
    plans = KeyPlans(len)
    plans(("a", "b"))
    assert len(plans) == 1
    reset_process_state()
    assert len(plans) == 0
    assert plans(("a", "b")) == 2
