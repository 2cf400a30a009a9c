"""What SwanLab drops of a logged row, by its own rules per key, is said once and nothing else
is lost: a step the key already has (not only the last one), a second table at a step, a key
that changes kind (a number, later text) and a step past SwanLab's largest."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from rlmetrics_swanlab import SwanLabBackend
from swanlab_helpers import records, scalars, texts

import rlmetrics


def _said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_a_step_the_key_already_has_is_said_even_when_it_was_not_the_last(
    swanlab_config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # An eval loop going back over steps: SwanLab keeps every step a key has once, and drops
    # a later value at any of them without a word (only the last step was checked).
    backend = SwanLabBackend(**swanlab_config)
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        for step in (1, 2, 1, 5, 3, 5):
            backend.log_metrics({"loss": step + 0.5}, step, "eval")
    backend.finish()
    assert scalars(backend.run_dir, "eval/loss") == [(1, 1.5), (2, 2.5), (5, 5.5), (3, 3.5)]
    (said,) = _said(caplog, "rlmetrics-swanlab")
    assert "'eval/loss'" in said and "step 1" in said


def test_a_second_table_at_a_step_is_said(
    swanlab_config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    logger = rlmetrics.Logger(backends={"swanlab": swanlab_config})
    backend = logger.backends["swanlab"]
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        logger.log_samples([{"prompt": "a", "completion": "b", "reward": 1.0}], step=2)
        logger.log_samples([{"prompt": "c", "completion": "d", "reward": 0.0}], step=2)
        logger.log_samples([{"prompt": "e", "completion": "f", "reward": 0.5}], step=3)
        logger.finish()
    assert [(step, caption) for step, _, caption in texts(backend.run_dir, "samples")] == [
        (2, "reward 1.0"),
        (3, "reward 0.5"),
    ]
    (said,) = _said(caplog, "rlmetrics-swanlab")
    assert "'samples'" in said and "step 2" in said


def test_a_key_changing_kind_and_a_step_past_swanlabs_largest_cost_only_themselves(
    swanlab_config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # SwanLab refused both with an ERROR line of its own on every row, and logged nothing of
    # it through rlmetrics.
    backend = SwanLabBackend(**swanlab_config)
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        backend.log_metrics({"score": 1.0, "loss": 0.5}, 1, "train")
        backend.log_metrics({"score": "n/a", "loss": 0.25}, 2, "train")
        backend.log_metrics({"score": "n/a", "loss": 0.125}, 3, "train")
        backend.log_metrics({"loss": 9.0}, 2**50, "train")
        backend.log_metrics({"loss": 8.0}, 2**50 + 1, "train")
    backend.finish()
    assert scalars(backend.run_dir, "train/score") == [(1, 1.0)]
    assert texts(backend.run_dir, "train/score") == []
    assert scalars(backend.run_dir, "train/loss") == [(1, 0.5), (2, 0.25), (3, 0.125)]
    (kind,) = _said(caplog, "'train/score'")
    assert "text" in kind and "number" in kind
    (past,) = _said(caplog, str(2**50))
    assert str(2**48) in past


def test_keys_swanlab_would_cut_or_refuse_stay_apart_and_land(
    swanlab_config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # SwanLab cuts a key to 512 characters (two long keys with one start became one series,
    # the second's value dropped as a repeated step) and refuses one with a control character
    # (an ERROR line of its own on every row).
    long_a, long_b = "k" * 600 + "A", "k" * 600 + "B"
    backend = SwanLabBackend(**swanlab_config)
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        backend.log_metrics({long_a: 1.0, long_b: 2.0, "a\nb": 3.0}, 1, "")
        backend.log_metrics({long_a: 4.0, long_b: 5.0, "a\nb": 6.0}, 2, "")
    backend.finish()
    series = {r["scalar"]["key"]: [] for r in records(backend.run_dir) if "scalar" in r}
    for r in records(backend.run_dir):
        if "scalar" in r:
            series[r["scalar"]["key"]].append(r["scalar"]["value"]["number"])
    assert sorted(series.values()) == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
    assert all(len(key) <= 512 for key in series)
    assert "a\\nb" in series
    assert _said(caplog, "rlmetrics-swanlab")


def test_every_live_trajectory_of_a_step_reaches_swanlab(
    swanlab_config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Before: each live trajectory (``rlmetrics.trajectory``) was a table of its own, and
    SwanLab keeps one table of a key at a step: of a step's four rollouts it kept the first
    to finish (the other three dropped, said once). A step's live rows are now one table."""
    logger = rlmetrics.Logger(backends={"swanlab": swanlab_config})
    backend = logger.backends["swanlab"]
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        for step in (1, 2):
            with rlmetrics.step(step, logger=logger):
                for index in range(4):
                    with rlmetrics.trajectory(f"{step}-{index}", logger=logger) as t:
                        t.reward(float(index))
        logger.finish()
    kept = [(step, text.split("\n")[0]) for step, text, _ in texts(backend.run_dir, "trajectories")]
    assert kept == [(step, f"sample_id: {step}-{i}") for step in (1, 2) for i in range(4)]
    assert _said(caplog, "rlmetrics-swanlab") == []
