"""A full disk, made real for the fault-injection tests: a small tmpfs mounted for the test
(root only; CI runs as root) that a backend fills, and ``/dev/full``, which refuses every write
with ``ENOSPC``."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DEV_FULL", "MountRefused", "small_tmpfs"]

#: A device every write to fails with ``ENOSPC`` ("No space left on device").
DEV_FULL = Path("/dev/full")


class MountRefused(Exception):
    """This process may not mount a tmpfs (not root, or in a container without the right)."""


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str = "64k") -> Iterator[Path]:
    """Mount a tmpfs of ``size`` on ``folder`` (created) for the block; unmounted after it
    (lazily, so a file a backend still holds open never keeps it mounted). Raises
    :class:`MountRefused` when mounting is not permitted: the caller skips with that reason."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", os.fspath(folder)],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    if mounted.returncode != 0:
        raise MountRefused(f"cannot mount a tmpfs: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(
            ["umount", "-l", os.fspath(folder)], capture_output=True, check=False, timeout=30
        )
