"""The report's picture (issue 32, "the first hour"): the tallest bar clear of the frame, no
slot for a step the run never logged, checkpoint phases in colours a legend tells apart, the
run's id in the title; a TRL run's panels with whole-number step ticks and its KL."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tools_support import run_cli

from rlmetrics.report.plot import report_figure
from rlmetrics.report.runs import read_reports

TRL_RUN = Path(__file__).parent / "runs" / "trl-grpo.jsonl"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("demo")
    done = run_cli(
        "demo", "--steps", "12", "--interval", "0", "--prometheus-port", "0", "--no-plot",
        "--output", output,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return output / "metrics.jsonl"


def _figure(path: Path) -> Iterator[Any]:
    import matplotlib.pyplot as plt

    (report,) = read_reports(path)
    figure = report_figure(report)
    try:
        yield report, figure
    finally:
        plt.close(figure)


def _rgb(color: Any) -> tuple[float, ...]:
    from matplotlib.colors import to_rgb

    return tuple(to_rgb(color))


def test_the_demos_picture_has_room_no_step_zero_distinct_colours_and_the_run(
    demo_run: Path,
) -> None:
    for report, figure in _figure(demo_run):
        goodput, *rest = figure.axes
        bars = [p for p in goodput.patches if p.get_height() > 0]
        top = max(p.get_y() + p.get_height() for p in bars)
        assert goodput.get_ylim()[1] >= top * 1.05, "the tallest bar touches the frame"
        first_step = min(s["step"] for s in report.steps if s.get("goodput_pct") is not None)
        assert first_step == 1
        assert goodput.get_xlim()[0] > first_step - 1, "a slot for step 0, never logged"
        checkpoints = next(a for a in rest if a.get_title().startswith("Rollout checkpoints"))
        handles, labels = checkpoints.get_legend_handles_labels()
        assert len(labels) >= 10
        colours = [_rgb(h.patches[0].get_facecolor()) for h in handles]
        for a, b in itertools.combinations(colours, 2):
            assert sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) ** 0.5 >= 0.2, (a, b)
        assert f"run {report.run_id}" in figure._suptitle.get_text()


def test_a_trl_runs_picture_has_whole_steps_and_its_kl_panel() -> None:
    for report, figure in _figure(TRL_RUN):
        titles = [a.get_title() for a in figure.axes]
        assert titles == ["Mean reward over steps", "KL over steps", "Loss over steps"]
        for axes in figure.axes:
            low, high = axes.get_xlim()
            shown = [t for t in axes.get_xticks() if low <= t <= high]
            assert shown and all(float(t).is_integer() for t in shown), shown
        assert "run 0b3cbffc890e (trl-grpo.jsonl)" in figure._suptitle.get_text()
        assert report.run_id == "0b3cbffc890e"


def test_characters_the_font_lacks_are_said_once_not_as_python_warnings(tmp_path: Path) -> None:
    """A run id (the picture's title) or key in a script matplotlib's font has no glyph for:
    one line says so, instead of two lines of ``UserWarning: Glyph N missing from font(s)``
    per character, from the picture and from the timeline."""
    import rlmetrics
    from rlmetrics.testing import isolated_state

    jsonl, traces = tmp_path / "metrics.jsonl", tmp_path / "traces.jsonl"
    with (
        isolated_state(),
        rlmetrics.start(exporters={"otlp_file": {"path": traces}}, run_id="训练-🚀"),
        rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger,
    ):
        for step in (1, 2):
            with rlmetrics.step(step, logger=logger), rlmetrics.phase("训练"):
                logger.log_metrics({"reward": step / 2}, step=step)
    done = run_cli(
        "report", jsonl, "--plot", tmp_path / "run.png", "--traces", traces,
        "--timeline", tmp_path / "timeline.png",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run.png").stat().st_size and (tmp_path / "timeline.png").stat().st_size
    assert "UserWarning" not in done.stderr and "Glyph" not in done.stderr, done.stderr
    said = [line for line in done.stderr.splitlines() if "no glyph" in line]
    assert len(said) == 1, done.stderr
