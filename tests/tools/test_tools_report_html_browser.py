"""``rlmetrics report --html`` in a real browser: Debian's Chromium (``/usr/bin/chromium``, or
``RLMETRICS_CHROMIUM``) driven by Playwright. The page loads from a file with no console
message and no request but its own; it shows one row per trajectory the run logged; a row
opens into its turns (kept text shown as text); the filters show exactly the rows they
should. The demo's page is screenshotted (``RLMETRICS_HTML_SCREENSHOTS=FOLDER`` keeps its top
and its trajectory table: that is how docs/images/report-html*.png are made).

Skipped without Playwright or the browser, unless ``RLMETRICS_REQUIRE_CHROMIUM=1`` (the
``html`` tox env) makes that a failure."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from report_html_support import (
    MARKUP,
    TrajectoryRun,
    record_long_values_run,
    record_many_run,
    record_many_steps_run,
    record_trajectory_run,
    trajectory_rows,
)
from tools_support import run_cli

CHROMIUM = os.environ.get("RLMETRICS_CHROMIUM", "/usr/bin/chromium")
REQUIRED = os.environ.get("RLMETRICS_REQUIRE_CHROMIUM") == "1"


def _unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"RLMETRICS_REQUIRE_CHROMIUM=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install playwright)")
    if not os.access(CHROMIUM, os.X_OK):
        _unavailable(f"no browser at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


class Loaded:
    """A page and everything it said and asked for while loading."""

    def __init__(self, page: Any, messages: list[str], requests: list[str]) -> None:
        self.page, self.messages, self.requests = page, messages, requests

    def rows(self) -> int:
        return int(self.page.locator("#trajectory-table tbody tr.traj").count())


def _open(browser: Any, path: Path) -> Loaded:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    messages: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: messages.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: messages.append(f"pageerror: {e}"))
    page.on("request", lambda r: requests.append(r.url))
    page.on("requestfailed", lambda r: messages.append(f"requestfailed: {r.url}"))
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=20_000)
    return Loaded(page, messages, requests)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[TrajectoryRun, Path]:
    run = record_trajectory_run(tmp_path_factory.mktemp("html-browser"))
    out = run.jsonl.with_name("run.html")
    done = run_cli("report", run.jsonl, "--traces", run.traces, "--html", out)
    assert done.returncode == 0, done.stderr
    return run, out


@pytest.fixture
def loaded(browser: Any, recorded: tuple[TrajectoryRun, Path]) -> Iterator[Loaded]:
    found = _open(browser, recorded[1])
    try:
        yield found
    finally:
        found.page.close()


def test_the_page_loads_offline_with_a_row_per_trajectory(
    loaded: Loaded, recorded: tuple[TrajectoryRun, Path]
) -> None:
    run, out = recorded
    assert loaded.messages == []
    assert loaded.requests == [out.resolve().as_uri()]
    assert loaded.rows() == len(trajectory_rows(run.jsonl)) == 18
    assert loaded.page.locator("#shown").inner_text() == "18 of 18 trajectories"
    # The charts were drawn: a curve per series, the goodput bars, the timeline's phases.
    assert loaded.page.locator("#curves svg path.curve").count() >= 2
    assert loaded.page.locator("#goodput svg rect").count() >= 3
    assert loaded.page.locator("#timeline svg rect").count() >= 6


def test_a_row_opens_into_its_turns_and_closes_again(
    loaded: Loaded, recorded: tuple[TrajectoryRun, Path]
) -> None:
    run, _ = recorded
    page = loaded.page
    row = page.locator("tr.traj", has=page.locator("td", has_text="2-1")).first
    record = run.records[("2-1", 2)]
    row.click()
    detail = page.locator("tr.detail")
    assert detail.count() == 1
    assert detail.locator(".turn").count() == len(record["turns"])
    tools = detail.locator(".item.tool")
    assert [tools.nth(i).get_attribute("data-tool") for i in range(tools.count())] == [
        turn["tool_calls"][0]["name"] for turn in record["turns"]
    ]
    assert detail.locator(".item.generation").count() == len(record["turns"])
    # Kept text is shown as text: the markup in it is neither rendered nor run.
    assert MARKUP in detail.inner_text()
    assert page.locator("#injected").count() == 0
    row.click()
    assert page.locator("tr.detail").count() == 0
    assert loaded.messages == []


def test_seconds_of_short_steps_are_not_rounded_to_zero(loaded: Loaded) -> None:
    """The recorded run's steps last milliseconds: the header's step wall time, the goodput
    chart's top and a bar's tooltip say how many, not "0.0 s"."""
    page = loaded.page
    card = page.locator(".card", has_text="step wall time").locator("b").text_content() or ""
    top = page.locator("#goodput svg > text").first.text_content() or ""
    bar = page.locator("#goodput svg rect title").first.text_content() or ""
    for label in (card, top, bar.split(": ", 1)[-1].split(" · ")[0]):
        assert label.endswith(" s") and float(label[:-2]) > 0, label


def _expect_rows(loaded: Loaded, rows: list[dict[str, Any]]) -> None:
    shown = loaded.page.locator("#trajectory-table tbody tr.traj td:nth-child(2)")
    assert sorted(shown.all_inner_texts()) == sorted(r["sample_id"] for r in rows)


def test_the_filters_show_exactly_the_rows_they_match(
    loaded: Loaded, recorded: tuple[TrajectoryRun, Path]
) -> None:
    rows = trajectory_rows(recorded[0].jsonl)
    page = loaded.page
    page.select_option("#f-outcome", "failure")
    _expect_rows(loaded, [r for r in rows if r["outcome"] == "failure"])
    page.select_option("#f-outcome", "success")
    page.select_option("#f-env", "code")
    _expect_rows(loaded, [r for r in rows if r["outcome"] == "success" and r["env"] == "code"])
    page.select_option("#f-outcome", "")
    page.select_option("#f-env", "")
    page.fill("#f-reward-min", "0.5")
    _expect_rows(loaded, [r for r in rows if r["reward"] >= 0.5])
    page.fill("#f-reward-max", "1.25")
    _expect_rows(loaded, [r for r in rows if 0.5 <= r["reward"] <= 1.25])
    page.fill("#f-reward-min", "")
    page.fill("#f-reward-max", "")
    page.fill("#f-text", "3-")
    _expect_rows(loaded, [r for r in rows if r["sample_id"].startswith("3-")])
    page.fill("#f-text", "")
    assert loaded.rows() == len(rows)
    assert loaded.messages == []


def test_long_values_stay_inside_the_window(browser: Any, tmp_path: Path) -> None:
    """Ids, names and kept text as long as a record takes, with nowhere to break: the table
    and an opened row fit the window (no page-wide horizontal scroll), and a cut cell still
    says its whole value (its title)."""
    run = record_long_values_run(tmp_path)
    out = tmp_path / "long.html"
    done = run_cli("report", run.jsonl, "--traces", run.traces, "--html", out)
    assert done.returncode == 0, done.stderr
    loaded = _open(browser, out)
    try:
        page = loaded.page
        width = page.evaluate("window.innerWidth")
        assert loaded.rows() == 4
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        # The batch's rows (held to the step's end) follow the user's own row of the step.
        batch_row = page.locator("tr.traj").filter(has_not_text="own").first
        batch_row.click()
        assert page.locator("tr.detail .item.tool").count() == 1
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        sample = batch_row.locator("td").nth(1)
        assert sample.get_attribute("title") in {sample_id for sample_id, _ in run.records}
        assert loaded.messages == []
    finally:
        loaded.page.close()


def test_a_generation_without_token_counts_shows_none(browser: Any, tmp_path: Path) -> None:
    """The long-values run's generations give no token counts: their line says nothing about
    tokens (it said " → tokens")."""
    run = record_long_values_run(tmp_path)
    out = tmp_path / "long.html"
    assert run_cli("report", run.jsonl, "--traces", run.traces, "--html", out).returncode == 0
    loaded = _open(browser, out)
    try:
        loaded.page.locator("tr.traj").filter(has_not_text="own").first.click()
        line = loaded.page.locator("tr.detail .item.generation > div").first.inner_text()
        assert "tokens" not in line and "→" not in line, line
        assert loaded.messages == []
    finally:
        loaded.page.close()


def test_a_large_table_lists_a_page_at_a_time(browser: Any, tmp_path: Path) -> None:
    """Thousands of trajectories: the filters count every row, but the table lists the first
    500 that match (building every row made a page of 10 000 take seconds to open and each
    keystroke in the id filter a second), and "show more" lists the next 500. The count above
    the table says how many are listed: it read "1234 of 1234 trajectories" over 500 rows,
    the button below them the only word that more were not."""
    run = record_many_run(tmp_path, 1234)
    out = tmp_path / "many.html"
    done = run_cli("report", run.jsonl, "--html", out)
    assert done.returncode == 0, done.stderr
    loaded = _open(browser, out)
    try:
        page = loaded.page
        more = page.locator("#more")
        shown = page.locator("#shown")
        listed = "1234 of 1234 trajectories ({} listed; 'show more' below the table lists more)"
        assert shown.inner_text() == listed.format(500)
        assert loaded.rows() == 500 and more.is_visible()
        page.locator("tr.traj").nth(499).click()  # an open row stays open below the next page
        more.click()
        assert loaded.rows() == 1000 and page.locator("tr.detail").count() == 1
        assert shown.inner_text() == listed.format(1000)
        more.click()
        assert loaded.rows() == 1234 and not more.is_visible()
        assert shown.inner_text() == "1234 of 1234 trajectories"
        page.fill("#f-text", "s1")  # s1, s10..s19, s100..s199, s1000..s1233
        assert page.locator("#shown").inner_text() == "345 of 1234 trajectories"
        assert loaded.rows() == 345 and not more.is_visible()
        page.select_option("#f-env", "math")
        page.fill("#f-text", "")
        assert shown.inner_text() == (
            "617 of 1234 trajectories (500 listed; 'show more' below the table lists more)"
        )
        assert loaded.rows() == 500 and more.is_visible()
        assert loaded.messages == []
    finally:
        loaded.page.close()


@pytest.mark.parametrize("width", [1400, 1024])
def test_the_charts_of_a_long_run_fit_the_window(browser: Any, tmp_path: Path, width: int) -> None:
    """300 steps: the goodput chart (one bar a step) and its last step's label stay inside
    their panel and the window, on a wide screen and a narrow one."""
    jsonl = record_many_steps_run(tmp_path, 300)
    out = tmp_path / "long.html"
    done = run_cli("report", jsonl, "--html", out)
    assert done.returncode == 0, done.stderr
    loaded = _open(browser, out)
    try:
        page = loaded.page
        page.set_viewport_size({"width": width, "height": 900})
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        panel = page.locator("#goodput .chart").bounding_box()
        chart = page.locator("#goodput .chart svg").bounding_box()
        assert panel is not None and chart is not None
        assert chart["x"] + chart["width"] <= panel["x"] + panel["width"]
        assert loaded.messages == []
    finally:
        loaded.page.close()


def test_a_row_with_columns_named_like_the_pages_own_opens(browser: Any, tmp_path: Path) -> None:
    """A ``trajectories`` table of the user's own (``log_samples``) may have any column: one
    named ``spans`` (the page's key for a row's turns) made the row's click a page error, and
    one named ``step`` replaced the step the row was logged at."""
    import rlmetrics
    from rlmetrics.testing import isolated_state

    jsonl = tmp_path / "metrics.jsonl"
    with isolated_state(), rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger:
        row = {"sample_id": "a", "spans": "mine", "step": "mine too", "reward": 1.0}
        logger.log_samples([row], 4, name="trajectories")
        logger.log_metrics({"reward": 1.0}, step=4)
    out = tmp_path / "own.html"
    assert run_cli("report", jsonl, "--html", out).returncode == 0
    loaded = _open(browser, out)
    try:
        first = loaded.page.locator("tr.traj").first
        assert first.locator("td").first.inner_text().strip() == "4"
        first.click()
        assert loaded.page.locator("tr.detail").count() == 1
        assert loaded.messages == []
    finally:
        loaded.page.close()


def test_the_demos_page_reads_well(browser: Any, tmp_path: Path) -> None:
    """The demo's run, as a user would open it: every one of its trajectories in the table, a
    row opened, the whole page screenshotted."""
    output = tmp_path / "demo"
    done = run_cli(
        "demo", "--steps", "8", "--interval", "0", "--prometheus-port", "0", "--no-plot",
        "--output", output, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    page_file = output / "run.html"
    jsonl, traces = output / "metrics.jsonl", output / "traces.jsonl"
    done = run_cli("report", jsonl, "--traces", traces, "--html", page_file)
    assert done.returncode == 0, done.stderr
    loaded = _open(browser, page_file)
    try:
        assert loaded.messages == [] and loaded.requests == [page_file.resolve().as_uri()]
        assert loaded.rows() == len(trajectory_rows(jsonl)) > 0
        loaded.page.locator("tr.traj").nth(3).click()
        assert loaded.page.locator("tr.detail .turn").count() >= 1
        table = tmp_path / "report-html-trajectories.png"
        loaded.page.screenshot(path=str(table))
        loaded.page.evaluate("window.scrollTo(0, 0)")
        top = tmp_path / "report-html.png"
        loaded.page.screenshot(path=str(top))
        assert top.stat().st_size > 10_000 and table.stat().st_size > 10_000
        keep = os.environ.get("RLMETRICS_HTML_SCREENSHOTS")
        if keep:
            for shot in (top, table):
                shutil.copyfile(shot, Path(keep) / shot.name)
        assert loaded.messages == []
    finally:
        loaded.page.close()


def test_a_run_of_150_000_steps_draws_its_page(browser: Any, tmp_path: Path) -> None:
    """Before: the goodput chart took the tallest step with Math.max(...steps), and the
    goodput % curve (never thinned) its extremes the same way: past about 125 000 arguments
    V8 throws "Maximum call stack size exceeded", so nothing was drawn and the page never
    became ready."""
    import json

    jsonl = tmp_path / "m.jsonl"
    with jsonl.open("w") as out:
        for step in range(1, 150_001):
            metrics = {
                "reward": step % 7 / 7,
                "efficiency/step_wall_time_s": 1.0 + step % 3,
                "efficiency/idle/buffer_starvation_s": 0.25,
            }
            row = {"time": 1.0 + step, "run_id": "r", "step": step, "prefix": "train"}
            out.write(json.dumps({**row, "metrics": metrics}) + "\n")
    page = tmp_path / "m.html"
    done = run_cli("report", jsonl, "--html", page, timeout=300)
    assert done.returncode == 0, done.stderr
    found = _open(browser, page)
    try:
        assert found.messages == []
        assert found.page.locator("#curves svg path.curve").count() >= 2
        assert found.page.locator("#goodput svg rect").count() >= 1
    finally:
        found.page.close()


def test_a_long_run_s_goodput_chart_draws_a_bar_per_run_of_steps(
    browser: Any, tmp_path: Path
) -> None:
    """Before: a rectangle per step and category (2*10^5 steps took 21 s to draw). A run of
    5000 steps draws at most GOODPUT_BARS bars, each naming its steps, and the one slow step
    is a whisker that names it."""
    import json

    from rlmetrics.report.html import GOODPUT_BARS

    jsonl = tmp_path / "m.jsonl"
    with jsonl.open("w") as out:
        for step in range(5000):
            wall = 40.0 if step == 3210 else 2.0
            metrics = {"efficiency/step_wall_time_s": wall, "efficiency/idle/refit_bubble_s": 0.5}
            row = {"time": 1.0 + step, "run_id": "r", "step": step, "prefix": "train"}
            out.write(json.dumps({**row, "metrics": metrics}) + "\n")
    page = tmp_path / "m.html"
    done = run_cli("report", jsonl, "--html", page)
    assert done.returncode == 0, done.stderr
    found = _open(browser, page)
    try:
        assert found.messages == []
        rects = found.page.locator("#goodput svg rect")
        assert rects.count() == 2 * GOODPUT_BARS  # productive and the bubble, a bar each
        assert (
            rects.first.locator("title").text_content().startswith("steps 0\N{EN DASH}7 (8, mean)")
        )
        whiskers = found.page.locator("#goodput svg line.whisker")
        assert whiskers.count() == 1
        assert "longest 40 s (step 3210)" in whiskers.first.locator("title").text_content()
        assert found.page.locator("#goodput svg text").last.text_content() == "step 4999"
    finally:
        found.page.close()


def test_a_run_without_step_timings_counts_its_steps(browser: Any, tmp_path: Path) -> None:
    """The README quickstart's run: three steps logged, none with efficiency keys. The header
    says 3 steps (it said "0 steps" and "0 s step wall time", the count of timed steps) and
    shows no wall time or goodput card it has nothing for."""
    import rlmetrics

    jsonl = tmp_path / "metrics.jsonl"
    with rlmetrics.Logger(backends={"jsonl": {"path": jsonl}}) as logger:
        for step in range(3):
            logger.log_metrics({"reward": 0.5 + step, "loss": 1.0 / (step + 1)}, step, "train")
    out = tmp_path / "run.html"
    assert run_cli("report", jsonl, "--html", out).returncode == 0
    loaded = _open(browser, out)
    try:
        cards = {
            (card.locator("span").text_content() or ""): card.locator("b").text_content()
            for card in loaded.page.locator(".card").all()
        }
        assert cards.get("steps") == "3", cards
        assert not any("wall time" in label for label in cards), cards
        assert "goodput" not in cards, cards
        assert loaded.messages == []
    finally:
        loaded.page.close()


def test_the_timeline_says_which_steps_it_shows(browser: Any, tmp_path: Path) -> None:
    """Before: the timeline drew the first 12 steps of a run of 15 with nothing to say so, and
    a user read it as the whole run. It says now which steps of how many it shows, and how to
    see others; a window asked for says so, and so does a timeline of every step."""
    run = record_trajectory_run(tmp_path, steps=15, per_step=1)
    said = {}
    cases = (
        ("first", ()),
        ("asked", ("--timeline-steps", "4:6")),
        ("tail", ("--tail", "3")),
        ("all", None),
    )
    for name, extra in cases:
        out = tmp_path / f"{name}.html"
        if extra is None:
            (tmp_path / "few").mkdir()
            few = record_trajectory_run(tmp_path / "few", steps=3, per_step=1)
            args: tuple[Any, ...] = (few.jsonl, "--traces", few.traces)
        else:
            args = (run.jsonl, "--traces", run.traces, *extra)
        done = run_cli("report", *args, "--html", out)
        assert done.returncode == 0, done.stderr
        loaded = _open(browser, out)
        try:
            said[name] = loaded.page.locator("#timeline .note").inner_text()
            assert loaded.messages == []
        finally:
            loaded.page.close()
    to = "\u2013"  # the en dash the page puts between the first and last step
    assert said["first"] == (
        f"Steps 1{to}12 of the 15 traced (1{to}15): the first 12. "
        "--timeline-steps FIRST:LAST draws others."
    )
    assert said["asked"] == f"Steps 4{to}6 of the 15 traced (1{to}15), as --timeline-steps chose."
    assert said["all"] == f"All 3 traced steps (1{to}3)."
    assert said["tail"] == (
        f"Steps 13{to}15 of the 15 traced (1{to}15): those --steps or --tail chose. "
        "--timeline-steps FIRST:LAST draws others."
    )


def _own_rows_page(browser: Any, tmp_path: Path, rows: list[dict[str, Any]]) -> Loaded:
    """The page of a run whose ``trajectories`` table holds ``rows`` (at step 1), opened."""
    import rlmetrics
    from rlmetrics.testing import isolated_state

    jsonl = tmp_path / "metrics.jsonl"
    with isolated_state(), rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger:
        logger.log_samples(rows, 1, name="trajectories")
        logger.log_metrics({"reward": 1.0}, step=1)
    out = tmp_path / "own.html"
    done = run_cli("report", jsonl, "--html", out)
    assert done.returncode == 0, done.stderr
    return _open(browser, out)


def _column(loaded: Loaded, label: str) -> list[str]:
    labels = [
        t.strip() for t in loaded.page.locator("#trajectory-table thead th").all_inner_texts()
    ]
    cells = loaded.page.locator(
        f"#trajectory-table tr.traj td:nth-child({labels.index(label) + 1})"
    )
    return [t.strip() for t in cells.all_inner_texts()]


def test_a_column_s_numbers_have_the_same_digits(browser: Any, tmp_path: Path) -> None:
    """Before: the demo's reward column read ``0``, ``0.5000`` and ``1`` (a whole number lost
    its decimals, a fraction got four), its latency ``1`` beside ``1.220``. Each column's
    numbers now have the digits its most precise value needs (at most 4; latency 3)."""
    rows = [
        {"sample_id": "a", "reward": 0.0, "latency_s": 1.0, "turns": 2},
        {"sample_id": "b", "reward": 0.5, "latency_s": 1.22, "turns": 1},
        {"sample_id": "c", "reward": 1.0, "latency_s": 0.7654, "turns": 3},
    ]
    loaded = _own_rows_page(browser, tmp_path, rows)
    try:
        assert _column(loaded, "reward") == ["0.0", "0.5", "1.0"]
        assert _column(loaded, "latency s") == ["1.000", "1.220", "0.765"]
        assert _column(loaded, "turns") == ["2", "1", "3"]
        assert loaded.messages == []
    finally:
        loaded.page.close()


def test_every_column_header_says_what_it_holds(browser: Any, tmp_path: Path) -> None:
    """Before: the ``weights`` column (the row's ``weight_version``) had no title, and a user
    could not tell what its numbers were. Each header's tooltip now names the samples-file
    column it shows and what that is."""
    rows = [{"sample_id": "a", "reward": 1.0, "weight_version": 3}]
    loaded = _own_rows_page(browser, tmp_path, rows)
    try:
        headers = loaded.page.locator("#trajectory-table thead th")
        titles = {
            headers.nth(i).inner_text().strip(): headers.nth(i).get_attribute("title") or ""
            for i in range(headers.count())
        }
        assert all(titles.values()), titles
        assert "weight_version" in titles["weights"] and "policy" in titles["weights"]
        assert "latency_s" in titles["latency s"]
        assert loaded.messages == []
    finally:
        loaded.page.close()


def test_the_wall_time_card_says_it_is_the_steps_total(loaded: Loaded) -> None:
    """Before: the header's card read "977.9 s step wall time" beside "40 steps" (the demo's),
    which reads as one step's time; it is the timed steps' sum (the text report's "977.9 s
    step wall time" of its "Goodput over 40 steps" line). The card now says so."""
    cards = {
        (card.locator("span").text_content() or ""): card.locator("b").text_content() or ""
        for card in loaded.page.locator(".card").all()
    }
    assert "total step wall time (3 steps)" in cards, cards
    assert loaded.messages == []


def test_a_curve_s_axis_ends_have_the_same_decimals(browser: Any, tmp_path: Path) -> None:
    """Before: a curve's axis read "0.9000" at its foot and "1.10" at its top (the agent-loop
    example's constant reward of 1: each end formatted on its own, by its size). Both ends
    now have the same decimals."""
    jsonl, out = tmp_path / "m.jsonl", tmp_path / "m.html"
    with jsonl.open("w") as rows:
        for step in range(1, 4):
            metrics = {"reward": 1.0, "loss": 0.5 + step}
            row = {"time": float(step), "run_id": "r", "step": step, "prefix": "train"}
            rows.write(json.dumps({**row, "metrics": metrics}) + "\n")
    done = run_cli("report", jsonl, "--html", out)
    assert done.returncode == 0, done.stderr
    loaded = _open(browser, out)
    try:
        ends = {}
        for name in ("reward", "loss"):
            labels = loaded.page.locator(f'#curves svg[aria-label="{name}"] > text')
            ends[name] = [labels.nth(0).text_content(), labels.nth(1).text_content()]
        assert ends == {"reward": ["1.1000", "0.9000"], "loss": ["3.50", "1.50"]}, ends
        assert loaded.messages == []
    finally:
        loaded.page.close()


def test_a_long_lane_name_stays_inside_the_timeline(browser: Any, tmp_path: Path) -> None:
    """Before: a lane's name was drawn right-aligned in a 200 px margin, so a thread pool's
    lane ("driver / rollout-generation-worker-pool_0") lost its start past the chart's left
    edge and read "r / rollout-...". The margin now grows with the names (to a bound past
    which a name is cut in its middle), and each name's tooltip is the whole name."""
    from concurrent.futures import ThreadPoolExecutor

    import rlmetrics
    from rlmetrics.testing import isolated_state

    jsonl, traces, out = tmp_path / "m.jsonl", tmp_path / "t.jsonl", tmp_path / "m.html"
    pools = ("rollout-generation-worker-pool", "x" * 120)

    def generate() -> None:
        with rlmetrics.phase("generation", bucket="productive"):
            pass

    with (
        isolated_state(),
        rlmetrics.start(exporters={"otlp_file": {"path": traces}}, run_id="lanes"),
        rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger,
        rlmetrics.step(1, logger=logger),
    ):
        for prefix in pools:
            with ThreadPoolExecutor(1, thread_name_prefix=prefix) as pool:
                pool.submit(generate).result()
        logger.log_metrics({"reward": 1.0}, step=1)
    done = run_cli("report", jsonl, "--traces", traces, "--html", out)
    assert done.returncode == 0, done.stderr
    loaded = _open(browser, out)
    try:
        chart = loaded.page.locator('#timeline svg[aria-label="timeline"]')
        left = (chart.bounding_box() or {})["x"]
        names = chart.locator("text.lane")
        whole = {f"driver / {prefix}_0" for prefix in pools}
        assert {names.nth(i).locator("title").text_content() for i in range(names.count())} >= whole
        for i in range(names.count()):
            box = names.nth(i).bounding_box()
            assert box is not None and box["x"] >= left, i
        shown = [
            names.nth(i).evaluate("e => e.lastChild.textContent") for i in range(names.count())
        ]
        assert f"driver / {pools[0]}_0" in shown, shown
        assert loaded.messages == []
    finally:
        loaded.page.close()


def test_an_outcome_of_the_users_own_is_readable(browser: Any, tmp_path: Path) -> None:
    """A ``trajectories`` table of the user's own (``log_samples``) may hold any outcome. Before:
    one but the four rlmetrics writes was white text on no background, an empty-looking cell.
    It is drawn on a neutral pill now."""
    loaded = _own_rows_page(browser, tmp_path, [{"sample_id": "a", "outcome": "aborted"}])
    try:
        pill = loaded.page.locator("#trajectory-table tr.traj .outcome").first
        assert pill.inner_text() == "aborted"
        background = pill.evaluate("e => getComputedStyle(e).backgroundColor")
        assert background not in ("rgba(0, 0, 0, 0)", "transparent"), background
        assert loaded.messages == []
    finally:
        loaded.page.close()


def test_a_curve_of_one_step_names_only_that_step(browser: Any, tmp_path: Path) -> None:
    """Before: a run of one step (step 1) had each curve's axis run from "step 0" to "2",
    steps it never logged (the axis is widened around the one point). It names step 1 only."""
    loaded = _own_rows_page(browser, tmp_path, [{"sample_id": "a"}])
    try:
        labels = loaded.page.locator('#curves svg[aria-label="reward"] > text').all_text_contents()
        assert "step 1" in labels and "step 0" not in labels and "2" not in labels, labels
        assert loaded.messages == []
    finally:
        loaded.page.close()


def test_a_row_without_counts_opens_into_a_sentence(browser: Any, tmp_path: Path) -> None:
    """A ``trajectories`` row of the user's own may have no ``turns`` or ``tool_calls``.
    Before: it opened into "turns, tool calls: give the run's traces file..." (the counts
    left blank). The note says only the counts the row has."""
    rows = [{"sample_id": "a"}, {"sample_id": "b", "turns": 3}]
    loaded = _own_rows_page(browser, tmp_path, rows)
    try:
        said = []
        for i in range(2):
            loaded.page.locator("tr.traj").nth(i).click()
            said.append(loaded.page.locator("tr.detail .note").first.inner_text())
            loaded.page.locator("tr.traj").nth(i).click()
        assert said == [
            "Give the run's traces file with --traces to see its turns and tool calls.",
            "3 turns: give the run's traces file with --traces to see each.",
        ]
        assert loaded.messages == []
    finally:
        loaded.page.close()
