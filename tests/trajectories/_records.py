"""Trajectory records the tests log: a GRPO step's rollouts with turns, tool calls and
rewards, in the after-the-fact schema."""

from __future__ import annotations

import logging
from typing import Any

import pytest

OUTCOME_CYCLE = ("success", "success", "failure", "error", "truncated")


def rollout(
    index: int,
    *,
    turns: int = 2,
    text: str = "",
    outcome: str | None = None,
    reward: float | None = None,
) -> dict[str, Any]:
    """One rollout: ``turns`` turns of a generation and a tool call, a final reward."""
    outcome = outcome or OUTCOME_CYCLE[index % len(OUTCOME_CYCLE)]
    return {
        "sample_id": f"s{index}",
        "group_id": f"g{index // 4}",
        "env": ("math", "code")[index % 2],
        "agent": "solver",
        "outcome": outcome,
        "finish_reason": "stop" if outcome == "success" else "length",
        "weight_version": 7,
        "error": "TimeoutError" if outcome == "error" else None,
        "prompt": f"question {index} {text}",
        "completion": f"answer {index} {text}",
        "turns": [
            {
                "generations": [
                    {
                        "model": "policy",
                        "input_tokens": 100 + turn,
                        "output_tokens": 20 + turn,
                        "finish_reason": "tool_calls",
                        "latency_s": 0.5,
                        "weight_version": 6,
                        "prompt": f"turn prompt {text}",
                        "completion": f"turn completion {text}",
                    }
                ],
                "tool_calls": [
                    {
                        "name": ("search", "python")[turn % 2],
                        "outcome": "error" if (index + turn) % 7 == 0 else "success",
                        "error": "ValueError" if (index + turn) % 7 == 0 else None,
                        "latency_s": 0.25,
                        "arguments": f"args {text}",
                        "result": f"result {text}",
                    }
                ],
            }
            for turn in range(turns)
        ],
        "rewards": [
            {
                "value": float(index % 3) / 2 if reward is None else reward,
                "component": "correct",
                "latency_s": 0.1,
            }
        ],
    }


def warned(caplog: pytest.LogCaptureFixture, text: str) -> bool:
    """Whether a WARNING captured in ``caplog`` says ``text``."""
    return any(text in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


class Rows:
    """A backend that keeps the sample rows it is given (inline, like JSONL)."""

    inline = True

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        #: Each log_samples call: its step, name and rows' sample ids (one table each).
        self.tables: list[tuple[int, str, list[Any]]] = []

    def log_metrics(self, metrics: Any, step: int, prefix: str) -> None:
        pass

    def log_samples(self, rows: list[dict[str, Any]], step: int, name: str) -> None:
        self.rows.extend(rows)
        self.tables.append((step, name, [row.get("sample_id") for row in rows]))

    def finish(self) -> None:
        pass
