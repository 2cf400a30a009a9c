"""``rlmetrics check --run RUN.jsonl``: the keys a run logged that no declared series reads
(they reach the trackers only), each with the line that would declare one (issue 25, item 9).
The keys are tried through the installed plugins themselves, so a family's patterns, routes and
key maps count."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from tools_support import not_run_files, run_cli, write_long_run
from whole_file_reference import jsonl_files

from rlmetrics.backends.jsonl import SkippedLines
from rlmetrics.cli import main
from rlmetrics.families.training import tee_scalar


def _write(path: Path, rows: list[tuple[int, str, dict[str, Any]]]) -> Path:
    path.write_text(
        "".join(
            json.dumps({"time": 0.0, "run_id": "r", "step": s, "prefix": p, "metrics": m}) + "\n"
            for s, p, m in rows
        )
    )
    return path


ROWS = [
    (0, "timing/setup", {"policy_init_time_s": 1.0, "parallel_init_enabled": True}),
    (
        1,
        "train",
        {
            "reward": 0.5,
            "loss": 0.1,
            "my_custom_thing": 3.0,
            "efficiency/step_wall_time_s": 10.0,
            "efficiency/idle/buffer_starvation_s": 1.0,
            "vllm/prompt_tokens": 100,
            "reward/format": 1.0,
            "validation/gsm8k/accuracy": 0.7,
            "validation/gsm8k/undeclared_score": 0.2,
            "note": "a string is no number to tee",
        },
    ),
    (1, "perf", {"tokens_per_s": 1000.0}),
]


def test_the_keys_no_series_reads_are_listed_with_their_declaring_line(tmp_path: Path) -> None:
    jsonl = _write(tmp_path / "run.jsonl", ROWS)
    done = run_cli("check", "--run", jsonl)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert f"{jsonl}: 3 of the 10 keys logged reach the trackers only" in out
    # (The keys nothing knows are listed above this section: tests/test_known_keys.py.)
    section = out.split("keys logged reach")[1].splitlines()[1:]
    listed = {line.split()[0] for line in section}
    assert listed == {"my_custom_thing", "validation/gsm8k/undeclared_score", "perf/tokens_per_s"}
    [line] = [line for line in section if line.strip().startswith("my_custom_thing")]
    assert 'tee_scalar("my_custom_thing", "rl.my_custom_thing", description="...")' in line
    [score] = [line for line in section if "undeclared_score" in line]
    assert 'tee_dataset_metric("undeclared_score", "rl.validation.undeclared_score"' in score
    [perf] = [line for line in section if "perf/tokens_per_s" in line]
    assert "no family reads dicts logged under 'perf'" in perf
    as_json = json.loads(run_cli("check", "--run", jsonl, "--json").stdout)["run"]
    assert as_json["keys_tried"] == 10
    assert {u["key"] for u in as_json["unexported"]} == {
        "my_custom_thing",
        "validation/gsm8k/undeclared_score",
        "tokens_per_s",
    }


def test_the_declaring_line_does_what_it_says(tmp_path: Path, capsys: Any) -> None:
    jsonl = _write(tmp_path / "run.jsonl", [(1, "train", {"reward": 1.0, "my_custom_thing": 3.0})])
    assert main(["check", "--run", str(jsonl)]) == 1
    assert "my_custom_thing" in capsys.readouterr().out
    tee_scalar("my_custom_thing", "rl.my_custom_thing", description="...")
    assert main(["check", "--run", str(jsonl)]) == 0
    assert "every one of the 2 keys logged reaches a series" in capsys.readouterr().out


def test_a_key_map_is_applied_as_the_loggers(tmp_path: Path) -> None:
    jsonl = _write(tmp_path / "run.jsonl", [(1, "train", {"rewards/format_reward/mean": 0.5})])
    assert run_cli("check", "--run", jsonl).returncode == 1
    mapped = run_cli("check", "--run", jsonl, "--key-map", "trl")
    assert mapped.returncode == 0, mapped.stdout
    unknown = run_cli("check", "--run", jsonl, "--key-map", "nope")
    assert unknown.returncode == 2 and "nope" in unknown.stderr


def test_a_folder_for_the_run_is_one_line(tmp_path: Path) -> None:
    done = run_cli("check", "--run", tmp_path)
    assert done.returncode == 2
    assert "is a folder" in done.stderr and "Traceback" not in done.stderr


# -- issue 32: suggestions run as printed; key maps' backend keys are no finding ------------

TRL_RUN = Path(__file__).parent / "runs" / "trl-grpo.jsonl"

#: Keys a newcomer logs whose obvious series name is taken, a namespace, a unit, a Prometheus
#: suffix, no name at all, or no Python literal as it stands.
AWKWARD = {
    "reward/mean": 1.0,  # rl.reward.mean exists, read from `reward`
    "entropy": 1.0,  # rl.entropy exists, read from `approx_entropy`
    "learning_rate": 1.0,  # rl.learning_rate exists, read from `lr`
    "kl": 1.0,  # rl.kl is the namespace of rl.kl.divergence
    "reward/mean/extra": 1.0,  # under a series
    "Step_Time_s": 1.0,
    "generation/ms": 1.0,
    "tokens_total": 1.0,
    "samples_per_second": 1.0,
    "2nd/score": 1.0,
    "!!!": 1.0,
    'quo"te\\back': 1.0,
    "my_custom_thing": 1.0,
    "my.custom.thing": 1.0,  # the same name as the one above once written as a series
    "validation/gsm8k/undeclared_score": 1.0,
    "validation/gsm8k/accuracy_pct": 1.0,
}


def _run_suggested(unexported: list[Any]) -> list[Any]:
    """Execute every suggested line as printed (the comment after it included), in a
    namespace with the names its comment says where to import from; the key-map rules."""
    import rlmetrics.families.training as training
    import rlmetrics.keymaps as keymaps

    modules = {"rlmetrics.families.training": training, "rlmetrics.keymaps": keymaps}
    rules = []
    for u in unexported:
        assert u.line is not None and u.remedy.startswith(u.line), u
        namespace = vars(modules[u.module]).copy()
        exec(u.remedy, namespace)  # the whole printed remedy: line and comment
        if u.line.startswith("KeyRule("):
            rules.append(eval(u.line, namespace))
    return rules


def test_every_suggested_line_runs_as_printed_and_makes_its_key_reach_a_series() -> None:
    from rlmetrics.check import check_plugins
    from rlmetrics.keymaps import KeyMap
    from rlmetrics.plugins import get_plugins
    from rlmetrics.registry import default_registry
    from rlmetrics.report.unexported import unexported_keys

    rows = [{"step": 1, "prefix": "train", "metrics": AWKWARD}]
    missing, tried = unexported_keys(rows)
    assert tried == len(AWKWARD)
    assert {u.key for u in missing} == set(AWKWARD)
    by_key = {u.key: u for u in missing}
    assert by_key["reward/mean"].line == 'KeyRule("reward/mean", series="rl.reward.mean")'
    assert by_key["Step_Time_s"].line == (
        'tee_scalar("Step_Time_s", "rl.step_time", unit="s", description="...")'
    )
    rules = _run_suggested(missing)  # raised DeclarationError for reward/mean before
    assert {r.key for r in rules} == {"reward/mean", "entropy", "learning_rate"}
    # Every declared series still passes the lint...
    result = check_plugins(get_plugins(), default_registry().declared())
    assert result.errors == 0, [f.line() for f in result.findings]
    # ...and every key now reaches one, through the suggested key-map rules.
    assert unexported_keys(rows, KeyMap("mine", rules)) == ([], len(AWKWARD))


@given(st.text(min_size=1, max_size=40))
@example("policy_time")  # a key the training family declares already (CI found it)
@example("loss")
def test_any_keys_suggestion_runs_and_passes_the_lint(key: str) -> None:
    from rlmetrics.check import check_plugins
    from rlmetrics.plugins import get_plugins
    from rlmetrics.registry import default_registry
    from rlmetrics.report.unexported import Suggestions
    from rlmetrics.testing import isolated_state

    with isolated_state():
        offered = Suggestions()("train", key)
        if offered.line is None:
            return
        _run_suggested([offered])
        result = check_plugins(get_plugins(), default_registry().declared())
        assert result.errors == 0, [f.line() for f in result.findings]
        if offered.line.startswith("tee_scalar("):
            assert default_registry().keys("rl.train") >= {key}


def test_a_key_a_series_reads_already_is_offered_no_second_declaration() -> None:
    from rlmetrics.report.unexported import Suggestions

    suggest = Suggestions()
    for prefix, key, series in [
        ("train", "policy_time", "rl.sft_v2.policy.duration"),
        ("", "loss", "rl.policy.loss"),
    ]:
        offered = suggest(prefix, key)
        assert offered.line is None, offered
        assert f"{key!r} is read by {series} already" in offered.remedy


def test_a_trl_run_is_checked_through_the_trl_map_found_from_its_rows(tmp_path: Path) -> None:
    done = run_cli("check", "--run", TRL_RUN)
    assert done.returncode == 0, done.stdout
    assert "read through key map 'trl' (found from the run" in done.stdout
    assert "22 keys it keeps to the backends on purpose are not listed" in done.stdout
    assert "every one of the 8 keys logged reaches a series" in done.stdout
    result = json.loads(run_cli("check", "--run", TRL_RUN, "--json").stdout)["run"]
    assert result["key_map"]["name"] == "trl" and len(result["kept_to_backends"]) == 22
    assert "rewards/length_reward/std" in result["kept_to_backends"]
    # Without the hyperparameters row nothing says which trainer wrote the rows: --key-map.
    bare = tmp_path / "bare.jsonl"
    bare.write_text(
        "".join(line + "\n" for line in TRL_RUN.read_text().splitlines() if '"kind"' not in line)
    )
    assert run_cli("check", "--run", bare).returncode == 1
    named = run_cli("check", "--run", bare, "--key-map", "trl")
    assert named.returncode == 0, named.stdout
    assert "(named with --key-map)" in named.stdout


def test_nothing_the_demo_or_the_trl_run_logs_is_an_unknown_key(
    tmp_path: Path, monkeypatch: Any, caplog: Any
) -> None:
    """The opt-in for typos (issue 32) says nothing about a real run's keys: the demo's (every
    installed family's part of it, validation steps included) with the option on through its
    variable, and the TRL run's through the map found from it."""
    import io
    import logging

    from rlmetrics.backends.jsonl import read_jsonl
    from rlmetrics.demo.run import DemoOptions, run_demo
    from rlmetrics.known_keys import unknown_in_rows

    monkeypatch.setenv("RLMETRICS_UNKNOWN_KEYS", "error")
    options = DemoOptions(steps=10, seed=2, output=tmp_path, interval_s=0.0, prometheus_port=0)
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        result = run_demo(options, say=io.StringIO(), progress=io.StringIO())
    assert not [r for r in caplog.records if "Logger(unknown_keys=" in r.getMessage()]
    rows = list(read_jsonl(result.jsonl))
    assert any("validation/gsm8k/accuracy" in r.get("metrics", {}) for r in rows)
    assert unknown_in_rows(rows) == []
    for path in (result.jsonl, TRL_RUN):
        found = json.loads(run_cli("check", "--run", path, "--json").stdout)["run"]
        assert found["unknown_keys"] == [], path


@pytest.mark.parametrize("kind", ["traces", "samples", "csv", "binary", "empty"])
def test_a_file_with_no_metrics_row_is_refused_in_one_line(tmp_path: Path, kind: str) -> None:
    """Before: 'every one of the 0 keys logged reaches a series' and exit 0."""
    given = not_run_files(tmp_path)[kind]
    done = run_cli("check", "--run", given)
    assert done.returncode == 2, done.stdout
    [line] = done.stderr.splitlines()
    assert line.startswith(f"rlmetrics check: {given} is not a run's metrics JSONL: ")


def test_lines_that_are_no_row_are_counted_and_said(tmp_path: Path) -> None:
    """Before, check --run counted the lines it skipped and never said so."""
    jsonl = _write(tmp_path / "run.jsonl", ROWS)
    with jsonl.open("a") as out:
        out.write("not json\n[1, 2]\n")
    done = run_cli("check", "--run", jsonl)
    assert "Traceback" not in done.stderr
    said = [line for line in done.stderr.splitlines() if "unreadable" in line]
    assert said == [
        f"rlmetrics: 2 unreadable lines of {jsonl} skipped: line 4 (not JSON), "
        "line 5 (not a JSON object)"
    ]
    document = json.loads(run_cli("check", "--run", jsonl, "--json").stdout)
    assert document["run"]["skipped_lines"] == 2


def test_a_long_run_looks_for_the_keys_near_each_unknown_key_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The suggestions for a key nothing knows come from comparing it with every known key:
    made for every row that logged it, a run of 10^4 steps with 20 such keys took four
    minutes. Each (prefix, key) is looked at once however many steps logged it."""
    import difflib

    from rlmetrics import known_keys

    looked_at: list[str] = []
    close_matches = difflib.get_close_matches

    def counted(word: str, *args: Any, **kwargs: Any) -> list[str]:
        looked_at.append(word)
        return close_matches(word, *args, **kwargs)

    monkeypatch.setattr(known_keys.difflib, "get_close_matches", counted)
    steps = [(s, "train", {"reward": 0.5, "rewrad": 0.5, "my_thing": 1.0}) for s in range(200)]
    jsonl = _write(tmp_path / "run.jsonl", steps)
    assert main(["check", "--run", str(jsonl)]) == 1
    assert sorted(looked_at) == ["my_thing", "rewrad"]


@given(text=jsonl_files())
def test_the_keys_taken_as_read_give_the_findings_of_every_row(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    """``check --run`` takes a run's rows as it reads them (a run of 10^5 steps held 460 MB
    as a list): what it keeps of them (each key's first logging, and its first number at a
    trainer step) finds what every row found, for the unexported keys, the keys kept to the
    backends and the unknown keys alike."""
    from rlmetrics.backends.jsonl import read_jsonl
    from rlmetrics.cli.check import _KeysLogged
    from rlmetrics.keymaps import resolve_key_map
    from rlmetrics.known_keys import unknown_in_rows
    from rlmetrics.report.runs import DamagedRows, run_rows
    from rlmetrics.report.unexported import _logged

    path = tmp_path_factory.mktemp("check-streamed") / "m.jsonl"
    path.write_text(text)
    rows = run_rows(read_jsonl(path, every_row=True, skipped=SkippedLines()), DamagedRows())
    taken = _KeysLogged()
    for row in rows:
        taken.add(row)
    assert _logged(taken.rows) == _logged(rows)
    assert list(_logged(taken.rows)) == list(_logged(rows))  # in the order first logged
    for key_map in (None, resolve_key_map("trl")):
        assert unknown_in_rows(taken.rows, key_map) == unknown_in_rows(rows, key_map)


def test_a_long_run_is_checked_without_holding_its_rows(tmp_path: Path) -> None:
    """What ``check --run`` holds while it reads grows with the keys, not the rows: its peak
    allocation stays below the file's size (a list of the rows was several times it)."""
    import tracemalloc

    from rlmetrics.cli.check import _unexported

    path = write_long_run(tmp_path / "metrics.jsonl")
    _unexported(path, None)  # imports, plugins and first-call caches outside the measurement
    tracemalloc.start()
    try:
        found = _unexported(path, None)
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not isinstance(found, str) and found.tried == 26
    assert peak < path.stat().st_size


