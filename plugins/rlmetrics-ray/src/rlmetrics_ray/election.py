"""HostElection: one process per host and run reports the host's series.

Every process of a run that starts telemetry with this plugin builds a monitor; only the one
elected on its host cycles it, so the host's memory and GPU series are exported once, never
once per rank. The election is an exclusive ``fcntl.flock`` on a lock file named by the host
and the run, in a directory on the host (the system's temporary directory by default):

- the kernel gives the lock to one process, and takes it back when that process dies,
  however it dies (SIGKILL included): no lease to renew, no engine to ask;
- the holder removes the file when it gives the host up (a killed one leaves it for the
  next process of the run to lock), and a process keeps a lock only while the path names the
  file it locked: a file removed under it (a releasing holder, a cleaner of ``/tmp``) is
  competed for anew;
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
#: Files a try locks that were removed before it locked them, before it gives up for a cycle.
_TRIES = 3


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
            fd = self._fd
            if fd is not None:
                if self._names(fd):
                    return True
                # Its file was removed (a cleaner of the temporary directory): a lock on it
                # no longer keeps another process out, so compete again for the file there.
                self._fd = None
                with contextlib.suppress(OSError):
                    os.close(fd)
            for _ in range(_TRIES):
                try:
                    fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                except OSError:
                    return False
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:  # another process holds it
                    os.close(fd)
                    return False
                if self._names(fd):
                    break
                # The holder released (removed the file) between our open and our lock:
                # the lock is on a file no one else will open. Try the path's new one.
                os.close(fd)
            else:
                return False
            with contextlib.suppress(OSError):  # who holds it, for a person reading the file
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
            self._fd = fd
            return True

    def _names(self, fd: int) -> bool:
        """Whether the election's path still names the file ``fd`` has open."""
        try:
            held, named = os.fstat(fd), os.stat(self.path)
        except OSError:
            return False
        return (held.st_dev, held.st_ino) == (named.st_dev, named.st_ino)

    def release(self) -> None:
        """Give the host up (the monitor stopped): another process takes it at its next try.
        The file goes with it, removed while still locked, so none is left behind per run;
        a process that opened it just before checks, after its lock, that the path still
        names what it locked."""
        with self._lock:
            fd, self._fd = self._fd, None
            if fd is None:
                return
            if self._names(fd):
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
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
