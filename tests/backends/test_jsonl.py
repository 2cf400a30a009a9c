from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlmetrics
from rlmetrics.backends.jsonl import JsonlBackend, read_jsonl, starts_over, to_json_value
from rlmetrics.testing import run_to_exit
from rlmetrics.testing.disks import DEV_FULL, MountRefused, small_tmpfs


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
    # A crash mid-write leaves a prefix of the last line and no newline (and no end row).
    text = "".join(line for line in path.open() if '"kind": "end"' not in line)
    path.write_text(text[: len(text) - 10])
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        rows = list(read_jsonl(path))
    assert [r["metrics"]["x"] for r in rows] == [1.0]
    assert "1 unreadable line of" in caplog.text and "line 2 (a torn last line)" in caplog.text


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


def test_a_decimal_or_a_fraction_is_written_as_the_number_it_stands_for(tmp_path: Path) -> None:
    # Before, the row had "Decimal('0.5')", which no reader (rlmetrics report) takes as a number.
    path = tmp_path / "m.jsonl"
    backend = JsonlBackend(path)
    backend.log_metrics(
        {
            "lr": Decimal("0.5"),
            "third": Fraction(1, 3),
            "nan": Decimal("NaN"),
            "nested": [Decimal("1.25"), Fraction(3, 2)],
            "huge": Decimal("1e400"),  # no float holds it: its text, not "inf"
            "loss": math.nan,  # forces the row through the value-by-value conversion
        },
        step=1,
        prefix="",
    )
    backend.finish()
    [row] = read_jsonl(path)
    assert row["metrics"] == {
        "lr": 0.5,
        "third": 1 / 3,
        "nan": "nan",
        "nested": [1.25, 1.5],
        "huge": "1E+400",
        "loss": "nan",
    }


@settings(max_examples=200)
@given(
    st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(), st.binary()),
        lambda children: st.lists(children, max_size=3) | st.tuples(children, children),
        max_leaves=10,
    )
)
def test_to_json_value_always_serialises(value: Any) -> None:
    json.dumps(to_json_value(value), allow_nan=False)


# -- hardening ---------------------------------------------------------------------------------


class _ItemRaises:
    @property
    def item(self) -> Any:
        raise RuntimeError("item")

    def __repr__(self) -> str:
        return "<item raises>"


