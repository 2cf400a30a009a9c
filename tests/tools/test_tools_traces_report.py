"""``rlmetrics report --traces`` and ``--timeline``: goodput from spans beside goodput from
metrics, each difference put down to its documented reason, from a run recorded through the
real telemetry (a simulated clock, so every second is exact) and a real worker process that
appends its spans to the same file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tools_support import run_cli

import rlmetrics
from rlmetrics.report.traces import StepRollup, compare_step, read_traces, step_rollups


class SimClock:
    """A clock that moves only when told: ``spend(seconds)``; it starts at the real time, so
    a worker's real clock falls inside the run."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def spend(self, seconds: float) -> None:
        self.now += seconds


# The worker's phase does 0.2 s of work on its own (real) clock.
WORKER = """
import rlmetrics, sys, time
path = sys.argv[1]
exporters = {"otlp_file": {"path": path}}
with rlmetrics.start(exporters=exporters, resource={"rl.worker_group": "rollout"}):
    with rlmetrics.phase("score", bucket="productive"):
        time.sleep(0.2)
"""


def record_run(folder: Path, worker: bool = True) -> tuple[Path, Path]:
    """Three steps through the real Logger and telemetry, spans to an OTLP/JSON file.

    1. starvation 2 s, generation 5 s (productive) with a refit bubble of 1 s inside it,
       a reward phase 1 s (overhead: no bucket given, no category), 1 s in no phase: 9 s;
    2. starvation 1 s, generation 5 s, validation 2 s, a collector-loop wait 3 s (accounted
       over the run, no bucket on its span) and a worker process's phase: 11 s;
    3. generation 4 s, a wasted phase 1 s: 5 s.
    """
    jsonl, traces = folder / "metrics.jsonl", folder / "traces.jsonl"
    clock = SimClock()
    with (
        rlmetrics.start(exporters={"otlp_file": {"path": traces}}, run_id="report-run"),
        rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger,
        rlmetrics.run(clock=clock),
    ):

        def phase(name: str, seconds: float, bucket: str | None = None) -> None:
            with rlmetrics.phase(name, bucket=bucket):
                clock.spend(seconds)

        with rlmetrics.step(1, logger=logger):
            phase("idle/buffer_starvation", 2)
            with rlmetrics.phase("generation", bucket="productive"):
                clock.spend(2)
                phase("idle/refit_bubble", 1)
                clock.spend(2)
            phase("reward", 1)
            clock.spend(1)
        with rlmetrics.step(2, logger=logger):
            phase("idle/buffer_starvation", 1)
            phase("generation", 5, "productive")
            phase("idle/validation", 2)
            phase("idle/refit_event_wait", 3)
            if worker:
                env = {**os.environ, **rlmetrics.trace_env()}
                command = [sys.executable, "-c", WORKER, str(traces)]
                subprocess.run(command, env=env, check=True, timeout=120)
        with rlmetrics.step(3, logger=logger):
            phase("generation", 4, "productive")
            phase("failed_rollout", 1, "wasted")
    return jsonl, traces


def test_goodput_from_spans_and_metrics_and_why_they_differ(tmp_path: Path) -> None:
    jsonl, traces = record_run(tmp_path)
    done = run_cli("report", jsonl, "--traces", traces, "--json")
    assert done.returncode == 0, done.stderr
    comparison = json.loads(done.stdout)["traces"]
    steps = {row["step"]: row for row in comparison["steps"]}
    one, two, three = steps[1], steps[2], steps[3]

    # Step 1: spans 4 productive (generation's own time) of 8 in leaves; the metric 6 of 9.
    assert one["buckets_s"] == {"productive": 4.0, "overhead": 1.0, "idle": 3.0, "wasted": 0.0}
    assert one["metrics_pct"] == pytest.approx(100 * 6 / 9)
    assert one["spans_pct"] == pytest.approx(50.0)
    assert one["reasons_pp"] == pytest.approx(
        {"overhead_and_wasted": 100 * 5 / 8 - 50.0, "untimed": 100 * 6 / 9 - 100 * 5 / 8}
    )
    assert one["unexplained_pp"] == 0.0

    # Step 2: the worker's phase is another clock; validation is overhead on its span but
    # idle for the metric, so it stays against goodput in both; the collector's wait has no
    # bucket on its span and is on the collector's clock for the metric.
    assert two["buckets_s"]["overhead"] == pytest.approx(2.0)
    assert two["buckets_s"]["productive"] > 5.0  # the driver's 5 s and the worker's own
    assert two["metrics_pct"] == pytest.approx(100 * (11 - 3) / 11)
    assert set(two["reasons_pp"]) == {"other_clocks", "untimed"}
    assert two["unexplained_pp"] == 0.0

    # Step 3: a wasted leaf counts against goodput on spans only.
    assert three["spans_pct"] == pytest.approx(80.0) and three["metrics_pct"] == 100.0
    assert three["reasons_pp"] == pytest.approx({"overhead_and_wasted": 20.0})

    assert comparison["unexplained_steps"] == []
    assert comparison["disagreements"]["validation"] == {
        "metrics_idle_s": pytest.approx(2.0),
        "spans_overhead_s": pytest.approx(2.0),
    }
    collector = comparison["disagreements"]["collector_loop"]
    assert collector["metrics_idle_s"] == {"idle/refit_event_wait": pytest.approx(3.0)}
    assert collector["spans_unbucketed_s"] == {"idle/refit_event_wait": pytest.approx(3.0)}

    text = run_cli("report", jsonl, "--traces", traces).stdout
    assert "Goodput from spans (" in text
    assert "nothing else: every difference is one of these" in text
    assert "idle/validation: 2.0 s idle as a metric, 2.0 s overhead on spans" in text
    assert "idle/refit_event_wait: 3.0 s idle as a metric" in text


