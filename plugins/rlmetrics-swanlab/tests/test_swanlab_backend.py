"""SwanLabBackend against a real offline SwanLab run, read back from its folder."""

from __future__ import annotations

import logging
import math
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from rlmetrics_swanlab import SwanLabBackend
from swanlab_helpers import config, records, scalars, texts

import rlmetrics
from rlmetrics.backends import available_backends
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.identity import RunIdentity
from rlmetrics.plugins import get_plugins


def test_the_entry_point_offers_the_swanlab_backend() -> None:
    owner, _factory = available_backends()["swanlab"]
    assert owner == "swanlab"
    info = get_plugins().info("swanlab")
    assert info is not None and info.distribution == "rlmetrics-swanlab"


def test_scalars_config_and_samples_through_the_logger(
    tmp_path: Path, swanlab_config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    sigint = signal.getsignal(signal.SIGINT)
    logger = rlmetrics.Logger(
        backends={"jsonl": {"path": tmp_path / "m.jsonl"}, "swanlab": swanlab_config},
        run_id="run:7",
    )
    backend = logger.backends["swanlab"]
    assert signal.getsignal(signal.SIGINT) is sigint  # SwanLab left Ctrl-C to the loop
    logger.log_hyperparams({"lr": 1e-6, "model": {"name": "qwen", "layers": [28]}})
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        for step, loss in [(1, 0.5), (3, 0.25), (2, 0.75)]:
            logger.log_metrics(
                {"loss": loss, "ok": True, "note": "hi", "rewards": [1, 0], "none": None},
                step=step,
                prefix="train",
            )
    logger.log_samples(
        [{"prompt": "2+2?", "completion": "4", "reward": 1.0, "judge": "ok"}], step=3
    )
    logger.finish()

    run_dir = backend.run_dir
    assert run_dir.parent == tmp_path / "swanlog"
    (start,) = [r["start"] for r in records(run_dir) if "start" in r]
    assert start["id"] == RunIdentity("run:7").tracker_id(':"/\\|?*#%<>')
    assert scalars(run_dir, "train/loss") == [(1, 0.5), (3, 0.25), (2, 0.75)]
    assert scalars(run_dir, "train/ok") == [(1, 1.0), (3, 1.0), (2, 1.0)]
    assert [(s, t) for s, t, _ in texts(run_dir, "train/note")] == [(1, "hi"), (3, "hi"), (2, "hi")]
    assert texts(run_dir, "samples") == [
        (3, "prompt: 2+2?\n\ncompletion: 4\n\njudge: ok", "reward 1.0")
    ]
    assert config(run_dir) == {"lr": 1e-6, "model": {"name": "qwen", "layers": [28]}}
    assert "'train/rewards' is a list value" in caplog.text
    assert [r["step"] for r in read_jsonl(tmp_path / "m.jsonl") if "metrics" in r] == [1, 3, 2]
    assert not [t for t in threading.enumerate() if t.name.startswith("SwanLab")]


def test_a_repeated_step_is_said_once(
    swanlab_config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    backend = SwanLabBackend(**swanlab_config)
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        for value in (1.0, 2.0, 3.0):
            backend.log_metrics({"loss": value}, 4, "train")
    backend.finish()
    # SwanLab itself keeps the first value of a key at a step.
    assert scalars(backend.run_dir, "train/loss") == [(4, 1.0)]
    assert caplog.text.count("logged again at step 4") == 1


def test_a_negative_infinity_in_the_configuration_keeps_its_sign(
    swanlab_config: dict[str, Any],
) -> None:
    # SwanLab writes every infinite float as "Inf": -inf read back as +Inf (CI's otel144
    # property run found it, nested two levels down).
    backend = SwanLabBackend(**swanlab_config)
    backend.log_hyperparams(
        {"floor": -math.inf, "ceiling": math.inf, "m": {"w": [-math.inf, 1.0], "n": math.nan}}
    )
    backend.finish()
    assert config(backend.run_dir) == {
        "floor": "-Inf",
        "ceiling": "Inf",
        "m": {"w": ["-Inf", 1.0], "n": "NaN"},
    }


def test_an_int_past_floats_range_is_skipped_and_the_rest_lands(
    swanlab_config: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # float() of it raised OverflowError, which lost the whole row.
    backend = SwanLabBackend(**swanlab_config)
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        backend.log_metrics({"huge": 10**400, "loss": 0.5}, 1, "train")
    backend.finish()
    assert scalars(backend.run_dir, "train/loss") == [(1, 0.5)]
    assert "'train/huge' is an int past float's range" in caplog.text


def test_a_run_the_script_started_is_logged_into_and_left_open(
    swanlab_config: dict[str, Any],
) -> None:
    import swanlab

    options = {k: v for k, v in swanlab_config.items() if k != "init_kwargs"}
    run = swanlab.init(**options, **swanlab_config["init_kwargs"])
    try:
        backend = SwanLabBackend(**swanlab_config)
        assert backend.run is run
        backend.log_metrics({"loss": 1.0}, 1, "train")
        backend.finish()
        assert swanlab.has_run()
    finally:
        run.finish()
    assert scalars(Path(run.dir), "train/loss") == [(1, 1.0)]


def test_a_run_that_cannot_start_is_a_clear_error(swanlab_config: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError, match=r"swanlab.init\(.*\) failed"):
        SwanLabBackend(**{**swanlab_config, "mode": "no-such-mode"})


def test_a_top_level_none_in_the_configuration_is_null(swanlab_config: dict[str, Any]) -> None:
    # SwanLab parses each top-level value as a configuration of its own and stored None as {}
    # (transformers' TrainingArguments has many: resume_from_checkpoint, hub_model_id...).
    backend = SwanLabBackend(**swanlab_config)
    backend.log_hyperparams({"resume_from_checkpoint": None, "lr": 1e-6, "m": {"n": None}})
    backend.log_hyperparams({"hub_model_id": None})
    backend.finish()
    assert config(backend.run_dir) == {
        "resume_from_checkpoint": None,
        "lr": 1e-6,
        "m": {"n": None},
        "hub_model_id": None,
    }
