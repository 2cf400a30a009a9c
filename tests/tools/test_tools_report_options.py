"""``rlmetrics report`` options a practitioner reaches for: ``--steps A:B``, ``--tail N``,
``--keys`` (what the picture draws), panels only for what the run logged, and a long run's
step table summarised (issue 25)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tools_support import run_cli

from rlmetrics.report.plot import panels
from rlmetrics.report.select import StepSelection
from rlmetrics.report.summary import build_report


def _row(step: int, prefix: str, metrics: dict[str, Any]) -> dict[str, Any]:
    return {"time": float(step), "run_id": "r1", "step": step, "prefix": prefix, "metrics": metrics}


def _run(steps: int, efficiency: bool = True) -> list[dict[str, Any]]:
    rows = []
    for step in range(1, steps + 1):
        train: dict[str, Any] = {"reward": step / 100, "kl_penalty": 0.01, "loss": 1 / step}
        if efficiency:
            train["efficiency/step_wall_time_s"] = 10.0
            train["efficiency/idle/buffer_starvation_s"] = 1.0
        rows.append(_row(step, "train", train))
        if step % 5 == 0:
            rows.append(_row(step, "validation", {"accuracy": step / 50}))
    return rows


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_steps_reports_that_range_and_judges_regressions_on_every_step(tmp_path: Path) -> None:
    jsonl = _write(tmp_path / "run.jsonl", _run(30))
    done = run_cli("report", jsonl, "--steps", "3:5", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [s["step"] for s in result["steps"]] == [3, 4, 5]
    assert (result["selection"], result["steps_logged"]) == ("steps 3:5", 30)
    assert result["trends"]["reward"]["first"] == 0.03
    # 3 steps are too short to judge; the whole run is not.
    assert result["regressions"]["status"] != "too_short"
    text = run_cli("report", jsonl, "--steps", "28:")
    assert "Showing steps 28:: 3 of the 30 steps logged" in text.stdout


def test_tail_reports_the_last_steps(tmp_path: Path) -> None:
    jsonl = _write(tmp_path / "run.jsonl", _run(12))
    done = run_cli("report", jsonl, "--tail", "2", "--json")
    assert done.returncode == 0, done.stderr
    assert [s["step"] for s in json.loads(done.stdout)["steps"]] == [11, 12]


@pytest.mark.parametrize(
    "args",
    [
        ("--steps", "5:3"),
        ("--steps", "a:b"),
        ("--tail", "0"),
        ("--tail", "2", "--steps", "1:2"),
        ("--keys", "reward"),  # --keys chooses what --plot draws
        ("--table-rows", "0"),
    ],
)
def test_a_bad_choice_is_one_line_and_status_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    jsonl = _write(tmp_path / "run.jsonl", _run(3))
    done = run_cli("report", jsonl, *args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len([line for line in done.stderr.splitlines() if "error" in line or "--" in line])


def test_keys_choose_the_panels_in_the_order_named(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    jsonl = _write(tmp_path / "run.jsonl", _run(10))
    picture = tmp_path / "keys.png"
    done = run_cli("report", jsonl, "--keys", "validation/accuracy,reward", "--plot", picture)
    assert done.returncode == 0, done.stderr
    assert picture.stat().st_size > 0
    result = json.loads(
        run_cli(
            "report", jsonl, "--keys", "validation/accuracy,reward", "--plot", picture, "--json"
        ).stdout
    )
    assert list(result["series"]) == ["validation/accuracy", "reward"]
    assert result["series"]["validation/accuracy"] == [[5, 0.1], [10, 0.2]]


def test_an_unknown_key_is_named_with_the_close_ones(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    jsonl = _write(tmp_path / "run.jsonl", _run(3))
    done = run_cli("report", jsonl, "--keys", "rewrad", "--plot", tmp_path / "x.png")
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert "'rewrad'" in line and "did you mean reward" in line
    assert not (tmp_path / "x.png").exists()


def test_a_run_with_only_reward_kl_and_loss_plots_those_only() -> None:
    report = build_report(_run(5, efficiency=False))
    assert [name for name, _ in panels(report)] == ["reward", "kl", "loss"]
    full = build_report(_run(5))
    assert [name for name, _ in panels(full)] == ["goodput", "reward", "kl", "loss"]
    assert panels(build_report([_row(1, "train", {"lr": 1e-6})])) == []


def test_a_run_with_nothing_to_draw_writes_no_picture(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    jsonl = _write(tmp_path / "run.jsonl", [_row(1, "train", {"lr": 1e-6})])
    done = run_cli("report", jsonl, "--plot", tmp_path / "x.png")
    assert done.returncode == 1
    assert "--keys" in done.stderr and not (tmp_path / "x.png").exists()


def _table(stdout: str) -> list[str]:
    lines = stdout.split("Per step")[1].splitlines()[1:]
    return [line for line in lines if line.startswith("  ") and not line.startswith("  (")]


def test_a_long_runs_step_table_is_summarised(tmp_path: Path) -> None:
    jsonl = _write(tmp_path / "run.jsonl", _run(40))
    done = run_cli("report", jsonl)
    assert done.returncode == 0, done.stderr
    rows = _table(done.stdout)
    steps = [line.split()[0] for line in rows[1:]]  # after the header
    assert steps[:6] == ["1", "2", "3", "4", "5", "…"]
    assert steps[6:21] == [str(s) for s in range(26, 41)]
    assert steps[21] == "mean"
    assert re.search(r"\(40 steps: 20 not shown", done.stdout)
    everything = run_cli("report", jsonl, "--table-rows", "40")
    assert [line.split()[0] for line in _table(everything.stdout)[1:41]] == [
        str(s) for s in range(1, 41)
    ]
    assert "not shown" not in everything.stdout


@given(
    st.lists(st.integers(0, 50), max_size=30),
    st.one_of(st.none(), st.integers(0, 50)),
    st.one_of(st.none(), st.integers(0, 50)),
)
def test_a_selection_keeps_exactly_its_steps(
    logged: list[int], first: int | None, last: int | None
) -> None:
    selection = StepSelection(first, last)
    kept = selection.steps(logged)
    assert kept == {
        s for s in logged if (first is None or s >= first) and (last is None or s <= last)
    }
    assert StepSelection(tail=3).steps(logged) == set(sorted(set(logged))[-3:])


@given(st.text(max_size=12))
def test_parsing_a_selection_returns_one_or_says_why(text: str) -> None:
    try:
        selection = StepSelection.parse(text)
    except ValueError as exc:
        assert repr(text) in str(exc)
    else:
        assert selection.tail is None
        if selection.first is not None and selection.last is not None:
            assert selection.first <= selection.last
