"""The Grafana dashboard: committed as generated, built from declared series only, and every
panel's PromQL run against Debian's real Prometheus scraping a running ``rlmetrics demo``."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exporters._peers import PrometheusServer, free_port, wait_until
from tools_support import RLMETRICS, run_cli

from rlmetrics.dashboard.grafana import (
    build_dashboard,
    collect_rows,
    dashboard_json,
    panel_queries,
    substitute,
)
from rlmetrics.dashboard.promql import RUN_ID_LABEL
from rlmetrics.registry import default_registry

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "rlmetrics.json"
RUN_ID = "dashboard-test-run"


def _generated() -> dict[str, Any]:
    rows, problems = collect_rows()
    assert problems == []
    return build_dashboard(rows)


def test_committed_dashboard_is_current() -> None:
    """docs/grafana/rlmetrics.json is exactly what the installed plugins generate: regenerate it
    with `rlmetrics dashboard > docs/grafana/rlmetrics.json` in an environment with every
    distribution of this repository installed (any tox SDK env)."""
    assert DASHBOARD.read_text() == dashboard_json(_generated()), (
        "docs/grafana/rlmetrics.json is stale: regenerate it with "
        "`rlmetrics dashboard > docs/grafana/rlmetrics.json`"
    )


def test_the_command_prints_the_committed_dashboard() -> None:
    done = run_cli("dashboard")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == json.loads(DASHBOARD.read_text())


def test_every_panel_reads_declared_series_and_restricts_to_the_run() -> None:
    rows, _ = collect_rows()
    declared = {item.spec.name for item in default_registry().declared()}
    for row in rows:
        for panel in row.panels:
            assert panel.reads and set(panel.reads) <= declared, panel.title
            for query in panel.queries:
                assert f'target_info{{{RUN_ID_LABEL}=~"$run_id"}}' in query.expr, panel.title
    dashboard = build_dashboard(rows)
    variables = [v["name"] for v in dashboard["templating"]["list"]]
    assert variables[:2] == ["datasource", "run_id"] and "host" in variables
    for panel in dashboard["panels"]:
        if panel["type"] != "row":  # no hard-coded datasource uid anywhere
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def _start_demo(port: int, output: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            RLMETRICS,
            "demo",
            "--steps",
            "24",
            "--interval",
            "0.25",
            "--seed",
            "7",
            "--prometheus-port",
            str(port),
            "--output",
            str(output),
            "--run-id",
            RUN_ID,
            "--serve",
            "--json",
            "--no-plot",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A demo that does not exit when interrupted is aborted: its threads' stacks say why.
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        # Ctrl-C's handling, whatever this process inherited: a suite started in the background
        # by a non-interactive shell ignores SIGINT, and so would the demo.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _stop(demo: subprocess.Popen[str]) -> str:
    """Interrupt the demo as Ctrl-C does; its stderr once it has exited."""
    if demo.poll() is None:
        demo.send_signal(signal.SIGINT)
    try:
        return demo.communicate(timeout=30)[1]
    except subprocess.TimeoutExpired:
        demo.send_signal(signal.SIGABRT)
        stderr = demo.communicate(timeout=30)[1]
        raise AssertionError(f"the demo did not exit on SIGINT:\n{stderr}") from None


def _read_json_document(process: subprocess.Popen[str]) -> dict[str, Any]:
    """The JSON document the demo prints on stdout once its steps are done (it keeps
    serving afterwards, so stdout stays open)."""
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line == "}\n":
            return dict(json.loads("".join(lines)))
    raise AssertionError(f"the demo ended before its JSON: {''.join(lines)}")


def _finite(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(series["value"][1])) for series in result)


def test_every_panel_returns_data_from_a_real_prometheus_scraping_the_demo(
    prometheus_server: Callable[[tuple[str, int]], PrometheusServer], tmp_path: Path
) -> None:
    port = free_port()
    prometheus = prometheus_server(("127.0.0.1", port))  # scraping before the demo starts
    demo = _start_demo(port, tmp_path / "demo")
    try:
        # Scraped during the run: the reward gauge changes between scrapes.
        prometheus.wait_for(
            f"changes(rl_reward_mean[5m]) and on(job, instance) "
            f'target_info{{{RUN_ID_LABEL}="{RUN_ID}"}}',
            lambda result: result and float(result[0]["value"][1]) >= 1,
            timeout_s=60,
        )
        result = _read_json_document(demo)
        assert result["run_id"] == RUN_ID
        assert set(result["parts"]) == {"gym", "host_memory", "vllm"}
        # The final state reaches Prometheus: the last step's reward is what it holds.
        last_reward = result["report"]["steps"][-1]["reward"]
        prometheus.wait_for(
            "rl_reward_mean", lambda r: r and float(r[0]["value"][1]) == last_reward
        )
        prometheus.wait_for("rl_host_memory_used_bytes", lambda r: len(r) == 2)
        values = {"run_id": RUN_ID, "host": ".*", "__rate_interval": "5m", "__range": "1h"}
        empty = []
        for title, expr in panel_queries(json.loads(DASHBOARD.read_text())):
            query = substitute(expr, values)
            answer = prometheus.query(query)  # raises unless the expression parses and runs
            if not _finite(answer):
                empty.append((title, query, answer))
        assert empty == [], f"panels without data: {empty}\n{prometheus.targets()}"
    finally:
        stderr = _stop(demo)
    assert demo.returncode == 0, stderr
    assert "Traceback" not in stderr
    # The run's JSONL, fed to `rlmetrics report`, agrees with what the demo reported.
    report = run_cli("report", result["jsonl"], "--json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["steps"] == result["report"]["steps"]
    wait_until(lambda: demo.poll() is not None)
