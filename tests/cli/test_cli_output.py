"""``print_json``: the JSON the commands print, strict (a number past float's range printed
as null and named once), and written a part at a time, so a long run's ``report --json`` is
never held as one string beside a copy of its steps."""

from __future__ import annotations

import io
import json
import math
import tracemalloc
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlmetrics.cli._output import _finite, print_json

_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and the infinities included: printed as null
    st.text(max_size=5),
)
_values = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
    ),
    max_leaves=30,
)


def _printed(value: Any, indent: int | None) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdout", out)
        patch.setattr("sys.stderr", err)
        print_json(value, "cmd", indent=indent)
    return out.getvalue(), err.getvalue()


@given(_values, st.sampled_from([2, None]))
def test_the_json_printed_a_part_at_a_time_is_the_json_of_the_whole(
    value: Any, indent: int | None
) -> None:
    past: list[str] = []
    expected = json.dumps(_finite(value, "", past), indent=indent) + "\n"
    out, err = _printed(value, indent)
    assert out == expected
    assert json.loads(out) == json.loads(expected)
    assert bool(err) == bool(past)
    if past:
        assert err.startswith(f"cmd: {len(past)} values past float's range printed as null: ")


def test_a_long_list_of_steps_is_printed_without_holding_it_twice() -> None:
    """Before: the whole answer was copied (non-finite floats replaced) and then made one
    string: a report of 10^5 steps held its steps three times. Measured by tracemalloc (not
    timed): the peak stays a small part of what is printed."""
    steps = [
        {"step": n, "wall_time_s": 1.0 + n, "idle_s": {"idle/a": 0.5, "idle/b": 0.25 * n}}
        for n in range(5000)
    ]
    steps[-1]["idle_s"]["idle/b"] = math.inf  # printed as null, named
    answer = {"source": "m.jsonl", "steps": steps, "goodput": {"pct": 50.0}}

    class Counted:
        """A stdout that keeps only how much was written to it."""

        written = 0

        def write(self, text: str) -> int:
            self.written += len(text)
            return len(text)

        def flush(self) -> None:
            pass

    sink = Counted()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdout", sink)
        patch.setattr("sys.stderr", io.StringIO())
        tracemalloc.start()
        try:
            print_json(answer, "cmd")
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert sink.written > 500_000
    assert peak < sink.written / 4, (peak, sink.written)


@pytest.mark.parametrize("indent", [2, None])
def test_long_lists_deep_in_the_answer_are_printed_as_json_dumps_prints_them(
    indent: int | None,
) -> None:
    steps = [{"step": n, "v": [1.5, math.nan], 7: {"x": n}} for n in range(300)]
    value = {"runs": [{"steps": steps, "run_id": "a"}, {"steps": [], "run_id": None}], "x": ()}
    past: list[str] = []
    expected = json.dumps(_finite(value, "", past), indent=indent) + "\n"
    out, err = _printed(value, indent)
    assert out == expected
    assert err.startswith("cmd: 300 values past float's range printed as null: ")
    assert "runs[0].steps[0].v[1]" in err


@given(st.integers(-(10**6), 10**6), st.sampled_from(["", "http://", "https://"]))
def test_a_prometheus_address_names_its_own_port_or_is_refused(port: int, scheme: str) -> None:
    """Before: ``--prometheus 127.0.0.1:99999`` was taken, and urllib asked port 34463
    (99999 mod 65536): ``query`` and ``dashboard`` read whatever server listened there, or
    said 'Connection refused' about a port that cannot exist. A port outside 1-65535 is now
    a usage mistake (exit 2), as ``stack --run`` already said it."""
    import argparse
    from urllib.parse import urlsplit

    from rlmetrics.cli._output import prometheus_url

    given = f"{scheme}127.0.0.1:{port}"
    if 1 <= port <= 65535:
        assert urlsplit(prometheus_url(given)).port == port
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="port"):
            prometheus_url(given)


def test_the_commands_refuse_a_port_that_cannot_exist(tmp_path: Any) -> None:
    import subprocess
    import sys
    from pathlib import Path

    rlmetrics = str(Path(sys.executable).with_name("rlmetrics"))
    jsonl = tmp_path / "m.jsonl"
    row = {"time": 1.0, "run_id": "r", "step": 1, "prefix": "train", "metrics": {"reward": 1}}
    jsonl.write_text(json.dumps(row) + "\n")
    for args in (["query", str(jsonl)], ["dashboard"]):
        done = subprocess.run(
            [rlmetrics, *args, "--prometheus", "127.0.0.1:99999"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, (args, done.stderr)
        assert "99999" in done.stderr and "port" in done.stderr
