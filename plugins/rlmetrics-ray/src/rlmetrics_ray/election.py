"""HostElection: one process per host and run reports the host's series.

Every process of a run that starts telemetry with this plugin builds a monitor; only the one
elected on its host cycles it, so the host's memory and GPU series are exported once, never
once per rank. The election is an exclusive ``fcntl.flock`` on a lock file named by the host
and the run, in a directory on the host (the system's temporary directory by default):

- the kernel gives the lock to one process, and takes it back when that process dies,
  however it dies (SIGKILL included): no lease to renew, no engine to ask, nothing to clean;
- the others try again, without blocking, at the start of each of their monitor's cycles,
  so one of them takes over within one interval of the holder's death.

The lock belongs to the open file, which a forked child shares: a child forgets its
parent's lock (closes its copy) so the parent's death still frees it. Only processes of one
run (one ``rlmetrics.run.id``) on one host compete; a directory on a network file system
whose ``flock`` is not shared across hosts is still per host, since the host's name is in
the file's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import socket
import tempfile
import threading
import weakref
from pathlib import Path

__all__ = ["HostElection", "lock_path"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_elections: weakref.WeakSet[HostElection] = weakref.WeakSet()


def lock_path(run_id: str, directory: str | os.PathLike[str] | None = None) -> Path:
    """The lock file of ``run_id`` on this host, in ``directory`` (default: the system's
    temporary directory)."""
    folder = Path(directory) if directory is not None else Path(tempfile.gettempdir())
    host = _UNSAFE.sub("_", socket.gethostname())[:64]
    run = _UNSAFE.sub("_", run_id)[:64]
    return folder / f"rlmetrics-ray-monitor.{host}.{run}.lock"


class HostElection:
    """Whether this process is the one that reports this host for ``run_id``: call it (a
    non-blocking try, then True for as long as it holds the lock)."""

    def __init__(self, run_id: str, directory: str | os.PathLike[str] | None = None) -> None:
        self.path = lock_path(run_id, directory)
        self._fd: int | None = None
        self._lock = threading.Lock()
        _elections.add(self)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __call__(self) -> bool:
        with self._lock:
            if self._fd is not None:
                return True
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # another process holds it
                os.close(fd)
                return False
            with contextlib.suppress(OSError):  # who holds it, for a person reading the file
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            self._fd = fd
            return True

    def release(self) -> None:
        """Give the host up (the monitor stopped): another process takes it at its next try."""
        with self._lock:
            fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # closing the last descriptor of the file releases the lock

    def _forget_in_child(self) -> None:
        self._lock = threading.Lock()
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _forget_in_child() -> None:
    for election in list(_elections):
        election._forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
