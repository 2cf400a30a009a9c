"""Reading a run's event files back with TensorBoard's own reader (``EventAccumulator``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

__all__ = ["hparams", "read", "scalars", "texts"]


def read(log_dir: Path) -> EventAccumulator:
    """Every event of ``log_dir`` (no sampling), as TensorBoard loads it."""
    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def scalars(log_dir: Path, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in read(log_dir).Scalars(tag)]


def texts(log_dir: Path, tag: str) -> list[tuple[int, str]]:
    events = read(log_dir).Tensors(f"{tag}/text_summary")
    return [(e.step, e.tensor_proto.string_val[0].decode()) for e in events]


def hparams(log_dir: Path) -> dict[str, Any]:
    """The hparams session TensorBoard's HParams dashboard shows for ``log_dir/hparams``."""
    content = read(log_dir / "hparams").PluginTagToContent("hparams")
    data = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    out: dict[str, Any] = {}
    for key, value in data.session_start_info.hparams.items():
        kind = value.WhichOneof("kind")
        out[key] = getattr(value, kind)
    return out