def test_a_difference_no_documented_reason_explains_is_called_unexplained(
    tmp_path: Path,
) -> None:
    """An idle phase that is no efficiency category: idle on spans, productive for metrics."""
    jsonl, traces = tmp_path / "m.jsonl", tmp_path / "t.jsonl"
    clock = SimClock()
    with (
        rlmetrics.start(exporters={"otlp_file": {"path": traces}}),
        rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger,
        rlmetrics.run(clock=clock),
        rlmetrics.step(1, logger=logger),
    ):
        with rlmetrics.phase("waiting_for_godot", bucket="idle"):
            clock.spend(1)
        with rlmetrics.phase("generation", bucket="productive"):
            clock.spend(3)
    comparison = json.loads(run_cli("report", jsonl, "--traces", traces, "--json").stdout)
    [row] = comparison["traces"]["steps"]
    assert row["unexplained_pp"] == pytest.approx(25.0)
    assert comparison["traces"]["unexplained_steps"] == [1]
    text = run_cli("report", jsonl, "--traces", traces).stdout
    assert "UNEXPLAINED at steps [1]" in text


_seconds = st.floats(min_value=0.0, max_value=1e4, allow_nan=False)


@given(
    productive=_seconds,
    overhead=_seconds,
    idle=_seconds,
    wasted=_seconds,
    validation=_seconds,
    others=st.fixed_dictionaries({b: _seconds for b in ("productive", "idle", "wasted")}),
    untimed=_seconds,
)
def test_the_reasons_and_the_remainder_add_up_to_the_difference(
    productive: float,
    overhead: float,
    idle: float,
    wasted: float,
    validation: float,
    others: dict[str, float],
    untimed: float,
) -> None:
    driver = {
        "productive": productive,
        "overhead": overhead + validation,
        "idle": idle,
        "wasted": wasted,
    }
    buckets = {b: driver[b] + others.get(b, 0.0) for b in driver}
    wall = sum(driver.values()) + untimed
    rollup = StepRollup(1, wall, buckets, driver, validation, {})
    metrics = None if wall <= 0 else 100.0 * (wall - idle - validation) / wall
    row = compare_step(rollup, metrics)
    if row["difference_pp"] is None:
        return
    explained = sum(row["reasons_pp"].values()) + row["unexplained_pp"]
    # Reasons under the tolerance are not listed; the metric's idle is exactly the driver's,
    # so nothing is unexplained.
    assert row["unexplained_pp"] == 0.0
    assert explained == pytest.approx(row["difference_pp"], abs=0.05 * 3 + 1e-6)


