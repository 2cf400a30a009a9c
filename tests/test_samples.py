"""to_samples: sample rows bounded (rows per call, bytes per cell) and made plain at the call;
bad input said once, the rest kept."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tensor_like import Tensor

from rlmetrics.samples import (
    MAX_SAMPLE_COLUMNS,
    columns_of,
    cut_text,
    markdown_table,
    to_samples,
)


def test_rows_become_plain_and_the_first_columns_lead() -> None:
    np = pytest.importorskip("numpy")
    rows = to_samples(
        [
            {"id": 7, "completion": "4", "prompt": "2+2?", "reward": np.float64(1.0)},
            {"prompt": "1+1?", "completion": "3", "reward": 0.0, "judge": None},
        ]
    )
    assert rows == [
        {"id": 7, "completion": "4", "prompt": "2+2?", "reward": 1.0},
        {"prompt": "1+1?", "completion": "3", "reward": 0.0, "judge": None},
    ]
    assert columns_of(rows) == ["prompt", "completion", "reward", "id", "judge"]


def test_rows_past_the_bound_are_dropped_and_said_once(caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        rows = to_samples([{"i": i} for i in range(10)], max_rows=4)
        to_samples([{"i": i} for i in range(10)], max_rows=4)
    assert [r["i"] for r in rows] == [0, 1, 2, 3]
    assert caplog.text.count("log_samples got 10 rows; the first 4") == 1


def test_a_ten_megabyte_completion_is_cut_to_the_cell_bound(caplog: Any) -> None:
    huge = "é" * 5_000_000  # 10 MB of UTF-8
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        (row,) = to_samples([{"prompt": "p", "completion": huge, "reward": 1}], max_cell_bytes=99)
    assert row["prompt"] == "p" and row["reward"] == 1
    assert row["completion"] == "é" * 49  # cut on a character boundary
    assert "cut to it" in caplog.text


@pytest.mark.parametrize("rows", [{"prompt": "p"}, "text", None, 3, (r for r in [{}])])
def test_rows_that_are_not_a_list_are_said_and_nothing_logged(rows: Any, caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        assert to_samples(rows) == []
    assert "log_samples takes a list of dicts" in caplog.text


def test_a_row_that_is_not_a_dict_costs_only_itself(caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        rows = to_samples([{"a": 1}, "oops", {"a": 2}])
    assert rows == [{"a": 1}, {"a": 2}]
    assert "1 sample row(s) were not dicts" in caplog.text


def test_odd_values_become_text_and_columns_are_bounded() -> None:
    (row,) = to_samples([{("k", 1): object, **{f"c{i}": i for i in range(100)}}])
    assert row["('k', 1)"] == "<class 'object'>"
    assert len(row) == MAX_SAMPLE_COLUMNS


def test_markdown_keeps_each_completion_in_its_cell() -> None:
    table = markdown_table([{"prompt": "a|b", "completion": "x\ny\\"}], ["prompt", "completion"])
    assert table.splitlines() == [
        "| prompt | completion |",
        "|---|---|",
        "| a\\|b | x<br>y\\\\ |",
    ]


@given(st.text(), st.integers(min_value=1, max_value=64))
def test_cut_text_is_a_prefix_within_the_bound(text: str, max_bytes: int) -> None:
    cut, was_cut = cut_text(text, max_bytes)
    assert text.startswith(cut)
    assert len(cut.encode("utf-8", "surrogatepass")) <= max_bytes
    assert was_cut == (cut != text)


_cells = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=300),
    st.builds(object),
    st.lists(st.integers(), max_size=3),
)


@given(
    st.lists(st.dictionaries(st.text(max_size=6), _cells, max_size=5) | _cells, max_size=12),
    st.integers(min_value=1, max_value=8),
    st.integers(min_value=1, max_value=64),
)
def test_any_rows_come_out_bounded_and_plain(rows: list[Any], max_rows: int, cell: int) -> None:
    import json

    out = to_samples(rows, max_rows=max_rows, max_cell_bytes=cell)
    assert len(out) <= max_rows
    assert len(out) == sum(isinstance(row, dict) for row in rows[:max_rows])
    for row in out:
        for value in row.values():
            assert value is None or isinstance(value, (bool, int, float, str))
            if isinstance(value, str):
                assert len(value.encode("utf-8", "surrogatepass")) <= cell
    json.dumps(out)


def test_a_cell_no_tracker_can_store_is_replaced_alone_and_said_once(caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        rows = to_samples(
            [
                {"prompt": "p\ud800", "completion": 10**5000, "reward": 1.0},
                {"prompt": "q", "completion": "fine", "reward": 2.0, "col\udcff": "x"},
            ]
        )
    assert rows == [
        {"prompt": "p\\ud800", "completion": "<int of 5001 digits>", "reward": 1.0},
        {"prompt": "q", "completion": "fine", "reward": 2.0, "col\\udcff": "x"},
    ]
    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "3 sample cell(s)" in warning.getMessage()


@pytest.mark.parametrize("n", [10, 1_000_000])
def test_a_long_array_cell_converts_only_what_its_cut_text_shows(n: int) -> None:
    """Before: a cell holding a long array or tensor (per-token logprobs) was converted whole
    (``tolist`` of every element, then its full text) to keep 32 KB of it: seconds and
    hundreds of MB on the loop's thread for 10^7 elements. Now only as many elements as the
    cut text can show are converted; the cell's text is the same."""
    converted: list[int] = []
    [row] = to_samples([{"logprobs": Tensor(n, converted)}], max_cell_bytes=1000)
    assert row["logprobs"] == str([0.5] * n)[:1000]
    assert max(converted) <= 1000
    [row] = to_samples([{"ids": list(range(n))}], max_cell_bytes=1000)
    assert row["ids"] == str(list(range(n)))[:1000]


def test_two_columns_with_one_name_keep_both_values_said_once(caplog: Any) -> None:
    """Before: a row with keys 1 and "1" (both the column "1") kept the second value, the
    first dropped unsaid. Now the later one is its own column, its name suffixed, said."""
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        [row] = to_samples([{1: "int key", "1": "str key"}])
    assert sorted(row.values()) == ["int key", "str key"]
    assert "column" in caplog.text


def test_a_cell_whose_dict_holds_itself_twice_is_logged_at_once() -> None:
    # {"self": d, "again": d}: walked for nested secrets without a cycle check, each level
    # doubled (2**32 visits at the depth bound); str() itself prints {...} for it.
    looped: dict[str, Any] = {"api_key": "sk-1", "x": 1}
    looped["self"] = looped
    looped["again"] = looped
    shared = [{"token": "t", "n": 1}] * 50
    wide: dict[str, Any] = {"a": shared, "b": shared}
    for _ in range(6):  # each level refers to the one below twice: 2**6 copies of it
        wide = {"left": wide, "right": wide}
    [row] = to_samples([{"prompt": "p", "looped": looped, "wide": wide}], max_cell_bytes=4096)
    assert "sk-1" not in row["looped"] and "<redacted>" in row["looped"]
    assert "'t'" not in row["wide"] and len(row["wide"].encode()) <= 4096
