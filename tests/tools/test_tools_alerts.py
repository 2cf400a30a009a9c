"""``rlmetrics alerts`` writes nothing when something is wrong (issue 32, "the first hour"):
a misspelt threshold left the default in a rules file that looked complete, and said "11
alerting rules written"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tools_support import run_cli

import rlmetrics
from rlmetrics.cli import main
from rlmetrics.plugins import register


@pytest.mark.parametrize(
    "where",
    [("-o", "j.yml"), ("--tests", "unit"), ("-o", "j.yml", "--tests", "unit"), ()],
    ids=["output", "tests", "both", "stdout"],
)
def test_a_threshold_no_rule_has_writes_nothing_and_exits_2(
    tmp_path: Path, where: tuple[str, ...]
) -> None:
    args = [str(tmp_path / part) if not part.startswith("-") else part for part in where]
    done = run_cli("alerts", "--set", "stall.factr=5", *args)
    assert done.returncode == 2, done.stderr
    assert "stall.factr" in done.stderr and "stall.factor" in done.stderr  # the known ones
    assert "nothing written" in done.stderr and "rules written" not in done.stderr
    assert done.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_a_threshold_no_rule_has_in_a_listing_exits_2() -> None:
    done = run_cli("alerts", "--set", "stall.factr=5", "--list")
    assert done.returncode == 2 and "stall.factr" in done.stderr


def test_a_malformed_setting_is_a_usage_error_before_anything_is_written(tmp_path: Path) -> None:
    done = run_cli("alerts", "--set", "stall.factor", "-o", tmp_path / "j.yml")
    assert done.returncode == 2 and "NAME=NUMBER" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_plugin_whose_rules_fail_is_named_and_nothing_is_written(
    tmp_path: Path, capsys: Any
) -> None:
    class Broken:
        @rlmetrics.hookimpl
        def register_alert_rules(self, register: Any) -> None:
            register(lambda context: ["not a rule"])

    register(Broken(), "broken-alerts")
    status = main(["alerts", "-o", str(tmp_path / "j.yml"), "--tests", str(tmp_path / "unit")])
    err = capsys.readouterr().err
    assert status == 1, err
    assert "not an AlertRule" in err and "nothing written" in err
    assert list(tmp_path.iterdir()) == []


def test_good_settings_still_write_the_rules(tmp_path: Path) -> None:
    done = run_cli("alerts", "--set", "stall.factor=5", "-o", tmp_path / "j.yml")
    assert done.returncode == 0, done.stderr
    assert "alerting rules written" in done.stderr
    default = run_cli("alerts")
    assert default.returncode == 0 and default.stdout
    assert (tmp_path / "j.yml").read_text() != default.stdout  # the threshold is in it


def _places(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "folder").mkdir()
    (tmp_path / "file.jsonl").write_text("{}\n")
    return {
        "folder": tmp_path / "folder",
        "file": tmp_path / "file.jsonl",
        "under a file": tmp_path / "file.jsonl" / "x.yml",
        "proc": Path("/proc/rlmetrics-test/x"),  # a folder nobody can create
    }


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("-o", "folder"), "is a folder"),
        (("-o", "under a file"), "is a file"),
        (("--tests", "file"), "is a file"),
        (("--tests", "under a file"), "is a file"),
        (("--tests", "proc"), "/proc/rlmetrics-test"),
        (("--recording-rules", "folder"), "is a folder"),
        (("-o", "new/partial.yml", "--tests", "file"), "is a file"),
        (("-o", "new/partial.yml", "--tests", "proc"), "/proc/rlmetrics-test"),
    ],
)
def test_a_place_nothing_can_be_written_is_one_line_and_nothing_is_written(
    tmp_path: Path, args: tuple[str, ...], named: str
) -> None:
    """Before: a traceback (IsADirectoryError, FileExistsError, NotADirectoryError...), and
    with -o first, the rules file written before --tests failed."""
    places = _places(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    given = [a if a.startswith("-") else str(places.get(a, tmp_path / a)) for a in args]
    done = run_cli("alerts", *given)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("rlmetrics alerts: ") and named in line, line
    assert line.endswith("; nothing written")
    assert done.stdout == ""
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("host_memory.share=90", "host_memory.share=90: a share is a fraction of 1 (0.9 for 90%)"),
        ("gym.unhealthy_share=5", "gym.unhealthy_share=5: a share is a fraction of 1"),
        ("stall.factor=-1", "stall.factor=-1: a threshold is a finite number, 0 or more"),
        ("stall.min_s=nan", "stall.min_s=nan: a threshold is a finite number, 0 or more"),
        ("vllm.restart_window_s=inf", "vllm.restart_window_s=inf: a threshold is a finite"),
    ],
)
@pytest.mark.parametrize("command", ["alerts", "stack"])
def test_a_threshold_out_of_its_range_is_one_line_and_nothing_is_written(
    tmp_path: Path, setting: str, said: str, command: str
) -> None:
    """Before: --set host_memory.share=90 wrote a rule that could never fire (90 times the
    memory), and stall.factor=-1 one that fired on every run."""
    where = ["-o", tmp_path / "r.yml"] if command == "alerts" else ["--dir", tmp_path / "s"]
    extra = ["--no-start"] if command == "stack" else []
    done = run_cli(command, "--set", setting, *where, *extra)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"rlmetrics {command}: --set {said}"), line
    assert list(tmp_path.iterdir()) == []
