"""``rlmetrics report`` over a file holding several runs: each reported apart (or the one
``--run`` names), a resumed run as one run, repeated steps named; the run's hyperparameters
and latest samples shown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tools_support import run_cli

import rlmetrics
from rlmetrics.report.runs import RunNotFound, read_reports, split_runs


def _log_run(path: Path, run_id: str, steps: range, resume: bool = False) -> None:
    logger = rlmetrics.Logger(backends={"jsonl": {"path": path}}, run_id=run_id, resume=resume)
    if not resume:
        logger.log_hyperparams({"lr": 1e-6, "model": {"name": run_id}})
    for step in steps:
        logger.log_metrics({"reward": step / 100, "loss": 0.1}, step=step, prefix="train")
    logger.log_samples(
        [{"prompt": f"p{i}", "completion": "c\nd", "reward": 1.0} for i in range(5)],
        step=steps[-1],
    )
    logger.finish()


def test_a_resumed_run_is_one_run_of_all_its_steps(tmp_path: Path) -> None:
    jsonl = tmp_path / "m.jsonl"
    _log_run(jsonl, "run-a", range(1, 11))
    _log_run(jsonl, "run-a", range(11, 21), resume=True)

    (report,) = read_reports(jsonl)
    assert report.run_id == "run-a" and report.resumed == 1
    assert [s["step"] for s in report.steps] == list(range(1, 21))
    assert report.repeated_steps == ()
    assert report.hyperparams == {"lr": 1e-6, "model": {"name": "run-a"}}
    assert report.samples is not None
    assert (report.samples["rows"], report.samples["tables"]) == (10, 2)
    assert report.samples["latest_step"] == 20
    assert [row["prompt"] for row in report.samples["shown"]] == ["p0", "p1", "p2"]


def test_two_runs_in_one_file_are_reported_apart(tmp_path: Path) -> None:
    jsonl = tmp_path / "m.jsonl"
    _log_run(jsonl, "run-a", range(1, 11))
    _log_run(jsonl, "run-b", range(1, 31))

    reports = read_reports(jsonl)
    assert [(r.run_id, len(r.steps)) for r in reports] == [("run-a", 10), ("run-b", 30)]
    assert [r.hyperparams["model"]["name"] for r in reports if r.hyperparams] == ["run-a", "run-b"]
    (only,) = read_reports(jsonl, run="run-b")
    assert only.trends["reward"]["last"] == 0.3
    with pytest.raises(RunNotFound, match="no run 'run-c'"):
        read_reports(jsonl, run="run-c")

    done = run_cli("report", jsonl)
    assert done.returncode == 0, done.stderr
    assert "2 runs in this file (run-a, run-b)" in done.stdout
    assert "Run run-a: 10 steps" in done.stdout and "Run run-b: 30 steps" in done.stdout
    assert "Hyperparameters (2):" in done.stdout and "model/name = run-b" in done.stdout
    assert "completion: c d" in done.stdout  # a completion stays on its line
    result = json.loads(run_cli("report", jsonl, "--json").stdout)
    assert [r["run_id"] for r in result["runs"]] == ["run-a", "run-b"]
    picked = json.loads(run_cli("report", jsonl, "--json", "--run", "run-a").stdout)
    assert picked["run_id"] == "run-a" and len(picked["steps"]) == 10
    missing = run_cli("report", jsonl, "--run", "run-c")
    assert missing.returncode == 2 and "no run 'run-c' (runs: run-a, run-b)" in missing.stderr


def test_steps_logged_twice_in_a_run_are_named(tmp_path: Path) -> None:
    jsonl = tmp_path / "m.jsonl"
    _log_run(jsonl, "run-a", range(1, 13))  # died after step 12; its checkpoint was step 10
    _log_run(jsonl, "run-a", range(11, 21), resume=True)

    (report,) = read_reports(jsonl)
    assert report.repeated_steps == (11, 12)
    assert [s["step"] for s in report.steps] == list(range(1, 21))
    done = run_cli("report", jsonl)
    assert "steps 11, 12 were logged again after the run went back" in done.stdout
    assert "run run-a logged steps 11, 12 again after going back" in done.stderr


def test_a_run_resumed_twice_names_how_many_steps_it_logged_again(tmp_path: Path) -> None:
    """Before: stderr listed the first ten repeated steps as if they were all of them."""
    jsonl = tmp_path / "m.jsonl"
    _log_run(jsonl, "run-a", range(1, 40))
    _log_run(jsonl, "run-a", range(30, 70), resume=True)
    _log_run(jsonl, "run-a", range(60, 100), resume=True)
    (report,) = read_reports(jsonl)
    assert report.repeated_steps == (*range(30, 40), *range(60, 70))
    done = run_cli("report", jsonl)
    assert "steps 30, 31, 32, 33, 34, 35, 36, 37, 38, 39 and 10 more were logged" in done.stdout
    assert (
        "run run-a logged steps 30, 31, 32, 33, 34, 35, 36, 37, 38, 39 and 10 more again after "
        "going back"
    ) in done.stderr


def test_rows_without_a_run_id_are_one_run(tmp_path: Path) -> None:
    jsonl = tmp_path / "old.jsonl"
    rows: list[dict[str, Any]] = [
        {"time": 0.0, "step": s, "prefix": "train", "metrics": {"reward": 0.5}} for s in (1, 2)
    ]
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (report,) = read_reports(jsonl)
    assert report.run_id is None and [s["step"] for s in report.steps] == [1, 2]
    assert "Run " not in run_cli("report", jsonl).stdout.splitlines()[1]


def test_the_demo_reports_its_configuration_and_samples(tmp_path: Path) -> None:
    output = tmp_path / "out"
    done = run_cli(
        "demo", "--steps", "10", "--interval", "0", "--prometheus-port", "0", "--output", output
    )
    assert done.returncode == 0, done.stderr
    assert "Hyperparameters (13):" in done.stdout and "optimizer/lr = 1e-06" in done.stdout
    # 8 sample rows in 2 tables, and each step's 32 trajectories as a table of their own.
    assert "Samples: 328 rows in 12 table(s); the latest (samples at step 10)" in done.stdout
    summary = json.loads(run_cli("report", output / "metrics.jsonl", "--json").stdout)
    assert summary["hyperparams"]["algorithm"]["name"] == "grpo"
    assert summary["samples"]["rows"] == 328
    (first, *_) = summary["samples"]["shown"]
    assert set(first) == {"prompt", "completion", "reward", "response_tokens"}
    assert first["prompt"].startswith("What is ")


_ids = st.sampled_from(["a", "b", "c", None])


@given(
    st.lists(
        st.tuples(_ids, st.integers(0, 6), st.sampled_from(["train", "", "other", "resume"])),
        max_size=40,
    )
)
def test_split_runs_puts_every_row_in_its_run_and_each_step_in_its_last_attempt(
    rows: list[tuple[Any, int, str]],
) -> None:
    logged: list[dict[str, Any]] = [
        {"run_id": run_id, "kind": "resume"}
        if prefix == "resume"
        else {"run_id": run_id, "step": step, "prefix": prefix, "metrics": {"i": index}}
        for index, (run_id, step, prefix) in enumerate(rows)
    ]
    runs = split_runs(logged)
    assert list(runs) == list(dict.fromkeys(run_id for run_id, _, _ in rows))
    for run_id, found in runs.items():
        mine = [row for row in logged if row["run_id"] == run_id]
        assert found.rows == [row for row in mine if "kind" not in row]
        # The attempts, told apart the slow way: a resume, or a prefix's step going back.
        attempt, latest, attempts_of = 0, {}, []
        last: dict[int, int] = {}
        repeated = set()
        for row in mine:
            if "kind" in row or row["step"] < latest.get(row["prefix"], row["step"]):
                attempt, latest = attempt + 1, {}
            if "kind" in row:
                continue
            latest[row["prefix"]] = row["step"]
            if row["step"] in last and last[row["step"]] != attempt:
                repeated.add(row["step"])
            last[row["step"]] = attempt
            attempts_of.append((row, attempt))
        assert found.repeated == repeated
        assert found.shown_rows() == [row for row, a in attempts_of if last[row["step"]] == a]


# -- a row no run holds: a run id that is no string, a negative step ---------------------------

#: What a hand-edited or foreign row can carry where the JSONL backend writes a string run id.
_ANY_RUN_IDS = st.one_of(
    st.sampled_from(["r1", "r2"]), st.integers(), st.floats(allow_nan=False), st.booleans()
)


def _damaged(row: dict[str, Any]) -> bool:
    return not isinstance(row["run_id"], str) or row["step"] < 0


@given(st.lists(st.tuples(_ANY_RUN_IDS, st.integers(-3, 4)), min_size=1, max_size=20))
def test_a_row_no_run_holds_is_counted_and_never_a_run_or_a_step(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[Any, int]]
) -> None:
    """Before: query took a row with "run_id": 5 as the file's last run (its schema says a
    string), report filed it under a run "None", and "step": -4 was a step of both."""
    from rlmetrics.runstate import run_state

    logged = [
        {"time": float(i), "run_id": run_id, "step": step, "prefix": "train", "metrics": {"x": i}}
        for i, (run_id, step) in enumerate(rows)
    ]
    path = tmp_path_factory.mktemp("damaged") / "m.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in logged))
    damaged = sum(1 for row in logged if _damaged(row))
    runs = list(dict.fromkeys(row["run_id"] for row in logged if not _damaged(row)))
    answer = run_state(path, now=100.0)
    assert answer["run"]["runs_in_file"] == runs
    assert answer["run"]["run_id"] == (runs[-1] if runs else None)
    assert answer["source"]["skipped_lines"] == damaged
    assert all(step >= 0 for step in (answer["steps"]["first"], answer["steps"]["last"]) if step)
    if not runs:
        return
    reports = read_reports(path)
    assert [report.run_id for report in reports] == runs
    for report in reports:
        assert report.skipped_lines == damaged
        assert all(step["step"] >= 0 for step in report.steps)


def test_rows_no_run_holds_are_named_by_report_and_query(tmp_path: Path) -> None:
    jsonl = tmp_path / "m.jsonl"
    rows = [
        {"time": 1.0, "run_id": "r1", "step": 1, "prefix": "train", "metrics": {"reward": 0.1}},
        {"time": 2.0, "run_id": "r1", "step": -4, "prefix": "train", "metrics": {"reward": 9.0}},
        {"time": 3.0, "run_id": 5, "step": 2, "prefix": "train", "metrics": {"reward": 0.2}},
    ]
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = run_cli("report", jsonl, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["run_id"] == "r1" and "runs" not in report  # no run "None"
    assert [step["step"] for step in report["steps"]] == [1] and report["skipped_lines"] == 2
    said = [line for line in done.stderr.splitlines() if "damaged" in line]
    # Each named by its line, as an unreadable line is: the rows were said by what is wrong
    # only, and a file of 10^5 rows left the reader to search for them.
    assert said == [
        f"rlmetrics: 2 rows of {jsonl} skipped as damaged: line 2 (step -4 is negative), "
        "line 3 (run_id 5 is not a string)"
    ]
    check = run_cli("check", "--run", jsonl)
    assert said[0] in check.stderr.splitlines(), check.stderr
    query = run_cli("query", jsonl)
    answer = json.loads(query.stdout)
    assert answer["run"]["run_id"] == "r1" and answer["steps"]["count"] == 1
    assert (
        "2 line(s) of the JSONL were not rows: line 2 (step -4 is negative), line 3 (run_id 5 "
        "is not a string)" in answer["findings"]
    ), answer["findings"]


def test_a_file_of_several_ranks_raw_rows_is_refused_in_one_line(tmp_path: Path) -> None:
    """Ray Train's controller writes every rank's raw rows into one file (docs/ranks.md).
    Before: report and query read it as the run, each step shown as the rank written last
    logged it (rank 1's reward as the run's), without a word."""
    from rlmetrics.identity import RunIdentity
    from rlmetrics.ranks.merger import RankRows

    jsonl = tmp_path / "rlmetrics.ranks.jsonl"
    rows = RankRows(jsonl, RunIdentity("job"), rank=0)
    for step in range(1, 4):
        for rank in (0, 1):
            rows.log_rank({"reward": 0.1 * rank}, step, "train", rank, "host-a")
    rows.finish()
    for command in (("report",), ("query",), ("check", "--run")):
        done = run_cli(*command, jsonl)
        assert done.returncode == 2, (command, done.stdout)
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
        assert f"{jsonl} is not a run's metrics JSONL: it holds the raw rows of 2 ranks" in (
            done.stderr
        )
    one_rank = tmp_path / "rlmetrics.rank1.jsonl"  # one rank's file answers about that rank
    rows = RankRows(one_rank, RunIdentity("job"), rank=1)
    rows.log_metrics({"reward": 0.1}, 1, "train")
    rows.finish()
    assert run_cli("report", one_rank).returncode == 0


@pytest.mark.parametrize("opener", ["gzip", "bz2", "lzma"])
def test_a_compressed_run_is_read_as_the_run(tmp_path: Path, opener: str) -> None:
    """A run's JSONL compressed where it lies (``logrotate``'s ``compress``, an archived run:
    ``metrics.jsonl.1.gz``) was "not a run's metrics JSONL: none of its 183 lines is a JSON
    object", and a pipe (``zcat ... | rlmetrics report /dev/stdin``) is refused: no way to
    read it without writing it out. Read as the run now, its compression told by its first
    bytes; one cut short (still being compressed) is read up to the cut, which is said."""
    import importlib

    plain = tmp_path / "metrics.jsonl"
    _log_run(plain, "job", range(1, 31))
    packed = tmp_path / f"metrics.jsonl.1.{opener}"
    with importlib.import_module(opener).open(packed, "wb") as out:
        out.write(plain.read_bytes())
    for command in (("report", "--json"), ("query",), ("check", "--run")):
        done = run_cli(*command, packed)
        assert done.returncode in (0, 1), (command, done.stderr)
        assert "Traceback" not in done.stderr and "not a run's" not in done.stderr, command
    report = json.loads(run_cli("report", "--json", packed).stdout)
    expected = json.loads(run_cli("report", "--json", plain).stdout)
    assert report == {**expected, "source": str(packed), "samples": None}  # none beside it
    query = json.loads(run_cli("query", packed).stdout)
    assert (query["steps"]["count"], query["run"]["run_id"]) == (30, "job")
    if opener == "bz2":
        return  # a block of 900 kB: a cut small file holds no whole block, no row
    cut = tmp_path / f"cut.jsonl.{opener}"
    cut.write_bytes(packed.read_bytes()[: packed.stat().st_size * 2 // 3])
    done = run_cli("report", "--json", cut)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "ends early" in done.stderr
    assert 0 < len(json.loads(done.stdout)["steps"]) < 30
