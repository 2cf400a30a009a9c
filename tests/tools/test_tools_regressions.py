"""``rlmetrics report``'s step-time regressions, on seeded runs: a 2x slowdown from step 30 is
found and the series that caused it ranks first (whichever family's group it belongs to);
noise alone flags nothing; a 5-step run is too short to judge."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tools_support import run_cli

from rlmetrics.report.regressions import (
    BASELINE_STEPS,
    CONFIRM_WINDOW,
    find_regressions,
    render_regressions,
)

#: The causes a seeded run can slow down from, and the series each one moves.
CAUSES = {
    "efficiency": ("idle/buffer_starvation", "efficiency"),
    "engine": ("vllm/generation_length_mean", "engine"),
    "host memory": ("ray/node.0.mem_gb", "host memory"),
    "gym": ("gym/rollout/duration_ms", "gym"),
}


def seeded_run(
    seed: int, steps: int = 60, slowdown_from: int | None = None, cause: str = "efficiency"
) -> list[dict[str, Any]]:
    """A run's JSONL rows: every group's series with noise; from ``slowdown_from`` the step
    takes twice as long, because ``cause`` moved."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    collector = thread_seconds = 0.0
    now = 1_800_000_000.0
    for step in range(1, steps + 1):
        productive = rng.gauss(16.0, 0.8)
        starvation = abs(rng.gauss(2.0, 0.3))
        refit = abs(rng.gauss(2.0, 0.3))
        length, tokens = rng.gauss(400.0, 20.0), rng.gauss(12_000.0, 600.0)
        memory, duration_ms = rng.gauss(120.0, 2.0), rng.gauss(900.0, 60.0)
        collector += abs(rng.gauss(1.5, 0.2))
        thread_seconds += abs(rng.gauss(8.0, 1.0))
        if slowdown_from is not None and step >= slowdown_from:
            extra = productive + starvation + refit  # the step takes twice as long
            if cause == "efficiency":
                starvation += extra
            else:
                productive += extra
                if cause == "engine":
                    length *= 2
                elif cause == "host memory":
                    memory += 100.0  # swapping
                elif cause == "gym":
                    duration_ms *= 3
        wall = productive + starvation + refit
        now += wall
        rows.append(
            {
                "time": now,
                "step": step,
                "prefix": "train",
                "metrics": {
                    "reward": rng.random(),
                    "lr": 1e-6 * step,  # a trend, in no group: never ranked
                    "efficiency/step_wall_time_s": wall,
                    "efficiency/idle/buffer_starvation_s": starvation,
                    "efficiency/idle/refit_bubble_s": refit,
                    "efficiency/init/total_s": 100.0,
                    "efficiency/idle/refit_event_wait_s": collector,
                    "efficiency/idle/buffer_full_backoff_s": thread_seconds,
                    "efficiency/total_wall_time_s": now - 1_800_000_000.0,
                    "vllm/generation_length_mean": length,
                    "vllm/generation_tokens": tokens,
                },
            }
        )
        rows.append(
            {
                "time": now,
                "step": step,
                "prefix": "ray",
                "metrics": {"node.0.mem_gb": memory, "node.1.mem_gb": rng.gauss(100.0, 2.0)},
            }
        )
        for _ in range(4):
            rows.append(
                {
                    "time": now,
                    "step": step,
                    "prefix": "gym/rollout",
                    "metrics": {"duration_ms": duration_ms + rng.gauss(0, 30), "reward": 1.0},
                }
            )
        rows.append(  # a wall-clock stream: never on the step axis
            {
                "time": now,
                "step": step,
                "prefix": "rollout/throughput",
                "metrics": {"committed_groups_per_second": 1.0, "telemetry/wall_time_seconds": now},
            }
        )
    return rows


