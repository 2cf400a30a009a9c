"""TensorBoardBackend against real event files, read back with TensorBoard's EventAccumulator."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
from rlmetrics_tensorboard import TensorBoardBackend
from tensorboard_helpers import hparams, read, scalars, texts

import rlmetrics
from rlmetrics.backends import available_backends
from rlmetrics.events import CheckpointSave
from rlmetrics.identity import RunIdentity
from rlmetrics.plugins import get_plugins
from rlmetrics.testing import own_records


def test_the_entry_point_offers_the_tensorboard_backend() -> None:
    owner, _factory = available_backends()["tensorboard"]
    assert owner == "tensorboard"
    info = get_plugins().info("tensorboard")
    assert info is not None and info.distribution == "rlmetrics-tensorboard"


def test_scalars_land_at_their_steps_and_a_stream_at_its_own_wall_time(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    logger = rlmetrics.Logger(
        backends={"tensorboard": {"root_dir": tmp_path}}, run_id="run-1", queue_size=100
    )
    with caplog.at_level(logging.WARNING):
        for step, loss in [(1, 0.5), (3, 0.25), (2, 0.75)]:
            logger.log_metrics(
                {"loss": loss, "ok": True, "nan": math.nan}, step=step, prefix="train"
            )
        logger.log_rollout_checkpoint(
            CheckpointSave(values={"total_save_seconds": 3.0}, wall_time_s=1_700_000_000.0)
        )
        logger.finish()
    # A NaN every step is kept, and not a warning every step.
    assert not own_records(caplog.records)

    log_dir = tmp_path / "run-1"
    assert scalars(log_dir, "train/loss") == [(1, 0.5), (3, 0.25), (2, 0.75)]
    assert [v for _, v in scalars(log_dir, "train/ok")] == [1.0, 1.0, 1.0]
    assert all(math.isnan(v) for _, v in scalars(log_dir, "train/nan"))
    (save,) = read(log_dir).Scalars("timing/rollout_checkpoint/total_save_seconds")
    assert (save.step, save.value, save.wall_time) == (0, 3.0, 1_700_000_000.0)
    assert "telemetry/wall_time_seconds" not in read(log_dir).Tags()["scalars"]


def test_text_histograms_and_values_tensorboard_cannot_show(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = TensorBoardBackend(log_dir=tmp_path / "tb")
    with caplog.at_level(logging.WARNING, logger="rlmetrics"):
        backend.log_metrics(
            {"note": "warmup", "rewards": [0.0, 1.0, 1.0], "none": None, "obj": object()}, 5, "x"
        )
    backend.finish()

    assert texts(tmp_path / "tb", "x/note") == [(5, "warmup")]
    (histogram,) = read(tmp_path / "tb").Histograms("x/rewards")
    assert (histogram.step, histogram.histogram_value.num) == (5, 3)
    assert "'x/obj' is a object value" in caplog.text and "none" not in caplog.text


def test_hyperparams_reach_the_hparams_dashboard(tmp_path: Path) -> None:
    logger = rlmetrics.Logger(backends={"tensorboard": {"log_dir": tmp_path / "tb"}})
    logger.log_hyperparams(
        {"lr": 1e-6, "model": {"name": "qwen", "layers": [28, 28]}, "seed": None, "bf16": True}
    )
    logger.finish()

    assert hparams(tmp_path / "tb") == {
        "lr": 1e-6,
        "model/name": "qwen",
        "model/layers": "[28, 28]",
        "seed": "None",
        "bf16": True,
    }


def test_a_list_of_dicts_is_one_text_whatever_order_its_dicts_were_built_in(
    tmp_path: Path,
) -> None:
    # It was the list's str(): two runs of one configuration, its stage dicts built in
    # another order, showed two values in the HParams table.
    shown = []
    for stages in ([{"steps": 100, "lr": 1e-6}], [{"lr": 1e-6, "steps": 100}]):
        folder = tmp_path / f"tb{len(shown)}"
        logger = rlmetrics.Logger(backends={"tensorboard": {"log_dir": folder}})
        logger.log_hyperparams({"stages": stages})
        logger.finish()
        shown.append(hparams(folder)["stages"])
    assert shown == ["[{'lr': 1e-06, 'steps': 100}]"] * 2


def test_a_second_call_adds_its_keys_to_the_one_session_the_dashboard_shows(
    tmp_path: Path,
) -> None:
    # TensorBoard's reader keeps the first session it meets in a folder, so a second session
    # written beside the first was never shown: the folder holds one session, the merged one.
    logger = rlmetrics.Logger(backends={"tensorboard": {"log_dir": tmp_path / "tb"}})
    logger.log_hyperparams({"lr": 1e-6, "seed": 1})
    logger.log_hyperparams({"seed": 2, "model": {"name": "qwen"}})
    logger.finish()

    assert hparams(tmp_path / "tb") == {"lr": 1e-6, "seed": 2, "model/name": "qwen"}
    assert len(list((tmp_path / "tb" / "hparams").iterdir())) == 1


def test_samples_are_a_markdown_table_in_the_text_dashboard(tmp_path: Path) -> None:
    logger = rlmetrics.Logger(backends={"tensorboard": {"log_dir": tmp_path / "tb"}})
    logger.log_samples(
        [
            {"reward": 1.0, "prompt": "2+2?", "completion": "4\nbecause | sums"},
            {"prompt": "1+1?", "completion": "3", "reward": 0.0, "judge": "wrong"},
        ],
        step=7,
        name="eval/samples",
    )
    logger.finish()

    assert texts(tmp_path / "tb", "eval/samples") == [
        (
            7,
            "| prompt | completion | reward | judge |\n|---|---|---|---|\n"
            "| 2+2? | 4<br>because \\| sums | 1.0 |  |\n| 1+1? | 3 | 0.0 | wrong |",
        )
    ]


def test_a_resumed_run_continues_its_folder_without_repeating_steps(tmp_path: Path) -> None:
    # The first process logs steps 1-12 and dies; its last checkpoint was step 10.
    first = TensorBoardBackend(root_dir=tmp_path, identity=RunIdentity("r"))
    for step in range(1, 13):
        first.log_metrics({"loss": float(step)}, step, "train")
    first.finish()
    resumed = TensorBoardBackend(root_dir=tmp_path, identity=RunIdentity("r", resume=True))
    for step in range(11, 21):
        resumed.log_metrics({"loss": step + 0.5}, step, "train")
    resumed.finish()

    assert scalars(tmp_path / "r", "train/loss") == [
        *((s, float(s)) for s in range(1, 11)),
        *((s, s + 0.5) for s in range(11, 21)),
    ]


def test_after_finish_nothing_is_written_and_finish_is_idempotent(tmp_path: Path) -> None:
    backend = TensorBoardBackend(log_dir=tmp_path / "tb")
    backend.log_metrics({"loss": 1.0}, 1, "train")
    backend.finish()
    backend.finish()
    with pytest.raises(ValueError, match="finished"):
        backend.log_metrics({"loss": 2.0}, 2, "train")
    assert scalars(tmp_path / "tb", "train/loss") == [(1, 1.0)]
