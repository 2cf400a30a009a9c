"""Process-pool workers for the resources tests, in a module that imports nothing heavy, so a
spawned worker process starts quickly."""

from __future__ import annotations

import os

__all__ = ["crash_worker", "square_worker"]


def square_worker(value: int) -> int:
    return value * value


def crash_worker(_value: int) -> int:
    """Kill the worker process outright, as an OOM kill or a segfault would."""
    os._exit(1)
