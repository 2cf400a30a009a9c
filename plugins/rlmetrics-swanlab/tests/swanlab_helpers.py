"""Reading an offline SwanLab run folder back.

The plain files (``files/config.yaml``, ``media/text/*.txt``) are read as files; the record
log (``run-<id>.swanlab``, protobuf records in LevelDB log framing) only through SwanLab's own
reader, an internal module of SwanLab 0.10 (the version the plugin pins).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from google.protobuf.json_format import MessageToDict
from swanlab.proto.swanlab.record.v1.record_pb2 import Record
from swanlab.sdk.internal.core_python.store import DataStoreReader

__all__ = ["config", "records", "scalars", "texts"]


def records(run_dir: Path) -> list[dict[str, Any]]:
    (log,) = run_dir.glob("run-*.swanlab")
    reader = DataStoreReader()
    reader.open(log)
    try:
        out = []
        for data in reader:
            record = Record()
            record.ParseFromString(data)
            out.append(MessageToDict(record))
        return out
    finally:
        reader.close()


def scalars(run_dir: Path, key: str) -> list[tuple[int, float]]:
    # MessageToDict leaves out a field at its default: step 0, the number 0.0.
    return [
        (int(r["scalar"].get("step", 0)), r["scalar"]["value"].get("number", 0.0))
        for r in records(run_dir)
        if "scalar" in r and r["scalar"]["key"] == key
    ]


def texts(run_dir: Path, key: str) -> list[tuple[int, str, str | None]]:
    """``(step, text, caption)`` of each text item logged under ``key``, the text read from its
    media file."""
    out = []
    for r in records(run_dir):
        media = r.get("media")
        if media and media["key"] == key:
            for item in media["value"]["items"]:
                # As written: read_text() would turn a "\r" of the text into "\n".
                text = (run_dir / "media" / "text" / item["filename"]).read_bytes().decode()
                out.append((int(media["step"]), text, item.get("caption")))
    return out


def config(run_dir: Path) -> dict[str, Any]:
    """``files/config.yaml`` as ``{key: value}`` (SwanLab stores each with a desc and sort)."""
    loaded = yaml.safe_load((run_dir / "files" / "config.yaml").read_text())
    return {key: entry["value"] for key, entry in loaded.items()}
