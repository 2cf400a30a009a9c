"""``rlmetrics query``: a run's state as JSON, held to the schema shipped in docs/, equal to what
the run's files hold; exit codes a script can test; bad input is a clear answer."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import socket
import statistics
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import jsonschema
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from stack_support import Run, Stack
from tools_support import not_run_files, run_cli, write_long_run
from whole_file_reference import jsonl_files, whole_file_state

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.demo.run import DemoOptions, run_demo
from rlmetrics.families.liveness import is_trainer_step
from rlmetrics.liveness import MEDIAN_WINDOW, StallRule
from rlmetrics.runstate import QueryError, run_state, select
from rlmetrics.testing import isolated_state, wait_until

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "docs" / "schemas" / "query.schema.json").read_text()
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A seeded demo run's folder: metrics.jsonl and traces.jsonl."""
    output = tmp_path_factory.mktemp("query-demo")
    options = DemoOptions(steps=12, seed=5, output=output, interval_s=0.0, prometheus_port=0)
    # A module's fixture runs outside each test's isolated_state: the demo activates families
    # (Gym's rollouts) in the process registry, so it gets an isolation of its own.
    with isolated_state():
        run_demo(options, say=io.StringIO(), progress=io.StringIO())
    return output


def _rows(path: Path, **options: Any) -> None:
    with path.open("w") as out:
        for row in options["rows"]:
            out.write(json.dumps(row) + "\n")


def test_a_demo_run_answers_every_documented_field_with_what_its_files_hold(demo: Path) -> None:
    result = run_cli("query", demo / "metrics.jsonl", "--traces", demo / "traces.jsonl")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    jsonschema.validate(answer, SCHEMA)
    rows = list(read_jsonl(demo / "metrics.jsonl", every_row=True))
    metric_rows = [r for r in rows if "kind" not in r]
    # Trainer steps: not the setup phases, nor the rollout checkpoints' wall-clock stream.
    steps = {r["step"] for r in metric_rows if is_trainer_step(r["metrics"], r["prefix"])}
    assert steps != {r["step"] for r in metric_rows}  # the demo logs both
    assert answer["run"]["run_id"] == rows[-1]["run_id"]
    assert answer["steps"]["count"] == len(steps)
    assert (answer["steps"]["first"], answer["steps"]["last"]) == (min(steps), max(steps))
    hyper: dict[str, Any] = {}
    for row in rows:
        if row.get("kind") == "hyperparams":
            hyper.update(row["hyperparams"])
    assert answer["run"]["hyperparams"] == hyper
    last = next(
        r for r in reversed(metric_rows) if "reward" in r["metrics"] and r["prefix"] == "train"
    )
    assert answer["last_values"]["train/reward"] == {
        "step": last["step"],
        "value": last["metrics"]["reward"],
    }
    assert answer["slowest_phases"] and answer["traces_other_runs"] == 0
    totals = [p["total_s"] for p in answer["slowest_phases"]]
    assert totals == sorted(totals, reverse=True)
    assert answer["findings"] == []


def test_field_selection_prints_the_parts_named(demo: Path) -> None:
    result = run_cli(
        "query",
        demo / "metrics.jsonl",
        "--field",
        "steps.last",
        "--field",
        'last_values["train/reward"].step',
    )
    assert result.returncode == 0, result.stderr
    last = json.loads(result.stdout.splitlines()[0])
    assert result.stdout.splitlines() == [str(last), str(last)]
    bad = run_cli("query", demo / "metrics.jsonl", "--field", "steps.nope")
    assert (
        bad.returncode == 2
        and bad.stderr.strip() == "rlmetrics query: no field 'steps.nope' in the answer (at 'nope')"
    )


def _step_rows(times: list[float], run_id: str = "r1") -> list[dict[str, Any]]:
    return [
        {
            "time": t,
            "run_id": run_id,
            "step": n,
            "prefix": "train",
            "metrics": {"loss": 1.0 / (n + 1)},
        }
        for n, t in enumerate(times)
    ]