@pytest.mark.parametrize("cause", sorted(CAUSES))
def test_a_2x_slowdown_from_step_30_is_found_and_its_cause_ranks_first(cause: str) -> None:
    series, group = CAUSES[cause]
    report = find_regressions(seeded_run(seed=3, slowdown_from=30, cause=cause))
    assert report.status == "judged"
    assert report.baseline_steps == (1, BASELINE_STEPS)
    (regression,) = report.regressions
    assert (regression.start, regression.end) == (30, 60)
    assert 1.8 < regression.ratio < 2.2
    assert regression.step_time_p50_s is not None  # 31 steps: a p50 can be read
    top = regression.moved[0]
    assert (top.series, top.group) == (series, group)
    assert top.correlation > 0.5  # a step against a step: within-group order is noise
    listed = {m.series for m in regression.moved}
    assert "lr" not in listed and "init/total" not in listed
    if cause == "efficiency":
        assert top.measurement == "wall_clock"
        assert top.explains is not None and 0.9 < top.explains < 1.1
    else:
        assert top.explains is None  # not seconds of the step


@pytest.mark.parametrize("seed", range(8))
def test_noise_alone_flags_nothing(seed: int) -> None:
    report = find_regressions(seeded_run(seed=seed, steps=80))
    assert report.status == "judged"
    assert report.regressions == ()


def test_one_slow_step_is_noise_not_a_regression() -> None:
    rows = seeded_run(seed=1)
    for row in rows:
        if row["step"] == 40 and row["prefix"] == "train":
            row["metrics"]["efficiency/step_wall_time_s"] *= 3
    report = find_regressions(rows)
    assert report.regressions == () and report.slow_steps == (40,)
    assert "1 slow step(s) alone" in report.reason


def test_a_5_step_run_is_too_short_to_judge() -> None:
    report = find_regressions(seeded_run(seed=0, steps=5))
    assert report.status == "too_short"
    assert report.steps == 5 and report.regressions == ()
    assert report.reason.startswith("too short to judge: 5 steps")


def test_a_short_run_timed_by_its_rows_says_where_its_step_times_come_from() -> None:
    # The README quickstart's run: no step_wall_time_s, so the report's goodput says none
    # carried one; the verdict here must not read as if some did ("2 steps with a step time").
    rows = seeded_run(seed=0, steps=3)
    for row in rows:
        row["metrics"].pop("efficiency/step_wall_time_s", None)
    report = find_regressions(rows)
    assert report.status == "too_short" and report.steps == 2
    assert report.reason.startswith(
        "too short to judge: 2 step times, from the time between logged steps (no step "
        "carries efficiency/step_wall_time_s);"
    ), report.reason


def test_without_a_step_wall_time_the_rows_times_are_the_step_time() -> None:
    rows = seeded_run(seed=2, slowdown_from=30)
    for row in rows:
        row["metrics"].pop("efficiency/step_wall_time_s", None)
    report = find_regressions(rows)
    assert report.step_time_source == "time between logged steps"
    (regression,) = report.regressions
    assert regression.start in (30, 31)  # the first gap that spans a slow step


def test_the_report_shows_the_regression_and_what_moved(tmp_path: Path) -> None:
    jsonl = tmp_path / "run.jsonl"
    rows = seeded_run(seed=3, slowdown_from=30, cause="efficiency")
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in rows))
    text = run_cli("report", jsonl)
    assert text.returncode == 0, text.stderr
    section = text.stdout.split("Step-time regressions:")[1]
    assert "over steps 1-20 (efficiency/step_wall_time_s); a step is slow above" in section
    assert "steps 30-60: 2." in section
    first = section.split("1. ")[1].splitlines()[0]
    assert first.startswith("efficiency   idle/buffer_starvation (driver wall clock)")
    assert "% of the extra step time" in first
    as_json = json.loads(run_cli("report", jsonl, "--json").stdout)
    regression = as_json["regressions"]["regressions"][0]
    assert regression["moved"][0]["series"] == "idle/buffer_starvation"
    short = tmp_path / "short.jsonl"
    short.write_text("".join(json.dumps(row) + "\n" for row in seeded_run(seed=0, steps=5)))
    assert "too short to judge: 5 steps" in run_cli("report", short).stdout


def _run(times: list[float]) -> list[dict[str, Any]]:
    return [
        {"step": step, "prefix": "train", "metrics": {"efficiency/step_wall_time_s": t}}
        for step, t in enumerate(times, start=1)
    ]


