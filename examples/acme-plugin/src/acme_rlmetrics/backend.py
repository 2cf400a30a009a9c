"""The ``acme_tsv`` backend: one tab-separated line per logged value."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import rlmetrics
from rlmetrics.backends import full_key

__all__ = ["TsvBackend"]


class TsvBackend:
    """Appends ``step<TAB>key<TAB>value`` lines to ``path``."""

    def __init__(self, path: str | os.PathLike[str] = "acme.tsv") -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by finish()
        self._lock = threading.Lock()

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        lines = "".join(f"{step}\t{full_key(prefix, k)}\t{v}\n" for k, v in metrics.items())
        with self._lock:
            self._file.write(lines)
            self._file.flush()

    def finish(self) -> None:
        with self._lock:
            self._file.close()


@rlmetrics.hookimpl
def register_backends(register: Callable[[str, Any], None]) -> None:
    register("acme_tsv", TsvBackend)