def test_a_stall_is_a_finding_and_exit_1(tmp_path: Path) -> None:
    times = [1000.0 + n for n in range(30)] + [1000.0 + 29 + 500.0]
    path = tmp_path / "m.jsonl"
    _rows(path, rows=_step_rows(times))
    answer = run_state(path, now=times[-1] + 1.0)
    jsonschema.validate(answer, SCHEMA)
    assert answer["stalls"] == [{"after_step": 29, "gap_s": 500.0, "limit_s": 60.0}]
    assert not answer["stalled_now"]
    assert answer["findings"] == ["1 stall(s) during the run; the longest 500 s after step 29"]
    result = run_cli("query", path)
    assert result.returncode == 1


# Few distinct gaps, so medians of windows one interval apart differ and gaps fall between
# their limits.
@given(gaps=st.lists(st.sampled_from([0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0]), max_size=80))
# The 20 gaps before the last have the median 6 (a limit of 12), the 21 before it 8 (16).
@example(gaps=[8.0] + [4.0] * 10 + [8.0] * 10 + [16.0])
def test_each_silence_is_judged_by_the_pace_of_the_intervals_before_it(
    tmp_path_factory: pytest.TempPathFactory, gaps: list[float]
) -> None:
    """A silence is a stall past the limit the median of the 20 intervals before it sets (the
    bound before 20 are known). The pace is a window slid along the steps; it was a copy of
    every interval before each one, which made a 10^5-step run's answer take a minute (the
    time is in the CHANGELOG, not asserted here: what this holds is that the window is the
    same 20 intervals)."""
    times = [1000.0]
    for gap in gaps:
        times.append(times[-1] + gap)
    path = tmp_path_factory.mktemp("query") / "m.jsonl"
    _rows(path, rows=_step_rows(times))
    # Limits the drawn gaps cross often, so a window one interval off is seen.
    rule = StallRule(factor=2.0, min_s=0.0, bound_s=50.0)
    intervals = [b - a for a, b in itertools.pairwise(times)]
    expected = []
    for index, gap in enumerate(intervals):
        before = intervals[:index][-MEDIAN_WINDOW:]
        limit = rule.limit_s(statistics.median(before) if len(before) >= MEDIAN_WINDOW else None)
        if gap > limit:
            expected.append({"after_step": index, "gap_s": round(gap, 3), "limit_s": limit})
    assert run_state(path, now=times[-1], rule=rule)["stalls"] == expected


def test_the_row_a_running_loop_is_writing_is_no_finding(tmp_path: Path) -> None:
    """A reader can catch the JSONL backend's last row half-written (a row past a page is
    more than one copy into the file). Before: a run stepping on was a finding, exit 1, for
    it; it is counted, and a finding once the run has gone silent (its writer died in it)."""
    times = [1000.0 + n for n in range(30)]
    path = tmp_path / "m.jsonl"
    _rows(path, rows=_step_rows(times))
    with path.open("a") as out:
        out.write('{"time": 1030.0, "run_id": "r1", "step": 30, "prefix": "train", "metr')
    running = run_state(path, now=times[-1] + 1.0)
    assert running["source"]["skipped_lines"] == 1 and running["findings"] == []
    silent = run_state(path, now=times[-1] + 3600.0)
    assert silent["source"]["skipped_lines"] == 1
    assert (
        "1 line(s) of the JSONL were not rows: line 31 (a torn last line)" in (silent["findings"])
    )
    with path.open("a") as out:  # a line torn before the last is damage, running or not
        out.write('ics": {}}\n{"oops\n' + json.dumps(_step_rows([1031.0])[0] | {"step": 31}))
    assert run_state(path, now=1032.0)["findings"] == [
        "1 line(s) of the JSONL were not rows: line 32 (not JSON)"
    ]