@given(
    noise=st.lists(st.floats(19.0, 21.0), min_size=60, max_size=60),
    spikes=st.sets(st.integers(BASELINE_STEPS, 59), max_size=12),
    height=st.floats(1.5, 20.0),
)
def test_spikes_never_two_in_a_window_of_five_are_never_a_regression(
    noise: list[float], spikes: set[int], height: float
) -> None:
    kept: list[int] = []
    for index in sorted(spikes):  # at most two in any window of five: 3 steps apart
        if not kept or index - kept[-1] >= 3:
            kept.append(index)
    times = [t * height if i in kept else t for i, t in enumerate(noise)]
    assert find_regressions(_run(times)).regressions == ()


@given(
    noise=st.lists(st.floats(19.0, 21.0), min_size=60, max_size=60),
    start=st.integers(BASELINE_STEPS, 60 - CONFIRM_WINDOW),
    length=st.integers(CONFIRM_WINDOW, 40),
    factor=st.floats(1.5, 10.0),
)
def test_a_sustained_slowdown_after_the_baseline_is_always_found_where_it_starts(
    noise: list[float], start: int, length: int, factor: float
) -> None:
    end = min(60, start + length)
    times = [t * factor if start <= i < end else t for i, t in enumerate(noise)]
    regressions = find_regressions(_run(times)).regressions
    assert [(r.start, r.end) for r in regressions] == [(start + 1, end)]


def test_the_baseline_is_described_as_it_is_computed() -> None:
    """The baseline is the first 20 steps however long the run (a longer one would learn a
    slowdown that starts in steps 21-40 as normal): its p50 is what the verdict reads. Before,
    the docs said "p50; p90 from 40", which no run could reach, and a 200-step run's report
    said "p90 needs 40 steps"."""
    report = find_regressions(seeded_run(seed=0, steps=200))
    assert report.baseline_steps == (1, BASELINE_STEPS)
    (baseline,) = [line for line in render_regressions(report.as_dict()) if "baseline:" in line]
    assert "p90" not in baseline and "needs" not in baseline
    docs = Path(__file__).resolve().parents[2] / "docs"
    for page in ("cli.md", "operations.md"):
        text = (docs / page).read_text()
        section = text[text.index("regression") :]
        assert "p90 from 40" not in section and "its p90 40" not in section, page
        assert f"first {BASELINE_STEPS} steps" in section, page


def _slow_tail_run(steps: int, slow_from: int) -> list[dict[str, Any]]:
    """``steps`` steps of 50 s (a little noise), 75 s from ``slow_from`` on: a run that got
    slower for good."""
    return [
        {
            "time": 60.0 * step,
            "step": step,
            "prefix": "train",
            "metrics": {
                "efficiency/step_wall_time_s": (75.0 if step >= slow_from else 50.0)
                + (step % 7) * 0.1
            },
        }
        for step in range(steps)
    ]


