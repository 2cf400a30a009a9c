"""A full disk, made real for the fault-injection tests: a small tmpfs mounted for the test
(root only; CI runs as root) that a backend fills, and ``/dev/full``, which refuses every write
with ``ENOSPC``."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

__all__ = ["DEV_FULL", "MountRefused", "fill", "run_folder_fault", "small_tmpfs"]

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


@contextlib.contextmanager
def run_folder_fault(tmp_path: Path, how: str, size: str = "16m") -> Iterator[Path]:
    """Where a tracker's run folder goes for a fault test: ``tmp_path`` itself for ``how ==
    "deleted"`` (the test deletes the folder), else a tmpfs of ``size`` the test fills
    (:func:`fill`); skips the test where mounting is not permitted."""
    import pytest  # (only tests use this)

    if how == "deleted":
        yield tmp_path
        return
    try:
        with small_tmpfs(tmp_path / "disk", size=size) as disk:
            yield disk
    except MountRefused as refused:
        pytest.skip(str(refused))


def fill(disk: Path, leave: int) -> None:
    """Fill ``disk`` until about ``leave`` bytes are free."""
    stats = os.statvfs(disk)
    free = stats.f_bavail * stats.f_frsize
    with (disk / "filler").open("wb") as handle:
        handle.write(b"x" * max(0, free - leave))
