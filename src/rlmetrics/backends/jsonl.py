"""The JSONL backend: the embedded default, one JSON object per logged dict.

Append-only and flushed per call, so a crash loses at most the line being written, and a
reader skips that torn last line with a warning. Rows are schema-free: a new key costs
nothing (a CSV logger rewrites the whole file when a column appears).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from .. import hookimpl
from .._warn import logger
from ..values import as_plain

__all__ = ["JsonlBackend", "read_jsonl", "register_backends", "to_json_value"]

DEFAULT_PATH = "rlmetrics.jsonl"


def to_json_value(value: Any, _depth: int = 0) -> Any:
    """A JSON-safe stand-in for ``value``: numbers, bools and strings as they are (NumPy and
    torch ones as their plain Python form), lists element by element, and NaN, infinities and
    anything else JSON cannot hold as their ``repr``."""
    value = as_plain(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple)) and _depth < 8:
        return [to_json_value(v, _depth + 1) for v in value]
    try:
        return repr(value)
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"


class JsonlBackend:
    """Appends ``{"time", "step", "prefix", "metrics"}`` per call to ``path``."""

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_PATH) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO | None = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        row = {
            "time": time.time(),
            "step": to_json_value(step),
            "prefix": prefix,
            "metrics": {str(k): to_json_value(v) for k, v in metrics.items()},
        }
        line = json.dumps(row, allow_nan=False) + "\n"
        with self._lock:
            if self._file is None:
                raise ValueError(f"JSONL backend {self.path} is finished")
            self._file.write(line)
            self._file.flush()

    def finish(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield the rows of a JSONL metrics file, skipping (with a warning) a torn line."""
    with Path(path).open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                where = "torn last line" if not line.endswith("\n") else "malformed line"
                logger.warning("rlmetrics: %s %d of %s skipped", where, number, path)
                continue
            if isinstance(row, dict):
                yield row


@hookimpl
def register_backends(register: Any) -> None:
    register("jsonl", JsonlBackend)
