"""``rlmetrics report --html`` without a browser: the page asks for nothing (no http(s) source
or link, a Content-Security-Policy that forbids every request), holds every trajectory row of
the run with its turns from the spans, and carries kept text as data, never as markup."""

from __future__ import annotations

import html.parser
import itertools
import json
import re
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from hypothesis import strategies as st
from report_html_support import (
    MARKUP,
    UNICODE,
    TrajectoryRun,
    record_trajectory_run,
    trajectory_rows,
)
from tools_support import run_cli

import rlmetrics
from rlmetrics.report.html import CSP


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> TrajectoryRun:
    return record_trajectory_run(tmp_path_factory.mktemp("html-run"))


class _Page(html.parser.HTMLParser):
    """Every tag with its attributes, and the data block's text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.data: str | None = None
        self._in_data = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.tags.append((tag, found))
        self._in_data = tag == "script" and found.get("id") == "rlmetrics-data"

    def handle_endtag(self, tag: str) -> None:
        self._in_data = False

    def handle_data(self, data: str) -> None:
        if self._in_data:
            self.data = (self.data or "") + data


def _page(path: Path) -> tuple[_Page, dict[str, Any]]:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    assert page.data is not None, "no data block"
    return page, json.loads(page.data)


def _write(recorded: TrajectoryRun, out: Path, *extra: str) -> Path:
    done = run_cli("report", recorded.jsonl, "--html", out, *extra)
    assert done.returncode == 0, done.stderr
    assert f"Page: {out}" in done.stdout
    return out


def test_the_page_asks_for_nothing_and_holds_every_trajectory(
    recorded: TrajectoryRun, tmp_path: Path
) -> None:
    out = _write(recorded, tmp_path / "run.html", "--traces", recorded.traces)
    page, data = _page(out)
    text = out.read_text(encoding="utf-8")
    # No resource from anywhere: no external src/href, no <link>, <iframe>, <img>, <object>.
    for tag, attrs in page.tags:
        assert tag not in {"link", "iframe", "img", "object", "embed", "base"}, tag
        for name in ("src", "href", "action", "data", "srcset"):
            value = attrs.get(name) or ""
            assert not re.match(r"\s*(https?:)?//", value), (tag, name, value)
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", text)
    assert not re.search(r"@import|fetch\(|XMLHttpRequest|WebSocket|EventSource", text)
    [csp] = [a["content"] for t, a in page.tags if a.get("http-equiv") == "Content-Security-Policy"]
    assert csp == CSP and "default-src 'none'" in csp
    # Every trajectory row of the samples file, with its turns from the spans.
    rows = trajectory_rows(recorded.jsonl)
    shown = data["trajectories"]
    assert shown["total"] == len(rows) == len(recorded.records) == 18
    assert shown["with_spans"] == len(rows)
    assert [(r["sample_id"], r["step"]) for r in shown["rows"]] == [
        (r["sample_id"], r["step"]) for r in rows
    ]
    for row in shown["rows"]:
        record = recorded.records[(row["sample_id"], row["step"])]
        tree = row["spans"]
        assert len(tree["turns"]) == len(record["turns"]) == row["turns"]
        for turn, given in zip(tree["turns"], record["turns"], strict=True):
            kinds = [item["kind"] for item in turn]
            assert sorted(kinds) == ["generation", "tool"]
            [tool] = [item for item in turn if item["kind"] == "tool"]
            assert tool["name"] == given["tool_calls"][0]["name"]
            assert tool["outcome"] == given["tool_calls"][0]["outcome"]
        assert {(r["component"], r["value"]) for r in tree["rewards"]} == {
            (r["component"], r["value"]) for r in record["rewards"]
        }
    # Curves, goodput and the timeline's lanes are there.
    assert {"reward", "loss"} <= set(data["curves"])
    assert data["timeline"]["lanes"] and [s["step"] for s in data["timeline"]["steps"]] == [1, 2, 3]


def test_kept_text_is_data_never_markup(recorded: TrajectoryRun, tmp_path: Path) -> None:
    out = _write(recorded, tmp_path / "run.html", "--traces", recorded.traces)
    page, data = _page(out)
    text = out.read_text(encoding="utf-8")
    assert MARKUP not in text  # escaped inside the JSON block: no early </script>
    assert not any(attrs.get("id") == "injected" for _t, attrs in page.tags)
    first = data["trajectories"]["rows"][0]
    assert MARKUP in first["prompt"]
    assert any(MARKUP in str(item.get("completion")) for item in first["spans"]["turns"][0])


def test_a_generations_text_is_shown_as_it_was_given(
    recorded: TrajectoryRun, tmp_path: Path
) -> None:
    """The span carries a generation's text as GenAI messages (JSON, non-ASCII escaped); the
    page shows the text itself: its line breaks and its characters, not the JSON."""
    out = _write(recorded, tmp_path / "run.html", "--traces", recorded.traces)
    _, data = _page(out)
    for row in data["trajectories"]["rows"]:
        record = recorded.records[(row["sample_id"], row["step"])]
        for turn, given in zip(row["spans"]["turns"], record["turns"], strict=True):
            [generation] = [item for item in turn if item["kind"] == "generation"]
            assert generation["completion"] == given["generations"][0]["completion"]
            assert UNICODE in generation["completion"]


def test_the_page_holds_of_each_step_what_its_goodput_chart_draws(
    recorded: TrajectoryRun, tmp_path: Path
) -> None:
    """Before: each step's whole report row was embedded (every column of every key), which
    the page never reads: a run of 10^5 steps of 25 keys made a 20 MB page."""
    out = _write(recorded, tmp_path / "run.html")
    _, data = _page(out)
    assert [step["step"] for step in data["steps"]] == [1, 2, 3]
    drawn = {"step", "wall_time_s", "productive_s", "idle_s", "goodput_pct"}
    assert all(set(step) <= drawn for step in data["steps"])
    assert {"reward", "loss"} <= set(data["curves"])  # the columns are the curves


@pytest.mark.parametrize(
    ("chosen", "steps"), [(("--steps", "2:3"), {2, 3}), (("--tail", "1"), {3})]
)
def test_the_chosen_steps_choose_the_trajectories_too(
    recorded: TrajectoryRun, tmp_path: Path, chosen: tuple[str, str], steps: set[int]
) -> None:
    """``--steps A:B`` reports steps A to B only, and ``--tail N`` the last N: the table holds
    those steps' trajectories (it held every step's, under curves of the chosen ones)."""
    out = _write(recorded, tmp_path / "run.html", "--traces", recorded.traces, *chosen)
    _, data = _page(out)
    shown = data["trajectories"]
    assert {row["step"] for row in shown["rows"]} == steps
    assert shown["total"] == len(shown["rows"]) == 6 * len(steps) == shown["with_spans"]
    assert {step for step, _ in data["curves"]["reward"]} == steps


def test_rollouts_sharing_a_sample_id_open_into_their_own_turns(tmp_path: Path) -> None:
    """Three rollouts logged under one sample id in one step (a loop that used the prompt's
    id): each row opens into its own trajectory's turns; every row opened into the last's."""
    import rlmetrics
    from rlmetrics.testing import isolated_state

    jsonl, traces = tmp_path / "metrics.jsonl", tmp_path / "traces.jsonl"
    records = [
        {"sample_id": "p0", "turns": [{"tool_calls": [{"name": f"t{n}-{k}"}]} for k in range(n)]}
        for n in (1, 2, 3)
    ]
    with (
        isolated_state(),
        rlmetrics.start(exporters={"otlp_file": {"path": traces}}),
        rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger,
        rlmetrics.step(1, logger=logger),
    ):
        logger.log_trajectories(records, step=1)
        logger.log_metrics({"reward": 1.0}, step=1)
    out = tmp_path / "run.html"
    assert run_cli("report", jsonl, "--traces", traces, "--html", out).returncode == 0
    _, data = _page(out)
    rows = data["trajectories"]["rows"]
    assert [row["turns"] for row in rows] == [1, 2, 3]
    for row, record in zip(rows, records, strict=True):
        names = [[i["name"] for i in turn if i["kind"] == "tool"] for turn in row["spans"]["turns"]]
        assert names == [[call["name"] for call in t["tool_calls"]] for t in record["turns"]]


def test_long_kept_texts_are_cut_to_keep_the_page_small(tmp_path: Path) -> None:
    """Text policy ``full`` keeps up to 32 KB a text, in the row and in each generation's
    span: 300 such trajectories made a page of 36 MB (20 000 would be gigabytes, more than a
    browser opens). The page holds at most TEXT_BUDGET characters of text: each text is cut to
    the length that fits, says so, and the page says how far."""
    import rlmetrics
    from rlmetrics.report.trajectory_view import TEXT_BUDGET
    from rlmetrics.testing import isolated_state
    from rlmetrics.trajectories import configure

    jsonl, traces = tmp_path / "metrics.jsonl", tmp_path / "traces.jsonl"
    text = "word " * 6000  # 30 000 characters
    with (
        isolated_state(),
        rlmetrics.start(exporters={"otlp_file": {"path": traces}}),
        rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}, max_sample_rows=300) as logger,
        rlmetrics.step(1, logger=logger),
    ):
        configure(text="full", budget=rlmetrics.SpanBudget(trace_all_below=1000))
        records = [
            {
                "sample_id": f"s{i}",
                "prompt": text,
                "completion": text,
                "turns": [{"generations": [{"model": "m", "prompt": text, "completion": text}]}],
            }
            for i in range(300)
        ]
        logger.log_trajectories(records, step=1)
        logger.log_metrics({"reward": 1.0}, step=1)
    out = _write(TrajectoryRun(jsonl, traces, {}), tmp_path / "run.html", "--traces", traces)
    assert out.stat().st_size < TEXT_BUDGET * 1.3
    _, data = _page(out)
    shown = data["trajectories"]
    cut = shown["texts_cut_to"]
    assert isinstance(cut, int) and 0 < cut < len(text)
    first = shown["rows"][0]
    assert first["prompt"] == f"{text[:cut]}\n… (+{len(text) - cut} characters)"
    [generation] = first["spans"]["turns"][0]
    assert generation["completion"].startswith(text[:cut])


def test_trajectories_with_spans_but_no_rows_are_said(tmp_path: Path) -> None:
    """A live trajectory without ``logger=`` has spans and metrics but no row: the page said
    "The run logged no trajectories" over traces holding them; it now counts them."""
    import rlmetrics
    from rlmetrics.testing import isolated_state

    jsonl, traces = tmp_path / "metrics.jsonl", tmp_path / "traces.jsonl"
    with (
        isolated_state(),
        rlmetrics.start(exporters={"otlp_file": {"path": traces}}),
        rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger,
    ):
        for step in (1, 2):
            with rlmetrics.step(step, logger=logger):
                for index in range(3):
                    with rlmetrics.trajectory(f"{step}-{index}") as t:
                        t.generation("policy", input_tokens=3, output_tokens=4)
                logger.log_metrics({"reward": 1.0}, step=step)
    out = _write(TrajectoryRun(jsonl, traces, {}), tmp_path / "run.html", "--traces", traces)
    _, data = _page(out)
    assert data["trajectories"]["rows"] == []
    assert data["trajectories"]["spans_without_rows"] == 6
    out = _write(
        TrajectoryRun(jsonl, traces, {}), tmp_path / "two.html", "--traces", traces, "--steps", "2"
    )
    assert _page(out)[1]["trajectories"]["spans_without_rows"] == 3


def test_without_traces_the_rows_keep_their_counts(recorded: TrajectoryRun, tmp_path: Path) -> None:
    out = _write(recorded, tmp_path / "run.html")
    _, data = _page(out)
    assert data["timeline"] is None and data["traces"] == []
    rows = data["trajectories"]["rows"]
    assert len(rows) == 18 and not data["trajectories"]["traced"]
    assert all(isinstance(r["turns"], int) and "spans" not in r for r in rows)


def test_a_page_with_nowhere_to_go_is_refused_before_anything_is_read(
    recorded: TrajectoryRun, tmp_path: Path
) -> None:
    done = run_cli("report", recorded.jsonl, "--html", tmp_path / "missing" / "run.html")
    assert done.returncode == 2 and "no such folder" in done.stderr
    done = run_cli("report", recorded.jsonl, "--html", tmp_path)
    assert done.returncode == 2 and "is a folder" in done.stderr


def test_a_run_without_trajectories_still_has_its_page(tmp_path: Path) -> None:
    jsonl = tmp_path / "plain.jsonl"
    jsonl.write_text(
        "".join(
            json.dumps({"time": 1.0 + s, "step": s, "metrics": {"train/reward": s / 10}}) + "\n"
            for s in range(1, 4)
        )
    )
    out = tmp_path / "plain.html"
    done = run_cli("report", jsonl, "--html", out)
    assert done.returncode == 0, done.stderr
    _, data = _page(out)
    assert data["trajectories"] == {
        "rows": [],
        "total": 0,
        "with_spans": 0,
        "traced": False,
        "texts_cut_to": None,
        "spans_without_rows": 0,
    }


def test_the_curves_are_every_numeric_series_a_step_logged(tmp_path: Path) -> None:
    """docs/trajectories.md promises "every numeric series of its steps". Before: the page
    drew reward, KL and loss only (the text report's columns), so a run's grad norm, its
    vLLM and Ray series, everything else it logged, had no curve. A series of more steps than
    a chart has pixels is thinned to each bucket's lowest and highest value (a spike stays)."""
    steps = 5000
    rows = []
    for s in range(1, steps + 1):
        grad = 100.0 if s == 4321 else 1.0  # one spike, in a bucket of its own neighbours
        rows.append({"time": s, "step": s, "prefix": "train", "metrics": {"reward": s / 10}})
        rows.append({"time": s, "step": s, "prefix": "train", "metrics": {"grad_norm": grad}})
        rows.append({"time": s, "step": s, "prefix": "ray", "metrics": {"node.0.mem_gb": 2.0}})
        rows.append({"time": s, "step": s, "prefix": "train", "metrics": {"note": "text"}})
    jsonl = tmp_path / "run.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run.html"
    done = run_cli("report", jsonl, "--html", out)
    assert done.returncode == 0, done.stderr
    _, data = _page(out)
    curves = data["curves"]
    assert {"reward", "grad_norm", "ray/node.0.mem_gb"} <= set(curves), sorted(curves)
    assert "note" not in curves
    for points in curves.values():
        assert len(points) <= 1000
        assert [p[0] for p in points] == sorted(p[0] for p in points)
    assert [4321, 100.0] in curves["grad_norm"]
    assert curves["reward"][0] == [1, 0.1] and curves["reward"][-1] == [steps, steps / 10]
    # Not in --json: there --keys chooses the series.
    assert "curves" not in json.loads(run_cli("report", jsonl, "--json").stdout)


@hypothesis.given(
    st.lists(st.floats(-1e9, 1e9), min_size=1, max_size=3000),
    st.integers(min_value=4, max_value=1200),
)
def test_a_thinned_curve_keeps_its_ends_extremes_and_order(values: list[float], most: int) -> None:
    from rlmetrics.report.html import _thinned

    points = [(step * 3, value) for step, value in enumerate(values)]
    thinned = _thinned(points, most)
    assert len(thinned) <= max(most, len(points) if len(points) <= most else 0)
    assert set(thinned) <= set(points)
    assert [p[0] for p in thinned] == sorted({p[0] for p in thinned})
    assert thinned[0] == points[0] and thinned[-1] == points[-1]
    assert min(p[1] for p in thinned) == min(values)
    assert max(p[1] for p in thinned) == max(values)


@hypothesis.given(st.integers(0, 40), st.integers(0, 12))
def test_the_table_keeps_the_newest_rows_in_order(logged: int, limit: int) -> None:
    import tempfile

    from rlmetrics.report.trajectory_view import TABLE, read_trajectories

    with tempfile.TemporaryDirectory() as folder:
        jsonl = Path(folder) / "run.jsonl"
        jsonl.write_text("")
        rows = [
            {"step": n, "name": TABLE, "run_id": "r", "sample": {"sample_id": f"s{n}"}}
            for n in range(logged)
        ]
        (Path(folder) / "run.samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        found = read_trajectories(jsonl, "r", limit=limit)
    assert found["total"] == logged
    kept = list(range(max(0, logged - limit), logged))
    assert [row["step"] for row in found["rows"]] == kept


def _long_run(path: Path, steps: int, spike: int) -> None:
    """``steps`` steps of 2 s (0.5 s of it refit bubble), step ``spike`` 40 s."""
    with path.open("w") as out:
        for step in range(steps):
            wall = 40.0 if step == spike else 2.0 + (step % 3) * 0.1
            metrics = {"efficiency/step_wall_time_s": wall, "efficiency/idle/refit_bubble_s": 0.5}
            row = {"time": 1.0 + step, "run_id": "r", "step": step, "prefix": "train"}
            out.write(json.dumps({**row, "metrics": metrics}) + "\n")


def test_a_long_run_s_goodput_chart_is_a_bar_per_run_of_steps_that_keeps_its_spikes(
    tmp_path: Path,
) -> None:
    """Before: a bar per step, whatever the run's length: 2*10^5 steps were 400 000 sub-pixel
    rectangles in a 1400-px chart, 21 s to draw. Past GOODPUT_BARS steps each bar is a run of
    consecutive steps: its parts the steps' means (so the bars still add up to the run's
    seconds), its whisker the shortest and the longest step, so one slow step shows."""
    from rlmetrics.report.html import GOODPUT_BARS

    jsonl, out = tmp_path / "m.jsonl", tmp_path / "m.html"
    _long_run(jsonl, steps=5000, spike=3210)
    done = run_cli("report", jsonl, "--html", out)
    assert done.returncode == 0, done.stderr
    _, data = _page(out)
    bars = data["steps"]
    assert len(bars) == GOODPUT_BARS
    assert [(b["step"], b["last_step"]) for b in bars][:2] == [(0, 7), (8, 15)]
    assert sum(b["steps"] for b in bars) == 5000
    assert all(b["last_step"] + 1 == c["step"] for b, c in itertools.pairwise(bars))
    total = sum(2.0 + (step % 3) * 0.1 for step in range(5000) if step != 3210) + 40.0
    assert sum(b["wall_time_s"] * b["steps"] for b in bars) == pytest.approx(total)
    (spiked,) = [b for b in bars if b["step"] <= 3210 <= b["last_step"]]
    assert (spiked["wall_max_s"], spiked["longest_step"]) == (40.0, 3210)
    assert max(b["wall_max_s"] for b in bars if b is not spiked) == 2.2
    assert spiked["idle_s"] == {"idle/refit_bubble": 0.5}
    assert spiked["productive_s"] + 0.5 == pytest.approx(spiked["wall_time_s"])


def test_a_key_the_run_logged_as_goodput_keeps_its_curve(tmp_path: Path) -> None:
    """A train key named ``goodput %`` (the name of the page's own goodput curve) was replaced
    by the page's curve: its values were nowhere on the page. Both curves are drawn now."""
    jsonl, out = tmp_path / "m.jsonl", tmp_path / "m.html"
    with jsonl.open("w") as rows:
        for step in range(3):
            metrics = {"goodput %": 5.0 + step, "efficiency/step_wall_time_s": 2.0}
            row = {"time": 1.0 + step, "run_id": "r", "step": step, "prefix": "train"}
            rows.write(json.dumps({**row, "metrics": metrics}) + "\n")
    done = run_cli("report", jsonl, "--html", out)
    assert done.returncode == 0, done.stderr
    _, data = _page(out)
    assert data["curves"]["goodput %"] == [[0, 5.0], [1, 6.0], [2, 7.0]]
    assert data["curves"]["goodput % (report)"] == [[0, 100.0], [1, 100.0], [2, 100.0]]


def test_the_curves_lead_with_the_rl_signals_then_go_by_group(tmp_path: Path) -> None:
    """Before: the curves came in the order the JSONL first held each key, so a run whose
    engine logged first (the demo's) showed 13 ``vllm/*`` panels before reward, KL and loss
    (the 17th to 19th). Now reward, its components, KL, loss and the other training scalars
    lead, in that order, then the rest by group (ungrouped keys first), each group sorted: the
    same page whatever order the keys were logged in."""
    logged = [
        ("vllm", {"prompt_tokens": 10.0, "kv_cache_usage": 0.5}),
        ("ray", {"node.0.mem_gb": 2.0}),
        ("train", {"zeta": 1.0, "lr": 1e-5, "grad_norm": 1.0, "loss": 0.3}),
        ("train", {"validation/gsm8k/accuracy": 0.4, "efficiency/step_wall_time_s": 2.0}),
        ("train", {"kl_penalty": 0.01, "reward/format": 1.0, "reward": 0.5, "alpha": 2.0}),
        ("train", {"approx_entropy": 0.9, "reward/accuracy": 0.5}),
    ]
    jsonl, out = tmp_path / "m.jsonl", tmp_path / "m.html"
    with jsonl.open("w") as rows:
        for step in range(1, 4):
            for prefix, metrics in logged:
                row = {"time": float(step), "run_id": "r", "step": step, "prefix": prefix}
                rows.write(json.dumps({**row, "metrics": metrics}) + "\n")
    done = run_cli("report", jsonl, "--html", out)
    assert done.returncode == 0, done.stderr
    _, data = _page(out)
    assert list(data["curves"]) == [
        "reward",
        "reward/accuracy",
        "reward/format",
        "kl_penalty",
        "loss",
        "approx_entropy",
        "grad_norm",
        "lr",
        "alpha",
        "goodput %",
        "zeta",
        "efficiency/step_wall_time_s",
        "ray/node.0.mem_gb",
        "validation/gsm8k/accuracy",
        "vllm/kv_cache_usage",
        "vllm/prompt_tokens",
    ]


def test_the_timeline_shows_the_steps_the_report_chose(tmp_path: Path) -> None:
    """Before: with ``--tail 3`` the curves and the trajectory table were of the last 3 steps
    but the timeline drew the run's first 12, none of them chosen. The timeline's window is now
    of the chosen steps (the first 12 of them); ``--timeline-steps`` still picks any."""
    run = record_trajectory_run(tmp_path, steps=15, per_step=1)

    def drawn(*extra: str) -> list[int]:
        out = _write(run, tmp_path / "run.html", "--traces", run.traces, *extra)
        return [s["step"] for s in _page(out)[1]["timeline"]["steps"]]

    assert drawn("--tail", "3") == [13, 14, 15]
    assert drawn("--steps", "2:15") == list(range(2, 14))
    assert drawn("--tail", "3", "--timeline-steps", "1:2") == [1, 2]
    assert drawn() == list(range(1, 13))


def test_a_rotated_run_s_page_holds_the_trajectories_rotated_beside_it(tmp_path: Path) -> None:
    """Before: ``report metrics.jsonl.1.gz --html`` read its trajectory rows from
    ``metrics.jsonl.1.samples.gz`` (the writer's name for a file called ``metrics.jsonl.1``),
    so the page of a run logrotate had rotated showed no trajectory, though its rows were
    rotated beside it as ``metrics.samples.jsonl.1.gz`` (what the text report reads)."""
    import gzip

    from rlmetrics.report.trajectory_view import read_trajectories

    jsonl = tmp_path / "metrics.jsonl"
    with rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger:
        logger.log_trajectories([{"sample_id": f"s{n}", "reward": 1.0} for n in range(3)], step=1)
    for name in ("metrics.jsonl", "metrics.samples.jsonl"):
        (tmp_path / f"{name}.1.gz").write_bytes(gzip.compress((tmp_path / name).read_bytes()))
    plain = read_trajectories(jsonl, None)
    assert plain["total"] == 3
    rotated = read_trajectories(tmp_path / "metrics.jsonl.1.gz", None)
    assert (rotated["total"], rotated["rows"]) == (3, plain["rows"])