def test_bad_input_is_a_clear_answer_never_a_traceback(tmp_path: Path) -> None:
    # A half-written JSONL: the torn line is counted and said.
    path = tmp_path / "m.jsonl"
    _rows(path, rows=_step_rows([1.0, 2.0, 3.0]))
    with path.open("a") as out:
        out.write('{"time": 4.0, "run_id": "r1", "st')
    answer = run_state(path, now=4.0)
    assert answer["source"]["skipped_lines"] == 1 and answer["steps"]["count"] == 3
    # A dead Prometheus: alerts unread, said, exit 1.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    result = run_cli("query", path, "--prometheus", dead)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    answer = json.loads(result.stdout)
    jsonschema.validate(answer, SCHEMA)
    assert answer["alerts"] is None and answer["alerts_error"].startswith(dead + "/api/v1/alerts")
    for args, message in [
        ((tmp_path / "missing.jsonl",), "no such file"),
        ((tmp_path,), "is a folder"),
        ((path, "--run", "nope"), "has no run 'nope'; its runs: ['r1']"),
    ]:
        result = run_cli("query", *args)
        assert (
            result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
        )


@pytest.mark.parametrize("kind", ["traces", "samples", "csv", "binary", "empty"])
def test_a_file_with_no_metrics_row_is_refused_in_one_line(tmp_path: Path, kind: str) -> None:
    """Before: a traces, samples or empty file was answered as a run of no step (a samples
    file even under its run's id), exit 1, where report and check --run refuse it."""
    given = not_run_files(tmp_path)[kind]
    result = run_cli("query", given)
    assert result.returncode == 2, result.stdout
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"rlmetrics query: {given} is not a run's metrics JSONL")
    assert len(result.stderr.splitlines()) == 1


def test_the_alerts_a_running_prometheus_fires_for_the_run_are_in_the_answer(
    prometheus_binary: str, stacks: list[Stack], tmp_path: Path
) -> None:
    """A real run paused under ``rlmetrics stack``'s Prometheus (the stall rule in seconds, as
    test_tools_stack fires it): ``query --prometheus`` reports RLStepStalled firing for it,
    with the summary Prometheus rendered, as a finding."""
    run_id = "query-alert-run"
    jsonl = tmp_path / "metrics.jsonl"
    with (
        rlmetrics.start(run_id=run_id, exporters=["prometheus"], prometheus_port=0) as handle,
        Run(interval_s=0.1, backends={"jsonl": {"path": str(jsonl)}}) as run,
    ):
        assert handle.prometheus_address is not None
        endpoint = f"127.0.0.1:{handle.prometheus_address[1]}"
        stack = Stack(
            *("--dir", str(tmp_path / "stack"), "--run", endpoint, "--no-ray", "--port", "0"),
            *("--scrape-interval", "1s", "--for", "2s", "--set", "stall.min_s=3"),
            *("--no-alertmanager", "--prometheus", prometheus_binary),
        )
        stacks.append(stack)
        wait_until(
            lambda: stack.query("rl_step_interval_median_seconds"), 30, "the median step interval"
        )
        run.running.clear()  # the run pauses
        wait_until(lambda: "firing" in stack.alert_states("RLStepStalled"), 60, "the stall alert")
        (fired,) = [
            a
            for a in stack.get("/api/v1/alerts")["alerts"]
            if a["labels"]["alertname"] == "RLStepStalled"
        ]
        wait_until(jsonl.exists, 30, "the run's JSONL")
        result = run_cli("query", jsonl, "--prometheus", stack.url)
    assert result.returncode == 1, result.stderr
    answer = json.loads(result.stdout)
    jsonschema.validate(answer, SCHEMA)
    assert answer["run"]["run_id"] == run_id and answer["alerts_error"] is None
    stalled = [a for a in answer["alerts"] if a["name"] == "RLStepStalled"]
    assert stalled == [{"name": "RLStepStalled", "state": "firing", "summary": ANY}]
    assert stalled[0]["summary"].startswith(f"Run {run_id} ({endpoint}) has logged no step for ")
    assert fired["annotations"]["summary"].startswith(f"Run {run_id} ({endpoint})")
    assert f"alert RLStepStalled firing: {stalled[0]['summary']}" in answer["findings"]


