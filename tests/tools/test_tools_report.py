"""``rlmetrics report``: the measurement and window rules kept, a torn last line tolerated,
JSON parsed, the PNG decoded at its stated size, and a clear message without matplotlib."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from tools_support import not_run_files, run_cli

import rlmetrics
from rlmetrics.events import WALL_TIME_KEY as WALL
from rlmetrics.report.plot import PLOT_SIZE_PX
from rlmetrics.report.summary import build_report

IDLE = "efficiency/idle/buffer_starvation_s"


def _row(step: int, prefix: str, metrics: dict[str, Any]) -> dict[str, Any]:
    return {"time": 0.0, "step": step, "prefix": prefix, "metrics": metrics}


ROWS = [
    _row(
        0,
        "timing/setup",
        {
            "policy_init_time_s": 80.0,
            "generation_init_time_s": 90.0,
            "parallel_wall_time_s": 95.0,
            "total_setup_time_s": 120.0,
            "parallel_init_enabled": True,
        },
    ),
    _row(
        0,
        "timing/rollout_recovery",
        {"tq_load_seconds": 6.0, "total_load_seconds": 7.5, "telemetry/wall_time_seconds": 1000.0},
    ),
    _row(
        1,
        "train",
        {
            "reward": 0.2,
            "kl_penalty": 0.01,
            "loss": 0.05,
            "efficiency/step_wall_time_s": 10.0,
            "efficiency/idle/buffer_starvation_s": 2.0,
            "efficiency/idle/refit_bubble_s": 1.0,
            "efficiency/init/total_s": 100.0,
            "efficiency/idle/refit_event_wait_s": 3.0,
            "efficiency/idle/buffer_full_backoff_s": 40.0,
            "efficiency/total_wall_time_s": 110.0,
            "efficiency/efficiency_pct": 70.0,
            "efficiency/efficiency_pct_is_per_step": 1.0,
            "vllm/prompt_tokens": 100,
            "vllm/generation_tokens": 400,
            "vllm/generations_ok": 9,
            "vllm/generations_failed": 1,
            "vllm/generation_length_mean": 40.0,
        },
    ),
    _row(
        0,
        "timing/rollout_checkpoint",
        {
            "tq_save_seconds": 3.0,
            "barrier_wait_seconds": 0.5,
            "total_save_seconds": 3.5,
            "telemetry/wall_time_seconds": 1100.0,
        },
    ),
    _row(
        0,
        "rollout/checkpoint_outcome",
        {"completed": 1.0, "failed": 0.0, "skipped": 0.0, "telemetry/wall_time_seconds": 1100.0},
    ),
    _row(
        2,
        "train",
        {
            "reward": 0.4,
            "kl_penalty": 0.02,
            "loss": 0.03,
            "efficiency/step_wall_time_s": 10.0,
            "efficiency/idle/buffer_starvation_s": 1.0,
            "efficiency/idle/validation_s": 3.0,
            "efficiency/init/total_s": 100.0,
            "efficiency/idle/refit_event_wait_s": 5.0,
            "efficiency/idle/buffer_full_backoff_s": 80.0,
            "efficiency/total_wall_time_s": 120.0,
        },
    ),
    _row(
        0,
        "rollout/checkpoint_outcome",
        {
            "completed": 0.0,
            "failed": 1.0,
            "skipped": 0.0,
            "reason_storage_error": 1.0,
            "telemetry/wall_time_seconds": 1200.0,
        },
    ),
    _row(
        3,
        "train",
        {
            "reward": 0.5,
            "kl_penalty": 0.03,
            "loss": 0.02,
            "vllm/prompt_tokens": 50,
            "vllm/generation_tokens": 200,
            "vllm/generations_ok": 5,
            "vllm/generations_failed": 0,
            "vllm/generation_length_mean": 40.0,
        },
    ),
    _row(4, "train", {"reward": 0.6, "kl_penalty": 0.03, "loss": 0.01}),
    _row(
        5,
        "train",
        {
            "reward": 0.6,
            "vllm/prompt_tokens": 10,
            "vllm/generation_tokens": 20,
            "vllm/generations_ok": 1,
            "vllm/generations_failed": 0,
        },
    ),
]


def test_goodput_keeps_the_measurement_and_window_rules() -> None:
    report = build_report(ROWS)
    first, second = report.steps[0], report.steps[1]
    # Step-window wall-clock idle against the step's wall time; validation absent = 0 s.
    assert first["idle_s"] == {"idle/buffer_starvation": 2.0, "idle/refit_bubble": 1.0}
    assert first["goodput_pct"] == pytest.approx(70.0) == first["logged_efficiency_pct"]
    assert second["goodput_pct"] == pytest.approx(60.0)
    goodput = report.goodput
    assert goodput["goodput_pct"] == pytest.approx(65.0)
    assert goodput["idle_s"] == {
        "idle/buffer_starvation": 3.0,
        "idle/refit_bubble": 1.0,
        "idle/validation": 3.0,
    }
    # Run-window values: the latest, never a sum across steps; init/total counted once.
    assert goodput["init_total_s"] == 100.0
    assert goodput["collector_wall_clock_s"] == {"idle/refit_event_wait": 5.0}
    # Thread-seconds are saturation (threads busy at once), not time.
    assert goodput["thread_seconds"]["idle/buffer_full_backoff"] == {
        "thread_seconds": 80.0,
        "threads_busy": pytest.approx(80.0 / 120.0),
    }


def test_setup_trends_vllm_and_checkpoints() -> None:
    report = build_report(ROWS)
    assert report.setup is not None and report.setup["total_setup_s"] == 120.0  # as logged
    assert report.trends["reward"]["first"] == 0.2 and report.trends["reward"]["last"] == 0.6
    assert report.vllm is not None
    assert (report.vllm["prompt_tokens"], report.vllm["generations_failed"]) == (160, 1)
    assert report.vllm["failed_share"] == pytest.approx(1 / 16)
    assert report.vllm["steps_without_reading"] == [2, 4]
    checkpoints = report.checkpoints
    assert checkpoints is not None
    assert checkpoints["attempts"] == {"completed": 1, "failed": 1}
    assert checkpoints["reasons"] == {"storage_error": 1}
    assert checkpoints["save_latency_s"]["max"] == 3.5
    assert checkpoints["restores"][0]["phases_s"] == {"tq_load": 6.0}


@given(
    st.lists(
        st.tuples(st.floats(0.01, 1e5), st.floats(0, 1e5), st.floats(0, 1e5), st.floats(0, 1e6)),
        min_size=1,
        max_size=20,
    )
)
def test_goodput_is_a_share_and_run_values_are_never_summed(
    steps: list[tuple[float, float, float, float]],
) -> None:
    rows = [
        _row(
            i + 1,
            "train",
            {
                "efficiency/step_wall_time_s": wall,
                "efficiency/idle/buffer_starvation_s": starved,
                "efficiency/idle/refit_bubble_s": bubble,
                "efficiency/idle/generation_limit_pause_s": collector,
            },
        )
        for i, (wall, starved, bubble, collector) in enumerate(steps)
    ]
    report = build_report(rows)
    for step in report.steps:
        assert 0.0 <= step["goodput_pct"] <= 100.0
    assert 0.0 <= report.goodput["goodput_pct"] <= 100.0
    assert report.goodput["collector_wall_clock_s"] == {"idle/generation_limit_pause": steps[-1][3]}


def _write(path: Path, rows: list[dict[str, Any]], torn: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + torn)
    return path


def test_the_command_reads_a_torn_file_and_prints_json(tmp_path: Path) -> None:
    jsonl = _write(tmp_path / "run.jsonl", ROWS, torn='{"time": 1, "step": 6, "pre')
    done = run_cli("report", jsonl, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["rows"], result["skipped_lines"]) == (len(ROWS), 1)
    assert [s["step"] for s in result["steps"]] == [1, 2, 3, 4, 5]
    assert result["plot"] is None
    text = run_cli("report", jsonl)
    assert text.returncode == 0
    assert "Goodput over 2 steps: 65.0%" in text.stdout
    assert "1 unreadable line skipped" in text.stdout
    assert "no engine reading at steps [2, 4]" in text.stdout


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    done = run_cli("report", tmp_path / "nope.jsonl")
    assert done.returncode == 2 and "no such file" in done.stderr


def test_plot_writes_a_png_of_the_stated_size(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from PIL import Image

    jsonl = _write(tmp_path / "run.jsonl", ROWS)
    done = run_cli("report", jsonl, "--plot", tmp_path / "run.png", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["plot"] == str(tmp_path / "run.png")
    with Image.open(tmp_path / "run.png") as image:
        assert image.format == "PNG"
        assert image.size == PLOT_SIZE_PX == (1600, 1000)
        image.load()  # decodes every pixel
        assert len(image.getcolors(maxcolors=1 << 20) or ()) > 10  # something was drawn


def test_plot_without_matplotlib_names_the_extra(tmp_path: Path) -> None:
    jsonl = _write(tmp_path / "run.jsonl", ROWS)
    # A user without the extra: matplotlib cannot be imported.
    script = textwrap.dedent(
        f"""
        import sys

        class NoMatplotlib:
            def find_spec(self, name, path=None, target=None):
                if name == "matplotlib" or name.startswith("matplotlib."):
                    raise ModuleNotFoundError(f"No module named {{name!r}}")
                return None

        sys.meta_path.insert(0, NoMatplotlib())
        from rlmetrics.cli import main
        sys.exit(main(["report", {str(jsonl)!r}, "--plot", {str(tmp_path / "x.png")!r}]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "pip install 'rlmetrics[report]'" in done.stderr
    assert not (tmp_path / "x.png").exists()


def test_signals_reward_components_datasets_vllm_state_and_gpus() -> None:
    from rlmetrics.report.text import render

    def train(step: int, **metrics: Any) -> dict[str, Any]:
        return {"step": step, "prefix": "train", "metrics": metrics}

    rows = [
        train(1, **{"reward/format": 1.0, "reward/accuracy": 0.2, "vllm/awake_share": 0.5}),
        train(
            2,
            **{
                "reward/format": 0.8,
                "reward/accuracy": 0.4,
                "reward/mean": 9.0,  # the total's statistic, not a component
                "validation/gsm8k/accuracy": 0.7,
                "vllm/awake_share": 0.7,
                "vllm/prefix_cache_hit_rate": 0.25,
            },
        ),
        {"step": 3, "prefix": "ray", "metrics": {"node.0.gpu.1.util": 50.0, "ray_step": 3}},
        {
            "step": 13,
            "prefix": "ray",
            "metrics": {"node.0.gpu.1.util": 70.0, "node.0.gpu.1.mem_gb": 40.0},
        },
    ]
    signals = build_report(rows).signals
    assert signals == {
        "reward_components": {
            "accuracy": {"mean": 0.30000000000000004, "last": 0.4, "steps": 2},
            "format": {"mean": 0.9, "last": 0.8, "steps": 2},
        },
        "validation_datasets": {"gsm8k": {"accuracy": 0.7}},
        "vllm": {
            "awake_share": {"mean": 0.6, "last": 0.7, "steps": 2},
            "prefix_cache_hit_rate": {"mean": 0.25, "last": 0.25, "steps": 1},
        },
        "gpus": {"node.0.gpu.1": {"util_mean_pct": 60.0, "mem_gb_max": 40.0, "readings": 2}},
    }
    text = render(build_report(rows))
    assert "Reward components" in text and "node.0.gpu.1" in text and "awake_share" in text
    assert build_report([train(1, reward=0.5)]).signals is None


# -- what a newcomer gets wrong: one line, the exit status that says so (issue 25, 1-3) ---------


def test_plot_into_a_missing_folder_is_one_line_and_status_2(tmp_path: Path) -> None:
    jsonl = _write(tmp_path / "run.jsonl", ROWS)
    done = run_cli("report", jsonl, "--plot", tmp_path / "nodir" / "x.png")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert "nodir" in line and "no such folder" in line
    assert not (tmp_path / "nodir").exists()


@pytest.mark.parametrize(("suffix", "magic"), [(".jpg", b"\xff\xd8\xff"), (".svg", b"<?xml")])
def test_plot_writes_the_format_its_suffix_names(tmp_path: Path, suffix: str, magic: bytes) -> None:
    pytest.importorskip("matplotlib")
    jsonl = _write(tmp_path / "run.jsonl", ROWS)
    picture = tmp_path / f"run{suffix}"
    done = run_cli("report", jsonl, "--plot", picture)
    assert done.returncode == 0, done.stderr
    assert picture.read_bytes().startswith(magic)


def test_plot_refuses_a_suffix_no_format_has(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    jsonl = _write(tmp_path / "run.jsonl", ROWS)
    done = run_cli("report", jsonl, "--plot", tmp_path / "run.xyz")
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert "'.xyz'" in line and ".png" in line and ".svg" in line
    assert not (tmp_path / "run.xyz").exists()


def test_a_folder_is_said_to_be_one_and_its_jsonl_named(tmp_path: Path) -> None:
    _write(tmp_path / "metrics.jsonl", ROWS)
    (tmp_path / "metrics.samples.jsonl").write_text("")
    done = run_cli("report", tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert "is a folder" in line and "no such file" not in line
    assert str(tmp_path / "metrics.jsonl") in line
    assert "samples" not in line  # a samples file is no run's metrics


def test_a_corrupted_file_counts_every_bad_line_and_says_so_once(tmp_path: Path) -> None:
    good = [json.dumps(r) for r in ROWS[:3]]
    bad = [
        "[1, 2, 3]",  # JSON, not an object
        '{"step": "abc", "metrics": 5}',  # an object, not a metrics row
        '{"step": "abc", "prefix": "train", "metrics": {"reward": 1}}',  # a step that is no int
        "{not json",
        *[f"garbage {i}" for i in range(12)],
    ]
    jsonl = tmp_path / "run.jsonl"
    jsonl.write_text("\n".join([*good, *bad, json.dumps(ROWS[3])]) + "\n" + '{"torn": ')
    done = run_cli("report", jsonl, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["rows"], result["skipped_lines"]) == (4, len(bad) + 1)
    assert "runs" not in result  # the bad rows made no run of their own
    text = run_cli("report", jsonl)
    assert text.returncode == 0
    assert f"{len(bad) + 1} unreadable lines skipped" in text.stdout
    # One line about them, naming the first few and why, not one line per bad line.
    said = [line for line in text.stderr.splitlines() if line.strip()]
    assert len(said) == 1, text.stderr
    assert "line 4 (not a JSON object)" in said[0]
    assert "line 5 (metrics is not an object)" in said[0]
    assert "line 6 (step is not an integer)" in said[0]
    assert "line 7 (not JSON)" in said[0]
    assert f"and {len(bad) + 1 - 5} more" in said[0]


# -- a value no float holds costs only itself (before: OverflowError out of report and query) --

#: Any number JSON carries: ints of any size (10**400 parses, and no float holds it), floats,
#: NaN and the infinities (the JSONL backend writes them as NaN and Infinity). The finite
#: floats stay where a sum of a few cannot pass float's largest (a run's total wall time is
#: then inf, honestly: test_finite_values_near_floats_limit_cost_no_report has those).
JSON_NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=2**1024).map(lambda n: n * 10**300),
    st.floats(-1e300, 1e300),
    st.sampled_from([float("nan"), float("inf"), float("-inf")]),
)


@given(st.lists(JSON_NUMBERS, min_size=1, max_size=6), st.sampled_from(sorted(ROWS[2]["metrics"])))
def test_a_number_no_float_holds_costs_only_itself(values: list[Any], key: str) -> None:
    from rlmetrics.report.regressions import find_regressions

    rows = [
        _row(step, "train", {key: value, "reward": 0.5 + step})
        for step, value in enumerate(values, start=1)
    ]
    rows += [_row(step, "ray", {"node.0.mem_gb": value}) for step, value in enumerate(values)]
    report = build_report(rows)  # regressions and signals included
    find_regressions(rows)
    if key != "reward":
        assert report.trends["reward"]["last"] == 0.5 + len(values)
    json.dumps(report.as_dict(), allow_nan=False)  # --json prints finite numbers only


def test_report_and_query_read_a_run_holding_a_huge_int(tmp_path: Path) -> None:
    rows = [
        {**_row(step, "train", {"reward": 10**400 if step == 2 else 0.1 * step}), "time": step}
        for step in range(1, 4)
    ]
    rows.append({**_row(3, "", {"efficiency/step_wall_time_s": 10**400}), "time": 3})
    jsonl = _write(tmp_path / "run.jsonl", rows)
    done = run_cli("report", jsonl, "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    trend = json.loads(done.stdout)["trends"]["reward"]
    assert (trend["first"], trend["last"]) == (0.1, pytest.approx(0.3))
    query = run_cli("query", jsonl)
    assert query.returncode in (0, 1) and "Traceback" not in query.stderr, query.stderr
    assert json.loads(query.stdout)["last_values"]["train/reward"]["step"] == 3


def _strict(text: str) -> Any:
    """``text`` as strict JSON: Infinity and NaN are not JSON, and jq, JavaScript's
    JSON.parse and Go's encoding/json refuse the whole document over one of them."""

    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_sum_past_floats_largest_prints_strict_json_and_says_so(tmp_path: Path) -> None:
    """Before: four step times of 1e308 summed to inf, and --json printed ``Infinity`` (not
    JSON) for the run's step wall time and idle seconds. Now null, and one line on stderr
    names each value no float holds."""
    rows = [
        _row(step, "", {"efficiency/step_wall_time_s": 1e308, IDLE: 1e308}) for step in range(1, 5)
    ]
    done = run_cli("report", _write(tmp_path / "run.jsonl", rows), "--json")
    assert done.returncode == 0, done.stderr
    goodput = _strict(done.stdout)["goodput"]
    assert goodput["step_wall_time_s"] is None
    assert goodput["idle_s"] == {"idle/buffer_starvation": None}
    assert [s["wall_time_s"] for s in _strict(done.stdout)["steps"]] == [1e308] * 4
    [said] = done.stderr.splitlines()
    assert said.startswith("rlmetrics report: 2 values past float's range printed as null:")
    assert "goodput.step_wall_time_s" in said and "goodput.idle_s.idle/buffer_starvation" in said


@pytest.mark.parametrize("kind", ["traces", "samples", "csv", "binary", "empty"])
def test_a_file_with_no_metrics_row_is_refused_in_one_line(tmp_path: Path, kind: str) -> None:
    """A traces, samples, CSV, binary or empty file given as the run: before, an empty report
    and exit 0, as if the run had logged nothing."""
    given = not_run_files(tmp_path)[kind]
    done = run_cli("report", given)
    assert done.returncode == 2 and done.stdout == "", done.stdout
    [line] = done.stderr.splitlines()
    assert line.startswith(f"rlmetrics report: {given} is not a run's metrics JSONL: ")
    assert "metrics.jsonl" in line  # what to give instead
    if kind == "traces":
        assert "--traces" in line


@given(
    st.lists(st.floats(-1e308, 1e308), min_size=1, max_size=4),
    st.sampled_from(
        [
            "efficiency/step_wall_time_s",
            "efficiency/idle/buffer_starvation_s",
            "efficiency/idle/buffer_full_backoff_s",
            "efficiency/total_wall_time_s",
            "vllm/generation_tokens",
            "vllm/generation_length_mean",
            "reward",
        ]
    ),
)
def test_a_huge_finite_value_prints_in_a_few_characters(values: list[float], key: str) -> None:
    """Before: 1e308 printed with '.1f', a 309-digit number that pushed the per-step table
    and its section lines hundreds of characters wide."""
    from rlmetrics.report.text import render

    rows = [
        _row(step, "train", {**ROWS[2]["metrics"], key: value})
        for step, value in enumerate(values, start=1)
    ]
    rows += [
        _row(0, "timing/setup", {"total_setup_time_s": values[0], "policy_init_time_s": 1.0}),
        _row(
            0,
            "timing/rollout_checkpoint",
            {"total_save_seconds": values[-1], "telemetry/wall_time_seconds": 1.0},
        ),
    ]
    text = render(build_report(rows))
    assert re.search(r"\d{16}", text) is None, text


@pytest.mark.parametrize("option", ["--plot", "--html", "--timeline", "--perfetto"])
@pytest.mark.parametrize("where", ["under a file", "a folder", "no folder"])
def test_every_output_option_names_the_same_mistake_the_same_way(
    tmp_path: Path, option: str, where: str
) -> None:
    """Before: --html under a file said 'no such folder' (it is a file), --plot said 'is not
    a folder', and --perfetto was not checked at all (a traceback-free failure after the
    report was read)."""
    jsonl = _write(tmp_path / "run.jsonl", ROWS)
    traces = tmp_path / "traces.jsonl"
    traces.write_text("")
    suffix = {"--html": ".html", "--perfetto": ".json"}.get(option, ".png")
    given = {
        "under a file": jsonl / f"x{suffix}",
        "a folder": tmp_path,
        "no folder": tmp_path / "nodir" / f"x{suffix}",
    }[where]
    expected = {
        "under a file": f"{option} {given}: {jsonl} is a file, not a folder",
        "a folder": f"{option} {given} is a folder: name a file",
        "no folder": f"{option} {given}: no such folder {given.parent} (create it first)",
    }[where]
    done = run_cli("report", jsonl, "--traces", traces, option, given)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [f"rlmetrics report: {expected}"]


@pytest.mark.parametrize("huge", [8.988465674311579e307, 1.7976931348623157e308])
def test_finite_values_near_floats_limit_cost_no_report(huge: float) -> None:
    """Found by the property above: two finite values near float's limit made every mean
    raise OverflowError ('intermediate overflow in fsum'), and ended the report. Over 30
    steps, so the regressions' means and spreads are computed too."""
    from rlmetrics.report.regressions import find_regressions

    keys = [
        "reward",
        "efficiency/step_wall_time_s",
        "efficiency/idle/buffer_starvation_s",
        "vllm/generation_length_mean",
        "vllm/awake_share",
        "reward/format",
    ]
    rows = [
        {**_row(step, "train", {key: huge for key in keys}), "time": float(step)}
        for step in range(1, 31)
    ]
    rows += [_row(step, "ray", {"node.0.gpu.0.util": huge}) for step in (1, 2)]
    rows += [
        _row(0, "timing/rollout_checkpoint", {"total_save_seconds": huge, WALL: 1.0}),
        _row(0, "timing/rollout_checkpoint", {"total_save_seconds": huge, WALL: 2.0}),
    ]
    report = build_report(rows)
    trend = report.trends["reward"]
    assert trend["first_quarter_mean"] == trend["last"] == huge
    find_regressions(rows)


@given(st.lists(st.floats(-1.7976931348623157e308, 1.7976931348623157e308), min_size=1))
# Found by CI: halving the two middle values first underflows the smallest subnormal to 0.
@example([5e-324, 5e-324])
@example([-1.7976931348623157e308, 1.7976931348623157e308])
@example([1.7976931348623157e308, 1.7976931348623157e308])
def test_a_mean_and_a_median_of_finite_values_are_finite_and_between_them(
    values: list[float],
) -> None:
    from rlmetrics.report.numbers import mean, median

    for middle in (mean(values), median(values)):
        assert min(values) <= middle <= max(values)


@pytest.mark.parametrize("tool", [("report",), ("query",), ("check", "--run")])
def test_a_run_that_logged_only_samples_yet_is_said_so_not_called_the_wrong_file(
    tmp_path: Path, tool: tuple[str, ...]
) -> None:
    """Before: a run that had logged only samples so far (its metrics.jsonl empty, its rows in
    metrics.samples.jsonl) was told "is not a run's metrics JSONL: it is empty; give the file
    the Logger's jsonl backend writes (run/metrics.jsonl)": the very file given."""
    jsonl = tmp_path / "metrics.jsonl"
    with rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}, run_id="early") as logger:
        logger.log_samples([{"prompt": "2+2", "completion": "4", "reward": 1.0}], step=1)
    assert jsonl.read_bytes() == b""
    done = run_cli(*tool, jsonl)
    assert done.returncode == 2, done.stdout
    [line] = done.stderr.splitlines()
    assert f"{jsonl} is empty: its run has logged no metrics row yet, only samples " in line
    assert str(tmp_path / "metrics.samples.jsonl") in line
    assert "give the file the Logger's jsonl backend writes" not in line


@pytest.mark.parametrize("tail", [".1", ".1.gz", "-20261207.xz"])
def test_a_rotated_run_is_reported_with_its_samples_rotated_beside_it(
    tmp_path: Path, tail: str
) -> None:
    """Before: ``report metrics.jsonl.1.gz`` looked for its samples in
    ``metrics.jsonl.1.samples.gz`` (the writer's name for a file called ``metrics.jsonl.1``),
    so a run logrotate had rotated lost its Samples section unsaid, though the samples file was
    rotated beside it as ``metrics.samples.jsonl.1.gz`` (the name `rlmetrics mcp` lists)."""
    import bz2
    import gzip
    import lzma

    jsonl = tmp_path / "metrics.jsonl"
    with rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger:
        for step in (1, 2):
            logger.log_metrics({"reward": step / 10}, step=step, prefix="train")
            logger.log_samples([{"prompt": "2+2", "completion": "4", "reward": 1.0}], step=step)
    plain = json.loads(run_cli("report", jsonl, "--json").stdout)["samples"]
    assert plain["rows"] == 2
    pack = {".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress}
    for name in ("metrics.jsonl", "metrics.samples.jsonl"):
        data = (tmp_path / name).read_bytes()
        for suffix, compress in pack.items():
            if tail.endswith(suffix):
                data = compress(data)
        (tmp_path / f"{name}{tail}").write_bytes(data)
    done = run_cli("report", tmp_path / f"metrics.jsonl{tail}", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["samples"] == plain


@pytest.mark.parametrize("wall", [False, True])
def test_one_of_a_thing_is_said_as_one(tmp_path: Path, wall: bool) -> None:
    """Before: 'Run report: m.jsonl (1 rows)' and 'too short to judge: 1 step times, from the
    time between logged steps' (or '1 steps with a step time')."""
    jsonl = tmp_path / "m.jsonl"
    metrics = {"reward": 0.5, **({"efficiency/step_wall_time_s": 2.0} if wall else {})}
    with rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger:
        logger.log_metrics(metrics, step=1, prefix="train")
        if not wall:  # one time between two logged steps
            logger.log_metrics(metrics, step=2, prefix="train")
    done = run_cli("report", jsonl)
    assert done.returncode == 0, done.stderr
    assert f"Run report: {jsonl} ({1 if wall else 2} row{'' if wall else 's'})" in done.stdout
    said = "1 step with a step time;" if wall else "1 step time, from the time between"
    assert f"too short to judge: {said}" in done.stdout