def test_a_run_that_logged_no_key_yet_is_said_so_not_every_one_of_0(tmp_path: Path) -> None:
    """Before: a run that had logged only its configuration so far was told 'every one of the
    0 keys logged reaches a series', which reads as a check that passed."""
    import rlmetrics

    jsonl = tmp_path / "metrics.jsonl"
    logger = rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}, run_id="early")
    logger.log_hyperparams({"lr": 1e-6})
    logger.finish()
    done = run_cli("check", "--run", jsonl)
    assert done.returncode == 0, done.stderr
    assert f"{jsonl}: no metric key logged yet: nothing to check" in done.stdout.splitlines()
    assert "every one of the 0" not in done.stdout


def test_keys_that_carry_their_prefix_are_tried_under_it() -> None:
    """A W&B-style row (prefix in the keys, none given) is read as the Logger reads it:
    train/reward reaches rl.reward.mean, and what does not is offered under its prefix, not
    as a tee_scalar of the whole key (a second series for the training reward)."""
    from rlmetrics.report.unexported import declared_backend_only, unexported_keys

    rows = [
        {"step": 1, "prefix": "", "metrics": {"train/reward": 0.5, "train/my_stat": 1.0}},
        {"step": 1, "prefix": "", "metrics": {"eval/reward": 0.3}},
    ]
    missing, tried = unexported_keys(rows)
    assert tried == 2
    by_name = {u.name: u for u in missing}
    assert set(by_name) == {"train/my_stat"}
    assert by_name["train/my_stat"].line == 'tee_scalar("my_stat", "rl.my_stat", description="...")'
    # eval/reward is read under eval, whose every key is declared as reaching the trackers
    # only: counted, not tried.
    assert declared_backend_only(rows) == ["eval/reward"]