def test_the_timeline_has_a_lane_for_the_driver_and_for_the_worker(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from PIL import Image

    from rlmetrics.report.timeline import lanes

    jsonl, traces = record_run(tmp_path)
    loaded = read_traces([traces])
    named = lanes(loaded, list(loaded.steps().values()))
    assert next(iter(named)) == "driver"
    [worker] = [name for name in named if name != "driver"]
    assert worker.startswith("rollout (")
    assert {s.attributes["rl.phase"] for s in named[worker]} == {"score"}
    png = tmp_path / "timeline.png"
    done = run_cli(
        "report", jsonl, "--traces", traces, "--timeline", png, "--timeline-steps", "1:3"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(f"Timeline: {png}")
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size[0] == 1600
        image.load()
        colours = {c for _n, c in image.getcolors(maxcolors=1 << 20) or ()}
    # Every bucket's colour is drawn (productive, overhead, idle, wasted).
    for rgb in ((0x4C, 0x9F, 0x70), (0x5B, 0x8D, 0xB8), (0xE0, 0x7B, 0x39), (0xD6, 0x45, 0x50)):
        assert any(c[:3] == rgb for c in colours), rgb


def test_timeline_needs_traces_and_bad_steps_are_refused(tmp_path: Path) -> None:
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text("")
    done = run_cli("report", jsonl, "--timeline", tmp_path / "x.png")
    assert done.returncode == 2 and "--traces" in done.stderr
    done = run_cli("report", jsonl, "--traces", jsonl, "--timeline-steps", "5:2")
    assert done.returncode == 2 and "FIRST must not be after LAST" in done.stderr
    done = run_cli("report", jsonl, "--traces", tmp_path / "missing.jsonl")
    assert done.returncode == 2 and "no such file" in done.stderr


def test_rollups_count_a_phase_nested_in_another_once(tmp_path: Path) -> None:
    _jsonl, traces = record_run(tmp_path, worker=False)
    rollups = step_rollups(read_traces([traces]))
    total: Any = sum(rollups[1].buckets.values())
    assert total == pytest.approx(8.0)  # 2 + 5 (with its 1 s bubble inside) + 1


def test_spans_of_another_run_in_the_traces_file_are_left_out_and_counted(
    tmp_path: Path,
) -> None:
    """Runs appending to one traces file (a shared otlp_file path): the report's goodput from
    spans is its own run's, and it says how many spans of other runs it left out (before:
    they were mixed in, and another run's step 4 was compared with this run's metrics)."""
    jsonl, traces = record_run(tmp_path, worker=False)
    alone = json.loads(run_cli("report", jsonl, "--traces", traces, "--json").stdout)["traces"]
    clock = SimClock()
    with (
        rlmetrics.start(exporters={"otlp_file": {"path": traces}}, run_id="another-run"),
        rlmetrics.run(clock=clock),
    ):
        for n in (2, 4):
            with rlmetrics.step(n), rlmetrics.phase("generation", bucket="productive"):
                clock.spend(50)
    others = sum(
        line.count('"spanId"') for line in traces.read_text().splitlines() if "another-run" in line
    )
    assert others > 0
    done = run_cli("report", jsonl, "--traces", traces, "--json")
    assert done.returncode == 0, done.stderr
    comparison = json.loads(done.stdout)["traces"]
    assert [row["step"] for row in comparison["steps"]] == [1, 2, 3]
    assert comparison["steps"] == alone["steps"]
    assert comparison["spans"] == alone["spans"]
    assert comparison["spans_other_runs"] == others
    said = [line for line in done.stderr.splitlines() if "spans of other runs" in line]
    assert said == [
        f"rlmetrics report: {others} spans of other runs in the traces left out (the report "
        "is about run report-run)"
    ]
    text = run_cli("report", jsonl, "--traces", traces).stdout
    assert f"{others} spans of other runs left out" in text


def test_unreadable_lines_of_a_traces_file_are_counted_and_said(tmp_path: Path) -> None:
    """Before, a line of the traces file that was not JSON (a torn write, another tool's
    output) vanished unsaid: the report said nothing was skipped."""
    jsonl, traces = record_run(tmp_path, worker=False)
    before = json.loads(run_cli("report", jsonl, "--traces", traces, "--json").stdout)["traces"]
    assert before["skipped_spans"] == 0
    lines = traces.read_text().splitlines(keepends=True)
    damaged = ["not json at all\n", "[1, 2]\n", '{"no": "resourceSpans"}\n']
    traces.write_text("".join([lines[0], *damaged, *lines[1:], '{"resourceSpans": [{"sco']))
    done = run_cli("report", jsonl, "--traces", traces, "--json")
    assert done.returncode == 0, done.stderr
    comparison = json.loads(done.stdout)["traces"]
    assert comparison["skipped_spans"] == len(damaged) + 1
    assert comparison["steps"] == before["steps"]  # each line cost only itself
    text = run_cli("report", jsonl, "--traces", traces).stdout
    assert f"; {len(damaged) + 1} unreadable skipped" in text


@pytest.mark.parametrize("module", ["gzip", "bz2", "lzma"])
def test_a_compressed_traces_file_is_read_as_the_run_s_metrics_are(
    tmp_path: Path, module: str
) -> None:
    """Before: logrotate's ``traces.jsonl.1.gz`` read as text, '0 spans in traces.jsonl.1.gz;
    2608 unreadable skipped' in the report and ``slowest_phases: []`` in query, though the
    metrics file beside it, compressed the same way, is read as the run."""
    import importlib

    jsonl, traces = record_run(tmp_path, worker=False)
    plain = json.loads(run_cli("report", jsonl, "--traces", traces, "--json").stdout)["traces"]
    packed = tmp_path / "traces.jsonl.1.gz"
    packed.write_bytes(importlib.import_module(module).compress(traces.read_bytes()))
    done = run_cli("report", jsonl, "--traces", packed, "--json")
    assert done.returncode == 0, done.stderr
    comparison = json.loads(done.stdout)["traces"]
    assert comparison["skipped_spans"] == 0
    assert comparison["steps"] == plain["steps"]
    answers = [
        json.loads(run_cli("query", jsonl, "--traces", path, "--field", "slowest_phases").stdout)
        for path in (traces, packed)
    ]
    assert answers[0] and answers[1] == answers[0]


#: A line the otlp_file exporter writes: one request of one span, its name the marker.
def _span_line(name: str) -> str:
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": name}
    request = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": [span]}]}]}
    return json.dumps(request) + "\n"


@given(
    st.lists(
        st.one_of(
            st.text(
                alphabet=st.characters(  # one line of text a file can hold
                    blacklist_categories=("Cs",),
                    blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029",
                ),
                max_size=20,
            ).map(lambda t: ("text", t)),
            st.integers(0, 10**6).map(lambda n: ("span", f"s{n}")),
        ),
        max_size=12,
    )
)
def test_read_spans_yields_every_span_and_counts_every_other_line(
    tmp_path_factory: pytest.TempPathFactory, lines: list[tuple[str, str]]
) -> None:
    from rlmetrics.backends.jsonl import SkippedLines
    from rlmetrics.exporters.otlp_file import read_spans

    path = tmp_path_factory.mktemp("spans") / "traces.jsonl"
    path.write_text(
        "".join(_span_line(value) if kind == "span" else value + "\n" for kind, value in lines)
    )
    skipped = SkippedLines()
    names = [span["name"] for _resource, span in read_spans(path, skipped=skipped)]
    assert names == [value for kind, value in lines if kind == "span"]
    texts = [value for kind, value in lines if kind == "text" and value.strip()]
    assert skipped.count == sum(1 for t in texts if not _is_request(t))
    assert [span["name"] for _resource, span in read_spans(path)] == names  # as before


def _is_request(text: str) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and "resourceSpans" in value


@pytest.mark.parametrize("steps", ["100:200", None])
def test_a_timeline_with_nothing_to_draw_is_no_picture_as_for_plot(
    tmp_path: Path, steps: str | None
) -> None:
    """Before: a timeline of steps the traces do not hold (or of traces with no step) was an
    empty picture and exit 0, while --plot with nothing to draw writes none and exits 1."""
    pytest.importorskip("matplotlib")
    jsonl, traces = record_run(tmp_path, worker=False)
    if steps is None:  # spans, but none of a step
        kept = [line for line in traces.read_text().splitlines() if '"rl.step"' not in line]
        traces.write_text("\n".join(kept) + "\n")
    picture = tmp_path / "timeline.png"
    window = () if steps is None else ("--timeline-steps", steps)
    done = run_cli("report", jsonl, "--traces", traces, "--timeline", picture, *window)
    assert done.returncode == 1, done.stderr
    said = [line for line in done.stderr.splitlines() if "no picture written" in line]
    assert len(said) == 1 and ("steps 100-200" in said[0] if steps else "no rl.step" in said[0])
    assert not picture.exists()


def test_steps_whose_spans_hold_no_phases_say_there_is_nothing_to_compare(
    tmp_path: Path,
) -> None:
    """The agent-loop example's run: steps traced, no phase in them (its trajectories are
    spans of their own). The section said "-% productive" over a table of dashes and ended
    on an empty "why they differ" heading; it now says why there is no comparison."""
    jsonl, traces = tmp_path / "metrics.jsonl", tmp_path / "traces.jsonl"
    with (
        rlmetrics.start(exporters={"otlp_file": {"path": str(traces)}}),
        rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger,
    ):
        for n in (1, 2, 3):
            with rlmetrics.step(n, logger=logger):
                logger.log_metrics({"reward": 0.5}, step=n, prefix="train")
    text = run_cli("report", jsonl, "--traces", traces)
    assert text.returncode == 0, text.stderr
    section = text.stdout.split("Goodput from spans")[1]
    assert "over 3 steps: their spans hold no phases (rlmetrics.phase)" in section, section
    assert "-% productive" not in section and "why they differ" not in section, section


def test_the_timeline_picture_says_which_steps_it_shows(tmp_path: Path) -> None:
    """Before: ``--timeline`` drew the first 12 steps of a run of 15 under the title
    "rlmetrics timeline: traces.jsonl", read as the whole run. Its title now says which steps
    of how many it shows, and how to see others."""
    matplotlib = pytest.importorskip("matplotlib")
    from report_html_support import record_trajectory_run

    from rlmetrics.report.timeline import plot_timeline

    run = record_trajectory_run(tmp_path, steps=15, per_step=1)
    traces = read_traces([run.traces])

    def title(steps: tuple[int, int] | None) -> str:
        picture = tmp_path / "timeline.svg"
        with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text, to read back
            plot_timeline(traces, picture, steps)
        text = picture.read_text(encoding="utf-8")
        start = text.index("rlmetrics timeline")
        return text[start : text.index("<", start)]

    to = "\u2013"
    assert title(None) == (
        f"rlmetrics timeline: traces.jsonl, steps 1{to}12 of the 15 traced "
        "(the first 12; --timeline-steps FIRST:LAST draws others)"
    )
    assert title((4, 6)) == f"rlmetrics timeline: traces.jsonl, steps 4{to}6 of the 15 traced"
    assert title((1, 20)) == "rlmetrics timeline: traces.jsonl, all 15 traced steps"


@pytest.mark.parametrize(
    ("chosen", "shown"),
    [
        (("--tail", "3"), "steps 13\u201315 of the 15 traced"),
        (("--steps", "2:4"), "steps 2\u20134 of the 15 traced"),
        (("--steps", "3:14"), "steps 3\u201314 of the 15 traced"),
        (
            ("--steps", "2:"),
            "steps 2\u201313 of the 15 traced (the first 12 of steps 2\u201315 chosen; "
            "--timeline-steps FIRST:LAST draws others)",
        ),
    ],
)
def test_the_timeline_picture_draws_the_steps_tail_or_steps_chose(
    tmp_path: Path, chosen: tuple[str, str], shown: str
) -> None:
    """Before: ``report --tail 3 --timeline t.png`` drew the run's first 12 steps, while the
    report, its curves and its page (``--html``) were of the last 3."""
    pytest.importorskip("matplotlib")
    from report_html_support import record_trajectory_run

    run = record_trajectory_run(tmp_path, steps=15, per_step=1)
    rc = tmp_path / "matplotlibrc"
    rc.write_text("svg.fonttype: none\n")  # text as text, to read the title back
    picture = tmp_path / "timeline.svg"
    done = run_cli(
        "report",
        run.jsonl,
        "--traces",
        run.traces,
        "--timeline",
        picture,
        *chosen,
        env={"MATPLOTLIBRC": str(rc)},
    )
    assert done.returncode == 0, done.stderr
    text = picture.read_text(encoding="utf-8")
    start = text.index("rlmetrics timeline")
    assert text[start : text.index("<", start)] == f"rlmetrics timeline: traces.jsonl, {shown}"


def test_a_timeline_of_a_selection_that_chose_no_step_says_so(tmp_path: Path) -> None:
    """``--steps 100:200`` of a run of 15: no picture, and the line says the steps chosen hold
    none (not "in steps 1-0", the empty range standing for no step)."""
    pytest.importorskip("matplotlib")
    from report_html_support import record_trajectory_run

    run = record_trajectory_run(tmp_path, steps=15, per_step=1)
    picture = tmp_path / "timeline.png"
    done = run_cli(
        "report", run.jsonl, "--traces", run.traces, "--timeline", picture, "--steps", "100:200"
    )
    assert done.returncode == 1 and not picture.exists()
    assert (
        "rlmetrics report: no picture written: no step to draw: the steps chosen hold none; "
        "the traces hold steps 1-15"
    ) in done.stderr.splitlines()