def test_a_traces_file_of_another_run_is_left_out(demo: Path, tmp_path: Path) -> None:
    other = tmp_path / "m.jsonl"
    _rows(other, rows=_step_rows([1.0, 2.0], run_id="another-run"))
    answer = run_state(other, traces=demo / "traces.jsonl", now=2.0)
    assert answer["slowest_phases"] == [] and answer["traces_other_runs"] > 0


def _quoted(key: str, quote: str) -> str:
    """``key`` in ``quote``, its backslashes and that quote escaped with a backslash."""
    return quote + key.replace("\\", "\\\\").replace(quote, "\\" + quote) + quote


@given(
    st.lists(st.one_of(st.text(max_size=5), st.integers(-3, 3)), max_size=4),
    st.sampled_from(['"', "'"]),
)
@example(["a]b"], '"')
@example(['a"b'], '"')
@example(["a\\b"], "'")
def test_select_reads_what_the_path_names_or_says_why_not(
    parts: list[str | int], quote: str
) -> None:
    """Before, a key holding ']' or '"' (``train/x]y``) could not be named at all: the key
    ended at the first ']' and no escape was read."""
    answer = {"a": [{"b": 1}, {"c": [2, 3]}], "x.y": 4, "a]b": 5, 'a"b': 6, "a\\b": 7}
    path = "".join(f"[{p}]" if isinstance(p, int) else f"[{_quoted(p, quote)}]" for p in parts)
    assume(path)
    current: Any = answer
    try:
        for part in parts:
            current = current[part]
    except (KeyError, IndexError, TypeError):
        with pytest.raises(QueryError):
            select(answer, path)
        return
    assert select(answer, path) == current


@given(st.text(alphabet=st.sampled_from("ab.[]\"'\\ 0-$"), max_size=12))
def test_any_field_path_is_a_value_or_one_query_error(path: str) -> None:
    answer = {"a": [{"b": 1}], "b": {"a": 2}, "": 3}
    try:
        select(answer, path)
    except QueryError as exc:
        assert "\n" not in str(exc)


def test_a_key_of_any_characters_is_a_field_the_command_prints(tmp_path: Path) -> None:
    """Keys a Logger wrote, named in ``--field`` with their quotes and backslashes escaped;
    before, ``train/x]y`` was '[\"train/x] is neither an index nor a key' and ``train/a\"b``
    no field (exit 2 both)."""
    path = tmp_path / "metrics.jsonl"
    keys = ['a"b', "x]y", "back\\slash", "['q']", "it's"]
    with rlmetrics.Logger(backends={"jsonl": {"path": str(path)}}) as logger:
        logger.log_metrics({key: float(i) for i, key in enumerate(keys)}, step=1, prefix="train")
    fields = ["last_values[" + _quoted("train/" + key, '"') + "].value" for key in keys]
    fields.append("last_values['train/it\\'s'].value")
    done = run_cli("query", path, *(a for field in fields for a in ("--field", field)))
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == [0.0, 1.0, 2.0, 3.0, 4.0, 4.0]


def test_steps_are_counted_by_the_rule_health_applies(tmp_path: Path) -> None:
    """A run logged through the real Logger: setup phases (step 0) and rollout-checkpoint
    events (a wall-clock stream numbered by its own counter) are no trainer steps, as for
    /health (rlmetrics.families.liveness). Before, query counted 3 trainer steps as 12, from
    step 0 to 11."""
    from rlmetrics.events import CheckpointSave

    path = tmp_path / "metrics.jsonl"
    with rlmetrics.Logger(backends={"jsonl": {"path": str(path)}}, run_id="ck") as logger:
        logger.log_setup_timing({"policy_init_time_s": 1.0, "total_setup_time_s": 2.0})
        for step in range(1, 4):
            logger.log_metrics({"reward": step / 10}, step=step, prefix="train")
            for _ in range(4):
                logger.log_rollout_checkpoint(CheckpointSave({"total_save_seconds": 2.0}))
    steps = run_state(path)["steps"]
    assert (steps["count"], steps["first"], steps["last"]) == (3, 1, 3)


