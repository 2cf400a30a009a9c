"""``rlmetrics report`` reads a run's JSONL twice, a row at a time, instead of holding it: the
first pass tells each run's attempts apart, the second gives each report the rows it shows and
keeps of each step only the keys the report reads. Held here to the report the whole file gave
(:func:`whole_file_reference.whole_file_reports`, the code as it was) and to a memory peak
below the file's size."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from whole_file_reference import whole_file_reports

from rlmetrics.backends.jsonl import SkippedLines
from rlmetrics.report.html import _thinned
from rlmetrics.report.runs import DamagedRows, read_reports
from rlmetrics.report.select import StepSelection

_KEYS = (
    "reward",
    "loss",
    "kl_penalty",
    "reward/accuracy",
    "reward/format/mean",
    "reward/std",
    "validation/gsm8k/acc",
    "efficiency/step_wall_time_s",
    "efficiency/idle/refit_bubble_s",
    "efficiency/init/total_s",
    "efficiency/total_wall_time_s",
    "efficiency/efficiency_pct",
    "efficiency/efficiency_pct_is_per_step",
    "vllm/generation_tokens",
    "vllm/generations_ok",
    "vllm/kv_cache_usage",
    "timing/generation",
    "train/loss",
    "grad_norm",
)
_VALUES = st.one_of(
    st.floats(min_value=0, max_value=200, allow_nan=False),
    st.integers(min_value=-3, max_value=10**6),
    st.sampled_from([True, "NaN", None, 1e308, [1, 2]]),
)
#: Prefixes and the keys their rows carry: train dicts, setup, GPU rows and the
#: rollout-checkpoint streams (whose step is their own sample index).
_PREFIXES = {
    "train": _KEYS,
    "": _KEYS,
    "validation": ("acc", "gsm8k/acc"),
    "timing/setup": ("model_load_seconds", "total_setup_seconds"),
    "ray": ("node.0.gpu.0.util", "node.0.gpu.1.mem_gb"),
    "timing/rollout_checkpoint": (
        "telemetry/wall_time_seconds",
        "total_save_seconds",
        "serialize_seconds",
    ),
    "timing/rollout_recovery": ("telemetry/wall_time_seconds", "total_load_seconds"),
    "rollout/checkpoint_outcome": ("telemetry/wall_time_seconds", "outcome", "reason"),
}


@st.composite
def _line(draw: st.DrawFn, at: float, step: int) -> str:
    run_id = draw(st.sampled_from(["a", "a", "a", "b", None, 5]))
    kind = draw(st.sampled_from([None] * 14 + ["hyperparams", "resume", "rerun", "junk"]))
    row: dict[str, Any] = {"time": at}
    if run_id is not None or draw(st.booleans()):
        row["run_id"] = run_id
    if kind == "junk":
        return draw(st.sampled_from(["not json", "[1, 2]", '{"sample": {"a": 1}}', "{}"]))
    if kind == "hyperparams":
        row.update(kind="hyperparams", hyperparams={draw(st.sampled_from("xy")): draw(_VALUES)})
    elif kind in ("resume", "rerun"):
        row.update(kind=kind)
    else:
        # Steps that go on, repeat, go back (a resume from a checkpoint) or are damaged.
        row["step"] = draw(st.one_of(st.just(step), st.just(max(0, step - 3)), st.integers(-1, 30)))
        prefix = draw(st.sampled_from(["train", "train", "train", *_PREFIXES]))
        row["prefix"] = prefix
        keys = st.sampled_from(_PREFIXES[prefix])
        values = st.one_of(_VALUES, st.sampled_from(["ok", "failed", "timeout"]))
        row["metrics"] = draw(st.dictionaries(keys, values, max_size=5))
        if prefix.startswith(("timing/rollout", "rollout/")):
            # A stream's event without its wall time is read as at now: no value to compare.
            row["metrics"]["telemetry/wall_time_seconds"] = at
    return json.dumps(row)


@st.composite
def _run_files(draw: st.DrawFn) -> tuple[str, str]:
    """A small JSONL file of several runs' rows and, perhaps, the samples file beside it."""
    count = draw(st.integers(min_value=0, max_value=90))
    at, lines = 1000.0, []
    for index in range(count):
        at += draw(st.sampled_from([0.0, 1.0, 1.0, 2.0, 50.0]))
        lines.append(draw(_line(at, index // 2)))
    text = "".join(line + "\n" for line in lines)
    if lines and draw(st.booleans()):
        text = text[:-1]  # a torn (or merely unterminated) last line
    samples = draw(
        st.lists(
            st.builds(
                lambda run_id, step, i: json.dumps(
                    {"run_id": run_id, "step": step, "name": "s", "sample": {"i": i}}
                ),
                st.sampled_from(["a", "b"]),
                st.integers(0, 3),
                st.integers(0, 9),
            ),
            max_size=6,
        )
    )
    return text, "".join(line + "\n" for line in samples)


_OPTIONS = st.fixed_dictionaries(
    {
        "run": st.sampled_from([None, None, "a", "b"]),
        "steps": st.sampled_from(
            [None, None, StepSelection(3, 12), StepSelection(tail=4), StepSelection(last=2)]
        ),
        "keys": st.sampled_from([None, None, ("reward",), ("reward", "nope")]),
        "key_map": st.sampled_from([None, None, "trl"]),
        "curves": st.booleans(),
    }
)


@given(files=_run_files(), options=_OPTIONS)
def test_the_streamed_report_is_the_report_of_the_whole_file(
    tmp_path_factory: pytest.TempPathFactory, files: tuple[str, str], options: dict[str, Any]
) -> None:
    """Reruns, resumes, steps logged again, several runs in one file, samples, rollout
    checkpoint streams, damaged rows and junk lines: the report read in two passes is the one
    the whole file gave, its ``--json`` and its curves."""
    folder = tmp_path_factory.mktemp("stream")
    path = folder / "metrics.jsonl"
    path.write_text(files[0])
    if files[1]:
        (folder / "metrics.samples.jsonl").write_text(files[1])
    expected = whole_file_reports(path, **options)
    try:
        reports = read_reports(path, skipped=SkippedLines(), damaged=DamagedRows(), **options)
    except Exception as exc:  # compared with the exception the whole file gave
        assert isinstance(expected, Exception), exc
        assert (type(exc), str(exc)) == (type(expected), str(expected))
        return
    assert not isinstance(expected, Exception), expected
    assert [r.as_dict() for r in reports] == [r.as_dict() for r in expected]
    assert [r.curves for r in reports] == [r.curves for r in expected]
    if options["curves"]:
        # The page's curves, thinned as read, are the page's thinning of every point.
        thin = functools.partial(_thinned, most=5)
        thinned = read_reports(path, skipped=SkippedLines(), thin_curves=thin, **options)
        assert [r.curves for r in thinned] == [
            {key: thin(points) for key, points in (r.curves or {}).items()} for r in expected
        ]
        assert [r.as_dict() for r in thinned] == [r.as_dict() for r in expected]


def test_a_file_written_between_the_passes_reads_as_the_first_pass_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second pass stops at the first pass's last row: a row the trainer appends while the
    report reads (here: between the passes) is in neither, so the report is one state of the
    file, not the first pass's attempts with the second pass's rows."""
    from rlmetrics.report import runs

    path = tmp_path / "metrics.jsonl"
    row = {"run_id": "a", "prefix": "train"}
    path.write_text(
        "".join(
            json.dumps({**row, "step": s, "metrics": {"reward": s / 10}}) + "\n" for s in range(5)
        )
    )
    first_pass = runs._first_pass

    def then_appended(*args: Any) -> Any:
        found = first_pass(*args)
        with path.open("a") as out:  # a step back (a resume) and a new step
            out.write(json.dumps({**row, "step": 2, "metrics": {"reward": 9.0}}) + "\n")
            out.write(json.dumps({**row, "step": 5, "metrics": {"reward": 9.0}}) + "\n")
        return found

    monkeypatch.setattr(runs, "_first_pass", then_appended)
    (report,) = read_reports(path)
    assert [s["step"] for s in report.steps] == [0, 1, 2, 3, 4]
    assert report.trends["reward"]["last"] == 0.4
    assert report.repeated_steps == ()


def test_a_long_run_is_reported_without_holding_its_rows(tmp_path: Path) -> None:
    """3000 steps of 25 keys: the whole-file report's peak was about seven times the file
    (every row, then every step's merged keys); read in two passes, keeping of each step only
    what the report reads, it is under a third of that (about what the finished report holds:
    a row per step). Measured by tracemalloc, not timed."""
    import tracemalloc

    path = tmp_path / "metrics.jsonl"
    extra = {f"extra/metric_{i}": i * 0.1 for i in range(22)}
    with path.open("w") as out:
        for step in range(3000):
            metrics = {
                **extra,
                "reward": step / 3000,
                "loss": 1.0,
                "efficiency/step_wall_time_s": 50.0 + step % 7,
            }
            row = {"time": 1000.0 + step, "run_id": "r", "step": step, "prefix": "train"}
            out.write(json.dumps({**row, "metrics": metrics}) + "\n")
    peaks = []
    for read in (whole_file_reports, read_reports):
        tracemalloc.start()
        try:
            (report,) = read(path)
            _current, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        peaks.append(peak)
        assert len(report.steps) == 3000
        assert report.trends["reward"]["last"] == 2999 / 3000
        del report
    whole, streamed = peaks
    assert whole > 5 * path.stat().st_size  # (what the rows cost, read whole)
    assert streamed * 3 < whole
    assert streamed < 2 * path.stat().st_size
