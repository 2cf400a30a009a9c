"""rlmetrics.Logger as a drop-in for NeMo-RL's Logger: the calls NeMo-RL's GRPO makes, in its
order, with its keys and arguments, read back from the JSONL file and the in-memory reader."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import rlmetrics
from rlmetrics.backends.jsonl import read_jsonl
from rlmetrics.testing import in_memory_telemetry, points, single

#: NeMo-RL's LoggerInterface calls an algorithm makes, as it makes them.
NEMO_CALLS = {
    "log_metrics": {
        "args": ({"reward": 1.0}, 3),
        "kwargs": {"prefix": "train", "step_metric": None, "step_finished": False},
    },
    "log_hyperparams": {"args": ({"grpo": {"num_steps": 2}},), "kwargs": {}},
    "finish": {"args": (), "kwargs": {}},
}


def test_the_logger_takes_every_argument_nemo_rl_passes() -> None:
    for name, call in NEMO_CALLS.items():
        method = getattr(rlmetrics.Logger, name)
        inspect.signature(method).bind(None, *call["args"], **call["kwargs"])


def test_a_nemo_rl_grpo_run_logs_through_the_logger_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    config = {"grpo": {"num_prompts_per_step": 4, "max_num_steps": 2}, "policy": {"lr": 1e-6}}
    with in_memory_telemetry() as (_handle, reader):
        logger: Any = rlmetrics.Logger(backends={"jsonl": {"path": path}})
        logger.log_hyperparams(config)
        logger.log_metrics(
            {"policy_init_time_s": 12.5, "total_setup_time_s": 44.0}, step=0, prefix="timing/setup"
        )
        for step in (1, 2):
            logger.log_metrics(
                {
                    "reward": 0.5 * step,
                    "kl_penalty": 0.01 * step,
                    "loss": 1.0 / step,
                    "mean_gen_tokens_per_sample": 100.0 + step,
                },
                step,
                prefix="train",
            )
            logger.log_metrics(
                {"efficiency/idle/refit_bubble_s": 1.0, "efficiency/step_wall_time_s": 10.0},
                step,
                prefix="",
                step_finished=False,
            )
            logger.log_metrics(
                {"total_step_time": 10.0, "generation": 6.0}, step, prefix="timing/train"
            )
            # The GPU monitor: its own axis, named by step_metric.
            logger.log_metrics(
                {"ray/ray_step": 30 * step, "node.0.gpu.0.util": 0.5},
                step,
                prefix="ray",
                step_metric="ray/ray_step",
                step_finished=True,
            )
        found = points(reader)
        logger.finish()
    values = {p.name: p.value for p in found if not p.attributes}
    assert values["rl.reward.mean"] == 1.0 and values["rl.kl.divergence"] == 0.02
    assert values["rl.policy.loss"] == 0.5 and values["rl.response.length.mean"] == 102.0
    assert single(found, "rl.setup.duration", **{"rl.setup.phase": "policy_init"}).value == 12.5
    refit = {"rl.efficiency.category": "idle/refit_bubble"}
    assert single(found, "rl.efficiency.seconds", **refit).value == 1.0
    assert single(found, "rl.efficiency.pct", **{"rl.efficiency.window": "step"}).value == 90.0
    rows = list(read_jsonl(path))
    assert [(r["prefix"], r["step"]) for r in rows] == [
        ("timing/setup", 0),
        *[(p, s) for s in (1, 2) for p in ("train", "", "timing/train", "ray")],
    ]
    assert rows[-1]["metrics"] == {"ray/ray_step": 60, "node.0.gpu.0.util": 0.5}
    (header,) = [row for row in read_jsonl(path, every_row=True) if "hyperparams" in row]
    assert header["hyperparams"]["grpo"]["max_num_steps"] == 2
