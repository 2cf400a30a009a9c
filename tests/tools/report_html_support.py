"""A run with trajectories for ``rlmetrics report --html``'s tests: three steps through the real
Logger and telemetry, spans to an OTLP/JSON file, text kept (``full``) so the page has text to
show — a text holding markup, which the page must show as text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import rlmetrics
from rlmetrics.backends.jsonl import samples_path
from rlmetrics.testing import isolated_state
from rlmetrics.trajectories import configure

__all__ = [
    "MARKUP",
    "UNICODE",
    "TrajectoryRun",
    "record_long_values_run",
    "record_many_run",
    "record_many_steps_run",
    "record_trajectory_run",
    "trajectory_rows",
]

#: Kept text that is markup: the page must show it, never run or render it.
MARKUP = "</script><b id='injected'>bold?</b>"
#: Kept text past ASCII, on two lines: the page must show it as it was given.
UNICODE = "second line: é 漢字 🚀"
_OUTCOMES = ("success", "failure", "success", "error", "truncated", "success")


class TrajectoryRun:
    def __init__(self, jsonl: Path, traces: Path, records: dict[tuple[str, int], dict[str, Any]]):
        self.jsonl, self.traces, self.records = jsonl, traces, records


def _record(step: int, index: int) -> dict[str, Any]:
    outcome = _OUTCOMES[index % len(_OUTCOMES)]
    turns = 1 + (index + step) % 3
    return {
        "sample_id": f"{step}-{index}",
        "group_id": f"{step}-g{index // 3}",
        "env": ("math", "code")[index % 2],
        "agent": "solver",
        "outcome": outcome,
        "finish_reason": "stop" if outcome == "success" else "length",
        "weight_version": step,
        "error": "TimeoutError" if outcome == "error" else None,
        "prompt": f"question {step}-{index} {MARKUP}",
        "turns": [
            {
                "generations": [
                    {
                        "model": "policy",
                        "input_tokens": 100 + turn,
                        "output_tokens": 20 + turn,
                        "finish_reason": "tool_calls",
                        "latency_s": 0.5,
                        "completion": f"turn {turn} says {MARKUP}\n{UNICODE}",
                    }
                ],
                "tool_calls": [
                    {
                        "name": ("search", "python")[turn % 2],
                        "outcome": "error" if (index + turn) % 4 == 0 else "success",
                        "latency_s": 0.25,
                    }
                ],
            }
            for turn in range(turns)
        ],
        "rewards": [
            {"value": 1.0 if outcome == "success" else 0.0, "component": "correct"},
            {"value": 0.25 * (index % 3), "component": "format"},
        ],
    }


def record_trajectory_run(folder: Path, steps: int = 3, per_step: int = 6) -> TrajectoryRun:
    jsonl, traces = folder / "metrics.jsonl", folder / "traces.jsonl"
    records: dict[tuple[str, int], dict[str, Any]] = {}
    with isolated_state():
        configure(text="full")
        with (
            rlmetrics.start(exporters={"otlp_file": {"path": traces}}, run_id="html-run"),
            rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger,
        ):
            for step in range(1, steps + 1):
                with rlmetrics.step(step, logger=logger):
                    batch = [_record(step, i) for i in range(per_step)]
                    records.update({(r["sample_id"], step): r for r in batch})
                    with rlmetrics.phase("generation", bucket="productive"):
                        logger.log_trajectories(batch, step=step)
                    mean = sum(r["rewards"][0]["value"] for r in batch) / per_step
                    logger.log_metrics({"reward": mean, "loss": 1.0 / step}, step=step)
    return TrajectoryRun(jsonl, traces, records)


def record_long_values_run(folder: Path) -> TrajectoryRun:
    """Trajectories whose values are as long as the record takes them, with no space to break
    at: ids of 256 characters, an env, agent, finish reason, error, model and tool name of 128,
    and kept text holding one 5000-character word; and a row of the user's own with an
    outcome and a weight version of 200."""
    jsonl, traces = folder / "metrics.jsonl", folder / "traces.jsonl"
    word = "w" * 5000
    records: dict[tuple[str, int], dict[str, Any]] = {}
    with isolated_state():
        configure(text="full")
        with (
            rlmetrics.start(exporters={"otlp_file": {"path": traces}}, run_id="long-run"),
            rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger,
            rlmetrics.step(1, logger=logger),
        ):
            batch = [
                {
                    "sample_id": f"{i}" + "s" * 255,
                    "group_id": "g" * 256,
                    "env": "e" * 128,
                    "agent": "a" * 128,
                    "outcome": "error",
                    "finish_reason": "f" * 128,
                    "error": "E" * 128,
                    "prompt": word,
                    "completion": word,
                    "turns": [
                        {
                            "generations": [{"model": "m" * 128, "completion": word}],
                            "tool_calls": [{"name": "t" * 128, "arguments": word, "result": word}],
                        }
                    ],
                }
                for i in range(3)
            ]
            records.update({(r["sample_id"], 1): r for r in batch})
            logger.log_trajectories(batch, step=1)
            # A table of the user's own may hold any outcome: one of 200 characters.
            own = {"sample_id": "own", "outcome": "o" * 200, "weight_version": "v" * 200}
            logger.log_samples([own], 1, name="trajectories")
            logger.log_metrics({"reward": 1.0}, step=1)
    return TrajectoryRun(jsonl, traces, records)


def record_many_run(folder: Path, count: int) -> TrajectoryRun:
    """``count`` small trajectories in one step (their rows all kept: ``max_sample_rows``),
    without spans or text: a table larger than a browser lists at once."""
    jsonl = folder / "metrics.jsonl"
    with (
        isolated_state(),
        rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}, max_sample_rows=count) as logger,
    ):
        batch = [
            {"sample_id": f"s{i}", "group_id": f"g{i // 8}", "env": ("math", "code")[i % 2]}
            for i in range(count)
        ]
        logger.log_trajectories(batch, step=1)
        logger.log_metrics({"reward": 1.0}, step=1)
    return TrajectoryRun(jsonl, folder / "no-traces.jsonl", {(r["sample_id"], 1): r for r in batch})


def record_many_steps_run(folder: Path, steps: int) -> Path:
    """A run of ``steps`` steps, each with its wall time and two idle categories (what the
    goodput chart draws a bar of), no trajectories; its JSONL."""
    jsonl = folder / "metrics.jsonl"
    with isolated_state(), rlmetrics.Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger:
        for step in range(1, steps + 1):
            logger.log_metrics(
                {
                    "reward": step / steps,
                    "efficiency/step_wall_time_s": 10.0,
                    "efficiency/idle/buffer_starvation_s": 1.0 + step % 3,
                    "efficiency/idle/refit_bubble_s": 0.5,
                },
                step=step,
                prefix="train",
            )
    return jsonl


def trajectory_rows(jsonl: Path) -> list[dict[str, Any]]:
    """The trajectory rows the run's samples file holds, each with its step."""
    rows = []
    for line in samples_path(jsonl).read_text().splitlines():
        row = json.loads(line)
        if row.get("name") == "trajectories":
            rows.append({"step": row["step"], **row["sample"]})
    return rows
