"""One TensorBoard event file, written synchronously on the backend's own thread.

tensorboardX's ``SummaryWriter`` hands each event to a writer thread of its own through a queue
of ten: when that thread dies on a write error (a full disk) the queue fills and every later
event blocks its caller for good, and a log folder deleted under it goes on being written into
a file no longer on disk. Neither is ever reported. The backend already writes on a thread of
its own (:mod:`rlmetrics.backends.worker`), so this file writes each logged dict's events there,
in one ``write`` call, and checks that they reached the file:

* a write the disk refuses (``ENOSPC``, ``EIO``…) raises, naming the file and the error, and
  what part of it reached the file is cut off again (a row is there whole or not at all);
* a file whose folder was deleted (no link left on disk) raises too, after the write;
* after either, the file is broken: every later write raises at once, without trying again, so
  the worker counts each row as failed and ``finish()`` has nothing to wait for.

Events go to the file as tensorboardX and TensorBoard frame them (TFRecord: length, masked
CRC-32C of the length, data, masked CRC-32C of the data). The file is fsynced every
``flush_secs`` and when closed.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from tensorboardX.proto.event_pb2 import Event
from tensorboardX.record_writer import masked_crc32c

from rlmetrics.backends import BackendUnavailable

__all__ = ["EventFile", "events", "record"]


def record(event: Event) -> bytes:
    """``event`` framed as one TFRecord."""
    data: bytes = event.SerializeToString()
    header = struct.pack("Q", len(data))
    return (
        header
        + struct.pack("I", masked_crc32c(header))
        + data
        + struct.pack("I", masked_crc32c(data))
    )


def events(path: Path) -> Iterator[Event]:
    """The events of the file at ``path``, in order, up to a record that is torn (a process
    killed mid-write) or does not parse; none for a file that cannot be read."""
    try:
        data = path.read_bytes()
    except OSError:
        return
    at = 0
    while at + 12 <= len(data):
        (length,) = struct.unpack_from("Q", data, at)
        start = at + 12
        if start + length + 4 > len(data):
            return
        event = Event()
        try:
            event.ParseFromString(data[start : start + length])
        except Exception:  # protobuf's DecodeError: not an event we wrote
            return
        yield event
        at = start + length + 4


class EventFile:
    """An event file in ``folder`` (created), named as tensorboardX names one plus ``suffix``.

    :param flush_secs: how often the file is fsynced (each write reaches the OS at once).
    """

    def __init__(self, folder: Path, suffix: str, flush_secs: float) -> None:
        self._broken: str | None = None
        self._flush_secs = flush_secs
        self._synced = time.monotonic()
        now = time.time()
        name = f"events.out.tfevents.{int(now)}.{socket.gethostname()}{suffix}"
        self.path = folder / name
        try:
            folder.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            self._size = os.fstat(self._fd).st_size
        except OSError as exc:
            raise BackendUnavailable(f"cannot write TensorBoard events to {folder}: {exc}") from exc
        self.write([Event(wall_time=now, file_version="brain.Event:2")])

    def write(self, events: Iterable[Event]) -> None:
        """Append ``events`` in one write; raises :class:`BackendUnavailable` if they did not
        reach the file, or the file broke earlier."""
        if self._broken is not None:
            raise BackendUnavailable(self._broken)
        if self._fd is None:
            raise ValueError(f"event file {self.path} is closed")
        data = b"".join(record(event) for event in events)
        fd = self._fd
        start = self._size
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            self._size += written
            if os.fstat(fd).st_nlink == 0:
                raise FileNotFoundError(f"{self.path} was deleted (its log folder removed?)")
            if time.monotonic() - self._synced >= self._flush_secs:
                os.fsync(fd)
                self._synced = time.monotonic()
        except OSError as exc:
            # What part of the events reached the file is cut off again: a row is in the
            # file whole or counted as failed, and a reader never meets a torn record.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            self._broken = (
                f"TensorBoard event file {self.path} cannot be written ({exc.strerror or exc}); "
                "this backend writes nothing more in this run (the other backends go on)"
            )
            raise BackendUnavailable(self._broken) from exc

    def close(self) -> None:
        """fsync and close, once; a broken file is closed without a word (its failure was
        said and counted when it broke)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self._broken is None:
                os.fsync(fd)
        finally:
            os.close(fd)
