from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rlmetrics.backends.jsonl import JsonlBackend, read_jsonl, to_json_value


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "run" / "metrics.jsonl"
    backend = JsonlBackend(path)
    backend.log_metrics({"loss": 0.5, "reward": 1}, step=1, prefix="train")
    backend.log_metrics({"policy_init_time_s": 3.0}, step=0, prefix="timing/setup")
    backend.finish()
    rows = list(read_jsonl(path))
    assert [(r["step"], r["prefix"], r["metrics"]) for r in rows] == [
        (1, "train", {"loss": 0.5, "reward": 1}),
        (0, "timing/setup", {"policy_init_time_s": 3.0}),
    ]
    assert all(isinstance(r["time"], float) for r in rows)


def test_appends_across_backends(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    for step in (1, 2):
        backend = JsonlBackend(path)
        backend.log_metrics({"x": step}, step=step, prefix="")
        backend.finish()
    assert [r["step"] for r in read_jsonl(path)] == [1, 2]


def test_torn_last_line_is_skipped_with_a_warning(tmp_path: Path, caplog: Any) -> None:
    path = tmp_path / "m.jsonl"
    backend = JsonlBackend(path)
    backend.log_metrics({"x": 1.0}, step=1, prefix="train")
    backend.log_metrics({"x": 2.0}, step=2, prefix="train")
    backend.finish()
    # A crash mid-write leaves a prefix of the last line and no newline.
    text = path.read_text()
    path.write_text(text[: len(text) - 10])
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        rows = list(read_jsonl(path))
    assert [r["metrics"]["x"] for r in rows] == [1.0]
    assert "torn last line 2" in caplog.text


def test_non_json_values_are_written_as_repr(tmp_path: Path) -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    class Scalar:
        def item(self) -> float:
            return 2.5

    path = tmp_path / "m.jsonl"
    backend = JsonlBackend(path)
    backend.log_metrics(
        {
            "nan": math.nan,
            "inf": -math.inf,
            "obj": Opaque(),
            "s": Scalar(),
            "lst": [1, math.nan],
            "b": True,
            "none": None,
            "text": "hi",
        },
        step=1,
        prefix="",
    )
    backend.finish()
    [row] = read_jsonl(path)
    assert row["metrics"] == {
        "nan": "nan",
        "inf": "-inf",
        "obj": "<opaque>",
        "s": 2.5,
        "lst": [1, "nan"],
        "b": True,
        "none": None,
        "text": "hi",
    }


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(), st.binary()),
        lambda children: st.lists(children, max_size=3) | st.tuples(children, children),
        max_leaves=10,
    )
)
def test_to_json_value_always_serialises(value: Any) -> None:
    json.dumps(to_json_value(value), allow_nan=False)