@given(text=jsonl_files(), run=st.sampled_from([None, "a", "b", "zz"]))
def test_the_streamed_answer_is_the_answer_of_the_whole_file(
    tmp_path_factory: pytest.TempPathFactory, text: str, run: str | None
) -> None:
    """``query`` takes a run's rows as it reads them (a run of 10^5 steps held 500 MB of rows
    in memory); what it answers is what it answered from a list of every row."""
    path = tmp_path_factory.mktemp("streamed") / "metrics.jsonl"
    path.write_text(text)
    expected = whole_file_state(path, run=run, now=5000.0)
    try:
        answer = run_state(path, run=run, now=5000.0)
    except QueryError as exc:
        assert isinstance(expected, QueryError), expected
        assert str(exc) == str(expected)
    else:
        assert answer == expected


def test_a_long_run_is_answered_without_holding_its_rows(tmp_path: Path) -> None:
    """What ``query`` holds while it reads grows with what the answer says (a time a step,
    a value a key), not with the rows: its peak allocation stays below the file's size (a
    list of the rows was six times it). Measured by tracemalloc, not timed."""
    import tracemalloc

    path = write_long_run(tmp_path / "metrics.jsonl")
    run_state(path, now=5000.0)  # imports and first-call caches outside the measurement
    tracemalloc.start()
    try:
        answer = run_state(path, now=5000.0)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert answer["steps"]["count"] == 3000
    assert peak < path.stat().st_size


@pytest.mark.parametrize("failed", [False, True])
def test_a_finished_run_is_ended_not_stalled(tmp_path: Path, failed: bool) -> None:
    """Before: a run whose Logger finished (cleanly, or with the exception that ended it) read
    as stalled for ever once its pace's limit had passed: ``query`` exited 1 with "stalled: no
    step for 91 s", and MCP ``run_state`` told an agent the run was stuck. The JSONL backend
    now ends the run's rows with an ``end`` row saying how it ended; a run killed before its
    finish has none and is still judged by its silence."""
    path = tmp_path / "m.jsonl"
    jsonl = {"jsonl": {"path": str(path)}}
    with (
        isolated_state(),
        contextlib.suppress(ValueError),
        rlmetrics.Logger(backends=jsonl, run_id="r1") as logger,
    ):
        for step in range(3):
            logger.log_metrics({"loss": 1.0}, step=step, prefix="train")
        if failed:
            raise ValueError("the loop's own error")
    [end] = [row for row in read_jsonl(path, every_row=True) if row.get("kind") == "end"]
    assert end == {
        "time": ANY,
        "run_id": "r1",
        "kind": "end",
        "status": "failed" if failed else "finished",
    }
    later = end["time"] + 3600.0
    answer = run_state(path, now=later)
    jsonschema.validate(answer, SCHEMA)
    assert answer["run"]["ended"] == {"time": end["time"], "status": end["status"]}
    assert not answer["stalled_now"]
    assert not any(finding.startswith("stalled") for finding in answer["findings"])
    assert ("the run ended failed" in " ".join(answer["findings"])) is failed
    # Its rows gone on after the end (a second Logger of the run, a resume): running again.
    with path.open("a") as out:
        for row in _step_rows([later, later + 1.0]):
            out.write(json.dumps({**row, "step": row["step"] + 3}) + "\n")
    again = run_state(path, now=later + 3600.0)
    assert again["run"]["ended"] is None and again["stalled_now"]


def test_a_killed_run_has_no_end_row_and_stays_stalled(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    _rows(path, rows=_step_rows([1000.0 + n for n in range(30)]))
    answer = run_state(path, now=1000.0 + 29 + 3600.0)
    assert answer["run"]["ended"] is None and answer["stalled_now"]