def test_a_value_json_cannot_hold_costs_only_itself(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    backend = JsonlBackend(path)
    backend.log_metrics(
        {"loss": 0.5, "big": 10**5000, "odd": _ItemRaises(), "fine": 2**70}, 1, "train"
    )
    backend.finish()
    [row] = read_jsonl(path)
    assert row["metrics"] == {
        "loss": 0.5,
        "big": "<int of 5001 digits>",  # the documented marker: JSON readers refuse such ints
        "odd": "<item raises>",
        "fine": 2**70,
    }


def test_read_jsonl_skips_a_line_it_cannot_parse_and_reads_on(tmp_path: Path, caplog: Any) -> None:
    path = tmp_path / "m.jsonl"
    good = json.dumps({"step": 1, "prefix": "", "metrics": {"x": 1}})
    path.write_text(
        good + "\n" + "[" * 100_000 + "\n" + '{"step": ' + "9" * 5000 + "}\n" + good + "\n"
    )
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        rows = list(read_jsonl(path))
    assert [r["step"] for r in rows] == [1, 1]
    # One warning for the file, naming each bad line and why.
    [record] = caplog.records
    assert "2 unreadable lines" in record.message
    assert "line 2 (not JSON), line 3 (not JSON)" in record.message


def test_a_row_appended_after_a_torn_line_is_not_lost(tmp_path: Path, caplog: Any) -> None:
    path = tmp_path / "m.jsonl"
    first = JsonlBackend(path)
    first.log_metrics({"x": 1.0}, 1, "train")
    first.finish()
    with path.open("a") as handle:  # a kill -9 mid-write leaves a prefix and no newline
        handle.write('{"time": 1.0, "step": 2, "pre')
    restarted = JsonlBackend(path)
    restarted.log_metrics({"x": 3.0}, 3, "train")
    restarted.finish()
    assert [r["step"] for r in read_jsonl(path)] == [1, 3]
    # Said by its line when the file is continued: once closed off by a newline, readers
    # can only call it "not JSON", and the restart was silent about what it found.
    said = [r.getMessage() for r in caplog.records if "torn" in r.getMessage()]
    assert len(said) == 1 and f"{path} ends in a torn line 3" in said[0], caplog.text  # 2: end


def test_a_row_is_on_disk_when_log_metrics_returns(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    backend = JsonlBackend(path)
    backend.log_metrics({"x": 1.0}, 1, "train")
    # Read through another handle, before finish(): the row is in the file, not a buffer.
    assert [r["metrics"] for r in read_jsonl(path)] == [{"x": 1.0}]
    backend.finish()


def test_rows_survive_the_writer_being_killed(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    script = (
        "import sys, time\n"
        "from rlmetrics.backends.jsonl import JsonlBackend\n"
        "backend = JsonlBackend(sys.argv[1])\n"
        "for step in range(3):\n"
        "    backend.log_metrics({'x': float(step)}, step, 'train')\n"
        "    print('logged', step, flush=True)\n"
        "time.sleep(600)\n"  # killed long before: finish() never runs
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        for step in range(3):
            assert child.stdout.readline().split() == ["logged", str(step)]
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(10)
    assert [r["step"] for r in read_jsonl(path)] == [0, 1, 2]


def test_every_row_carries_the_run_id_and_a_resumed_run_marks_where_it_continues(
    tmp_path: Path,
) -> None:
    from rlmetrics.identity import RunIdentity

    path = tmp_path / "m.jsonl"
    first = JsonlBackend(path, identity=RunIdentity("run-a"))
    first.log_hyperparams({"lr": 1e-6, "model": {"layers": [28]}})
    first.log_metrics({"x": 1}, step=1, prefix="train")
    first.finish()
    again = JsonlBackend(path, identity=RunIdentity("run-a", resume=True))
    again.log_metrics({"x": 2}, step=2, prefix="train")
    again.finish()

    rows = list(read_jsonl(path, every_row=True))
    assert {row["run_id"] for row in rows} == {"run-a"}
    assert [row.get("kind") for row in rows] == ["hyperparams", None, "end", "resume", None, "end"]
    assert rows[0]["hyperparams"] == {"lr": 1e-6, "model": {"layers": [28]}}
    assert [row["step"] for row in rows if "metrics" in row] == [1, 2]


_ATTEMPT_SCRIPT = """
import sys
import rlmetrics

path, run_id, resume, steps = sys.argv[1:5]
logger = rlmetrics.Logger(
    backends={"jsonl": {"path": path}}, run_id=run_id, resume=resume == "resume"
)
for step in map(int, steps.split(",")):
    logger.log_metrics({"reward": float(step)}, step=step, prefix="train")
logger.finish()
"""


def _attempt(path: Path, run_id: str, steps: str, resume: str = "new") -> None:
    """One process logging ``steps`` to ``path`` under ``run_id``: a script's run."""
    status, err = run_to_exit(_ATTEMPT_SCRIPT, (str(path), run_id, resume, steps), timeout_s=120)
    assert status == 0, err


def test_a_run_started_again_without_resume_marks_a_new_attempt(tmp_path: Path) -> None:
    # Its rows followed the earlier attempt's under the same id, which every reader took for
    # one run (a resumed one): steps 0, 10, 20 then 0..4 read as 0..4, 10, 20.
    path = tmp_path / "m.jsonl"
    _attempt(path, "grpo-1", "0,10,20")
    _attempt(path, "other", "0")  # another run in the same file: no attempt of grpo-1
    _attempt(path, "grpo-1", "0,1,2")
    _attempt(path, "grpo-1", "3", resume="resume")  # continues the attempt: no new one
    rows = list(read_jsonl(path, every_row=True))
    marks = [(r["run_id"], r.get("kind") or r["step"]) for r in rows]
    assert marks == [
        ("grpo-1", 0), ("grpo-1", 10), ("grpo-1", 20), ("grpo-1", "end"),
        ("other", 0), ("other", "end"),
        ("grpo-1", "rerun"), ("grpo-1", 0), ("grpo-1", 1), ("grpo-1", 2), ("grpo-1", "end"),
        ("grpo-1", "resume"), ("grpo-1", 3), ("grpo-1", "end"),
    ]  # fmt: skip
    assert [starts_over(r) for r in rows].count(True) == 1


def test_a_second_logger_of_the_same_run_and_file_in_one_process_is_no_new_attempt(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.jsonl"
    train = rlmetrics.Logger(backends={"jsonl": {"path": path}}, run_id="grpo-1")
    train.log_metrics({"reward": 1.0}, step=0, prefix="train")
    evaluation = rlmetrics.Logger(backends={"jsonl": {"path": path}}, run_id="grpo-1")
    evaluation.log_metrics({"reward": 0.5}, step=0, prefix="eval")
    train.finish()
    evaluation.finish()
    assert not any(starts_over(r) for r in read_jsonl(path, every_row=True))
    assert [r["prefix"] for r in read_jsonl(path)] == ["train", "eval"]


def test_the_run_id_is_found_across_the_scan_s_chunks(tmp_path: Path) -> None:
    from rlmetrics.backends.jsonl import _holds_run

    path = tmp_path / "m.jsonl"
    row = json.dumps({"run_id": "grpo-\u00e9"})  # as json writes it: escaped
    for cut in (0, 3, len(row) - 3):
        path.write_text(" " * ((1 << 20) - cut) + row + "\n")
        assert _holds_run(path, "grpo-\u00e9"), cut
        assert not _holds_run(path, "grpo-"), cut


def test_samples_go_to_a_file_beside_the_metrics(tmp_path: Path) -> None:
    from rlmetrics.backends.jsonl import samples_path
    from rlmetrics.identity import RunIdentity

    path = tmp_path / "m.jsonl"
    backend = JsonlBackend(path, identity=RunIdentity("run-b"))
    backend.log_samples([{"prompt": "p", "completion": "c", "reward": math.nan}], 3, "samples")
    backend.log_metrics({"x": 1}, step=3, prefix="train")
    backend.finish()

    assert samples_path(path) == tmp_path / "m.samples.jsonl"
    (sample,) = read_jsonl(samples_path(path))
    assert sample["run_id"] == "run-b" and sample["step"] == 3 and sample["name"] == "samples"
    assert sample["sample"] == {"prompt": "p", "completion": "c", "reward": "nan"}
    assert [row["metrics"] for row in read_jsonl(path)] == [{"x": 1}]


@pytest.mark.parametrize("kind", ["device", "fifo", "directory"])
def test_read_jsonl_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    """/dev/full reads zeros forever and a FIFO blocks until a writer comes: either would stall
    the reader. Each is refused at once, naming the path."""
    if kind == "device":
        path = Path("/dev/full")
    elif kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
    else:
        path = tmp_path
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            list(read_jsonl(path))
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)  # a liveness bound: a reader still going then is stuck
    assert not reader.is_alive(), f"read_jsonl({path}) did not return"
    [error] = outcome
    assert isinstance(error, ValueError) and "not a regular file" in str(error)
    assert str(path) in str(error)


@pytest.mark.parametrize("where", ["directory", "under-a-file"])
def test_a_jsonl_path_that_cannot_be_written_is_one_line_naming_it_and_the_remedy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    import rlmetrics

    if where == "directory":
        path = tmp_path
    else:
        (tmp_path / "file").write_text("")
        path = tmp_path / "file" / "m.jsonl"
    with caplog.at_level(logging.DEBUG, logger="rlmetrics"):
        logger = rlmetrics.Logger(backends={"jsonl": {"path": path}})
    assert logger.backends == {}
    [warning] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.exc_info is None  # no traceback on the user's stderr
    message = warning.getMessage()
    assert str(path) in message and "choose a writable file path" in message
    # The traceback stays recoverable at DEBUG.
    assert any(r.exc_info for r in caplog.records if r.levelno == logging.DEBUG)


# -- a full disk: one line per cause, mid-run and at finish, never a traceback ---------------


def _full_disk_paths(tmp_path: Path) -> Iterator[Path]:
    """``/dev/full``, then a file on a 64 KB tmpfs the test fills (skipped where mounting is
    not permitted; CI runs as root)."""
    yield DEV_FULL
    try:
        with small_tmpfs(tmp_path / "disk") as disk:
            filler = disk / "filler"
            with contextlib.suppress(OSError), filler.open("wb") as handle:
                handle.write(b"x" * (1 << 20))  # the disk is full once this fails
            yield disk / "metrics.jsonl"
    except MountRefused as refused:
        pytest.skip(str(refused))


@pytest.mark.parametrize("where", ["dev-full", "tmpfs"])
def test_a_full_disk_is_one_line_at_each_call_and_at_finish(
    where: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows a full disk refuses are counted and said in one line naming the error, and so is
    the close at ``finish()`` (which flushes what the disk refused): no traceback anywhere."""
    paths = _full_disk_paths(tmp_path)
    path = next(paths) if where == "dev-full" else next(itertools.islice(paths, 1, None))
    try:
        with caplog.at_level(logging.DEBUG, logger="rlmetrics"):
            logger = rlmetrics.Logger(backends={"jsonl": {"path": path}})
            for step in range(3):
                logger.log_metrics({"loss": 1.0}, step=step)
            logger.finish()
    finally:
        paths.close()
    said = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert all(r.exc_info is None for r in said), caplog.text  # tracebacks at DEBUG only
    assert "No space left on device" in said[0].getMessage()
    assert any(
        "failed to finish" in r.getMessage() and "No space left" in r.getMessage() for r in said
    ), caplog.text
    assert any("3 of 3 rows failed to write" in r.getMessage() for r in said), caplog.text


def test_a_config_s_list_of_dicts_stays_dicts_when_another_value_is_not_json(
    tmp_path: Path,
) -> None:
    # One value JSON refuses as it is (an unbounded clip, inf) makes the row go through the
    # value-by-value conversion; the list of tables beside it is still a list of tables.
    config = {
        "max_grad_norm": math.inf,
        "reward_functions": [{"name": "accuracy", "weight": 1.0}, {"name": "format", "w": [1]}],
    }
    with rlmetrics.Logger(backends={"jsonl": {"path": tmp_path / "m.jsonl"}}) as logger:
        logger.log_hyperparams(config)
    [row, end] = list(read_jsonl(tmp_path / "m.jsonl", every_row=True))
    assert end["kind"] == "end"
    assert row["hyperparams"] == {
        "max_grad_norm": "inf",
        "reward_functions": [{"name": "accuracy", "weight": 1.0}, {"name": "format", "w": [1]}],
    }


def test_a_list_holding_a_dict_that_holds_itself_is_written_at_once(tmp_path: Path) -> None:
    # The value-by-value conversion enters dicts inside lists; one holding itself twice would
    # double at every level without a cycle check (2 ** 32 visits at the nesting bound).
    looped: dict[str, Any] = {"n": 1}
    looped["self"] = looped
    looped["again"] = looped
    backend = JsonlBackend(tmp_path / "m.jsonl")
    backend.log_metrics({"bad": math.nan, "rows": [looped]}, step=1, prefix="train")
    backend.finish()
    [row] = read_jsonl(tmp_path / "m.jsonl")
    [table] = row["metrics"]["rows"]
    assert table["n"] == 1 and table["self"] == table["again"] == "..."