# -- keys declared as reaching the trackers only (declare_keys(..., backend_only=True)) ------


def test_keys_declared_backend_only_are_counted_not_listed(tmp_path: Path, capsys: Any) -> None:
    """A run that logs what rlmetrics documents as reaching the trackers only — the counters
    every trainer logs, the ranks merger's straggler entries, evaluation dicts (docs/concepts.md:
    every key under ``eval`` and ``test``), a loop's own ``backend_only`` declaration — is a
    normal run: none is offered a tee_scalar line and the exit status is 0."""
    from rlmetrics import Logger, declare_keys

    path = tmp_path / "metrics.jsonl"
    logger = Logger({"jsonl": {"path": str(path)}})
    train = {"reward": 0.5, "epoch": 1, "policy_time/rank_min": 1.0, "my_debug/queue": 3.0}
    logger.log_metrics(train, step=1)
    logger.log_metrics({"policy_time/rank_max": 2.0}, step=1, prefix="train")
    logger.log_metrics({"reward": 0.4, "accuracy": 0.3}, step=1, prefix="eval")
    logger.log_metrics({"reward": 0.2}, step=1, prefix="test")
    logger.finish()
    declare_keys(["my_debug/*"], backend_only=True, note="the loop's own")

    assert main(["check", "--run", str(path)]) == 0
    out = capsys.readouterr().out
    assert "reach the trackers only" not in out and "tee_scalar" not in out, out
    assert "every one of the 1 keys logged reaches a series" in out
    assert "7 keys declared as reaching the trackers only are not listed" in out
    assert main(["check", "--run", str(path), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert run["unexported"] == [] and run["keys_tried"] == 1
    assert sorted(run["declared_backend_only"]) == sorted(
        [
            "epoch",
            "policy_time/rank_min",
            "my_debug/queue",
            "policy_time/rank_max",
            "eval/reward",
            "eval/accuracy",
            "test/reward",
        ]
    )

    # A key no declaration covers, logged beside them, is still the one listed.
    with_mine = tmp_path / "mine.jsonl"
    logger = Logger({"jsonl": {"path": str(with_mine)}})
    logger.log_metrics({**train, "my_custom_thing": 3.0}, step=1)
    logger.log_metrics({"reward": 0.4}, step=1, prefix="eval")
    logger.finish()
    assert main(["check", "--run", str(with_mine)]) == 1
    out = capsys.readouterr().out
    section = out.split("keys logged reach the trackers only")[1].splitlines()[1:]
    assert [line.split()[0] for line in section] == ["my_custom_thing"]


def test_keys_under_a_nested_evaluation_prefix_are_counted_not_listed(
    tmp_path: Path, capsys: Any
) -> None:
    """Per-dataset evaluation (``prefix="eval/gsm8k"``, ``prefix="test/mmlu"``) is logged under
    eval and test, whose every key docs/concepts.md says reaches the trackers only: a normal
    run, exit 0. A prefix that only begins with the same letters (``evaluation``) is not."""
    from rlmetrics import Logger

    path = tmp_path / "metrics.jsonl"
    logger = Logger({"jsonl": {"path": str(path)}})
    logger.log_metrics({"reward": 0.5}, step=1)
    logger.log_metrics({"accuracy": 0.7, "pass@1": 0.6}, step=1, prefix="eval/gsm8k")
    logger.log_metrics({"accuracy": 0.4}, step=1, prefix="test/mmlu/stem")
    logger.finish()
    assert main(["check", "--run", str(path), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert run["unexported"] == [] and run["keys_tried"] == 1
    assert sorted(run["declared_backend_only"]) == [
        "eval/gsm8k/accuracy",
        "eval/gsm8k/pass@1",
        "test/mmlu/stem/accuracy",
    ]

    other = tmp_path / "other.jsonl"
    logger = Logger({"jsonl": {"path": str(other)}})
    logger.log_metrics({"accuracy": 0.7}, step=1, prefix="evaluation")
    logger.finish()
    assert main(["check", "--run", str(other)]) == 1
