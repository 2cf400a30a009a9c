"""``rlmetrics dashboard --prometheus URL``: against Debian's real Prometheus scraping a run
that logged only some series, the dashboard keeps exactly the panels that read a series the run
exported, drops the others, and spans the run's steps."""

from __future__ import annotations

import datetime
import json
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from exporters._peers import PrometheusServer
from tools_support import run_cli

import rlmetrics
from rlmetrics import liveness
from rlmetrics.dashboard.clip import clip_rows
from rlmetrics.dashboard.grafana import collect_rows
from rlmetrics.dashboard.promql import Names, sample_names
from rlmetrics.registry import default_registry

RUN_ID = "clip-test-run"


def _names_in(server: PrometheusServer) -> set[str]:
    url = f"{server.url}/api/v1/label/__name__/values?" + urllib.parse.urlencode(
        {"match[]": '{job="rlmetrics"}'}
    )
    with urllib.request.urlopen(url, timeout=5) as response:
        return set(json.load(response)["data"])


def _iso_seconds(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_only_the_panels_whose_series_the_run_exported_are_kept(
    prometheus_server: Callable[[tuple[str, int]], PrometheusServer],
) -> None:
    with rlmetrics.start(run_id=RUN_ID, exporters=["prometheus"], prometheus_port=0) as handle:
        assert handle.prometheus_address is not None
        logger = rlmetrics.Logger(backends={})
        # Reward and loss, one efficiency category: no KL, no entropy, no vLLM, no Gym.
        for step in range(1, 4):
            logger.log_metrics(
                {
                    "reward": step / 4,
                    "loss": 1.0 / step,
                    "efficiency/idle/refit_bubble_s": 2.0,
                    "efficiency/step_wall_time_s": 20.0,
                },
                step=step,
                prefix="train",
            )
        newest = liveness.liveness.snapshot()
        server = prometheus_server(handle.prometheus_address)
        server.wait_for("rl_reward_mean", lambda r: r and float(r[0]["value"][1]) == 0.75)
        server.wait_for("rl_efficiency_seconds")
        done = run_cli("dashboard", "--prometheus", server.url, "--run-id", RUN_ID)
        present = _names_in(server)
    assert done.returncode == 0, done.stderr
    dashboard = json.loads(done.stdout)

    names = Names(item.spec for item in default_registry().declared())
    rows, _ = collect_rows()
    expected_kept, expected_dropped = set(), set()
    for row in rows:
        for panel in row.panels:
            exported = any(s in present for r in panel.reads for s in sample_names(names.spec(r)))
            (expected_kept if exported else expected_dropped).add(panel.title)
    kept = {p["title"] for p in dashboard["panels"] if p["type"] != "row"}
    assert kept == expected_kept
    assert expected_dropped and not kept & expected_dropped
    # The run's own series are in, what it never logged is out.
    assert "Reward (mean of the step's samples)" in kept and "Policy loss" in kept
    assert "KL divergence to the reference policy" not in kept
    assert not any("Gym" in p["title"] or "vLLM" in p["title"] for p in dashboard["panels"])
    # Rows without a panel are gone; the kept rows still lead their panels.
    assert next(p["title"] for p in dashboard["panels"] if p["type"] == "row") == "Training"
    assert "Gym rollouts" not in [p["title"] for p in dashboard["panels"]]
    assert f"{len(expected_dropped)} dropped" in done.stderr

    # The range is the run's steps (the first and the newest one logged here), with margins;
    # it is still logging, so it ends now.
    assert newest.last_step_time is not None
    start = _iso_seconds(dashboard["time"]["from"])
    assert newest.last_step_time - 120 < start < newest.last_step_time
    assert dashboard["time"]["to"] == "now"
    run_variable = next(v for v in dashboard["templating"]["list"] if v["name"] == "run_id")
    assert run_variable["current"]["value"] == [RUN_ID]


def test_clipping_keeps_a_panel_while_any_series_it_reads_exists() -> None:
    names = Names(item.spec for item in default_registry().declared())
    rows, _ = collect_rows()
    everything: set[str] = {
        s for row in rows for p in row.panels for r in p.reads for s in sample_names(names.spec(r))
    }
    assert clip_rows(rows, names, everything).dropped == ()
    result = clip_rows(rows, names, set())
    assert result.rows == () and len(result.dropped) == sum(len(r.panels) for r in rows)
    only = {"rl_reward_mean"}
    kept = [p.title for row in clip_rows(rows, names, only).rows for p in row.panels]
    assert kept == ["Reward (mean of the step's samples)"]


def test_a_prometheus_that_does_not_answer_is_a_clear_error() -> None:
    done = run_cli("dashboard", "--prometheus", "http://127.0.0.1:9")
    assert done.returncode == 1
    assert "cannot query Prometheus at http://127.0.0.1:9" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("option", [("--run-id", "run-42"), ("--lookback", "1d")])
def test_a_clipping_option_without_prometheus_is_refused_in_one_line(
    option: tuple[str, str],
) -> None:
    """Before: `rlmetrics dashboard --run-id run-42` printed the whole dashboard, exit 0, as
    if it were clipped to that run."""
    done = run_cli("dashboard", *option)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"rlmetrics dashboard: {option[0]} is about the run a Prometheus scraped: give its URL "
        "with --prometheus (without it, the whole dashboard is printed)"
    ]


@pytest.mark.parametrize("tool", ["dashboard", "query"])
def test_a_prometheus_given_as_host_port_is_asked_over_http(tmp_path: Path, tool: str) -> None:
    """Before: ``--prometheus 127.0.0.1:9090`` (an address, as ``stack --run`` takes them) was
    "<urlopen error unknown url type: 127.0.0.1>"; it is now asked at http://HOST:PORT, and
    a URL of another scheme is refused in one line."""
    import socket

    with socket.socket() as closed:  # a port nothing listens on: refused, at once
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    jsonl = tmp_path / "metrics.jsonl"
    jsonl.write_text(
        json.dumps({"time": 1.0, "run_id": "r", "step": 1, "metrics": {"x": 1}}) + "\n"
    )
    given = [jsonl] if tool == "query" else []
    done = run_cli(tool, *given, "--prometheus", f"127.0.0.1:{port}")
    said = done.stdout + done.stderr
    assert "unknown url type" not in said
    assert f"http://127.0.0.1:{port}" in said and "Traceback" not in said
    refused = run_cli(tool, *given, "--prometheus", "ftp://127.0.0.1:9090")
    assert refused.returncode == 2
    assert "http:// or https://" in refused.stderr and "Traceback" not in refused.stderr