def test_a_long_regression_is_judged_in_work_linear_in_its_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each confirmation window asked whether its steps were slow against a set of every slow
    step made anew (and each merge re-sorted the whole regression): a run slower for its last
    50 000 steps took about half an hour. The values the judgement copies into sets are
    counted (the module's ``set``), not timed."""
    from rlmetrics.report import regressions

    copied = 0

    def counting_set(values: Any = ()) -> set[Any]:
        nonlocal copied
        made = builtins_set(values)
        copied += len(made)
        return made

    builtins_set = set
    monkeypatch.setattr(regressions, "set", counting_set, raising=False)
    steps = 2000
    report = find_regressions(_slow_tail_run(steps, slow_from=500))
    (regression,) = report.regressions
    assert (regression.start, regression.end) == (500, steps - 1)
    assert len(regression.slow_steps) == steps - 500
    assert copied <= 10 * steps  # the old judgement copied ~5 * 1500 * 1500 values


@given(
    slow=st.lists(st.booleans(), min_size=BASELINE_STEPS + CONFIRM_WINDOW, max_size=120),
)
def test_the_confirmed_regressions_are_the_windows_of_3_slow_steps_in_5_merged(
    slow: list[bool],
) -> None:
    """The definition, held on small runs: every window of 5 judged steps with at least 3 slow
    ones is a regression's steps; windows that overlap one already found join it."""
    base = [50.0 + (i % 3) * 0.1 for i in range(BASELINE_STEPS)]
    walls = base + [100.0 if s else 50.0 for s in slow]
    rows = [
        {
            "time": float(i),
            "step": i,
            "prefix": "train",
            "metrics": {"efficiency/step_wall_time_s": wall},
        }
        for i, wall in enumerate(walls)
    ]
    judged = list(range(BASELINE_STEPS, len(walls)))
    slow_steps = [s for s in judged if walls[s] > 60.0]
    expected: list[list[int]] = []
    for i in range(len(judged)):
        hits = [s for s in judged[i : i + CONFIRM_WINDOW] if s in slow_steps]
        if len(hits) >= 3:
            if expected and hits[0] <= expected[-1][-1]:
                expected[-1] = sorted(set(expected[-1]) | set(hits))
            else:
                expected.append(hits)
    report = find_regressions(rows)
    assert list(report.slow_steps) == slow_steps
    assert [list(r.slow_steps) for r in report.regressions] == expected


_SERIES_KEYS = (
    ("train", "efficiency/step_wall_time_s"),
    ("train", "vllm/kv_cache_usage"),
    ("train", "efficiency/idle/buffer_starvation_s"),  # a step window: seconds of the step
    ("train", "efficiency/idle/refit_event_wait_s"),  # cumulative over the run
    ("ray", "node.gpu.utilization"),
    ("gym", "requests_in_flight"),
    ("train", "reward"),  # in no group
)


@st.composite
def _rows_of_a_run(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Rows as a run logs them, and as it logs them oddly: 20-60 steps, some slow, steps
    logged again (a resume), several values at a step, a step past int64, no wall time."""
    count = draw(st.integers(20, 60))
    slow_from = draw(st.integers(0, count))
    steps = list(range(count))
    steps += draw(st.lists(st.integers(-2, count + 2), max_size=10))  # again, out of order
    steps += draw(st.lists(st.sampled_from([2**63, 2**70]), max_size=2))
    rows = []
    for n, step in enumerate(steps):
        wall = (2.0 if step >= slow_from else 1.0) * draw(st.sampled_from([0.9, 1.0, 1.1]))
        keys = draw(st.sets(st.sampled_from(range(len(_SERIES_KEYS))), min_size=1))
        for index in sorted(keys):
            prefix, key = _SERIES_KEYS[index]
            value: Any = (
                wall
                if index in (0, 2)
                else draw(
                    st.one_of(
                        st.floats(-1e3, 1e3), st.sampled_from([None, "x", True, float("nan")])
                    )
                )
            )
            rows.append(
                {
                    "time": 1000.0 + n * draw(st.sampled_from([1.0, 2.0, -1.0])),
                    "step": step,
                    "prefix": prefix,
                    "metrics": {key: value},
                }
            )
    return rows


@given(_rows_of_a_run())
def test_the_compact_step_times_judge_as_the_dicts_of_floats_did(
    rows: list[dict[str, Any]],
) -> None:
    """Before: a long run's step times and grouped series were held as Python floats in
    dicts (~500 B a step of a 60-key run); held in arrays now, the judgement is the same."""
    from step_times_reference import DictStepTimes

    from rlmetrics.report.regressions import StepTimes, _judge

    compact, reference = StepTimes(), DictStepTimes()
    for row in rows:
        compact.add(row)
        reference.add(row)
    times, source, values = compact.per_step()
    expected_times, expected_source, expected_values = reference.per_step()
    assert (dict(times), source) == (expected_times, expected_source)
    assert {s: dict(v) for s, v in values.items()} == expected_values
    assert list(values) == list(expected_values)
    assert compact.judge().as_dict() == _judge(*reference.per_step()).as_dict()


def test_the_step_times_of_a_long_run_cost_bytes_not_hundreds_a_step() -> None:
    """What the judgement holds of each step is a few numbers in arrays: measured by
    tracemalloc (not timed), a step of 6 grouped series costs well under the ~500 bytes the
    dicts of floats did."""
    import tracemalloc

    from rlmetrics.report.regressions import StepTimes

    steps = 5000
    keys = [key for prefix, key in _SERIES_KEYS if prefix == "train"]
    taken = StepTimes()
    tracemalloc.start()
    try:
        for s in range(steps):  # each row parsed as a reader parses it, then let go
            metrics = {key: 1.0 + s * 1e-3 for key in keys}
            line = json.dumps(
                {"time": 1000.0 + s, "step": s, "prefix": "train", "metrics": metrics}
            )
            taken.add(json.loads(line))
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held / steps < 150, f"{held / steps:.0f} bytes a step"
