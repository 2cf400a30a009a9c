"""``rlmetrics report --traces`` on a step whose driver waits in one wall-clock category from
several asyncio tasks at once: spans count each task's wait, the metric the time the category
covered once (docs/traces.md, "Overlapping phases"); the report puts the difference down to
that reason. Recorded through the real telemetry on a simulated clock."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from tools_support import run_cli

import rlmetrics


def test_overlapping_waits_of_one_category_are_a_reason_not_unexplained(tmp_path: Path) -> None:
    """A 1 s step: 4 tasks starved together for 0.25 s, then 0.75 s productive. The metric's
    goodput is 75 % (0.25 s idle); spans have 1 s of idle leaves, so theirs is 42.9 %. Before,
    the report read "untimed -75 pp, UNEXPLAINED +107 pp"; now the whole difference is the
    overlapping leaves', and nothing is unexplained."""
    jsonl, traces = tmp_path / "metrics.jsonl", tmp_path / "traces.jsonl"
    now = [time.time()]

    async def loop(logger: rlmetrics.Logger) -> None:
        async with rlmetrics.step(1, logger=logger):
            entered, all_in, go = 0, asyncio.Event(), asyncio.Event()

            async def starve() -> None:
                nonlocal entered
                async with rlmetrics.phase("idle/buffer_starvation"):
                    entered += 1
                    if entered == 4:
                        all_in.set()
                    await go.wait()

            tasks = [asyncio.create_task(starve()) for _ in range(4)]
            await all_in.wait()
            now[0] += 0.25
            go.set()
            await asyncio.gather(*tasks)
            async with rlmetrics.phase("policy_update", bucket="productive"):
                now[0] += 0.75

    exporters = {"otlp_file": {"path": str(traces)}}
    with (
        rlmetrics.start(exporters=exporters),
        rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger,
        rlmetrics.run(clock=lambda: now[0]),
    ):
        asyncio.run(loop(logger))
    done = run_cli("report", jsonl, "--traces", traces, "--json")
    assert done.returncode == 0, done.stderr
    [step] = json.loads(done.stdout)["traces"]["steps"]
    assert step["metrics_pct"] == pytest.approx(75.0)
    assert step["spans_pct"] == pytest.approx(100 * 0.75 / 1.75)
    assert step["reasons_pp"] == pytest.approx({"overlapping": 75.0 - 100 * 0.75 / 1.75})
    assert step["unexplained_pp"] == 0.0
    text = run_cli("report", jsonl, "--traces", traces)
    assert "overlapping" in text.stdout and "UNEXPLAINED" not in text.stdout, text.stdout
