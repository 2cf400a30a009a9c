"""The JSONL backend: the embedded default, one JSON object per logged dict.

Append-only and flushed per call, so a row is in the file when ``log_metrics`` returns and a
crash loses at most the line being written; a writer that reopens a file ending in such a
torn line starts on a new line, and a reader skips the torn one with a warning. Rows are
schema-free: a new key costs nothing (a CSV logger rewrites the whole file when a column
appears). It writes on the caller's thread — that is what makes a returned row durable — so
it is the one backend that is not queued (see :mod:`rlmetrics.backends.worker`).

Every row carries the run id (``run_id``, the OTel resource's ``rlmetrics.run.id``), so one
file may hold several runs and a reader tells them apart. Besides the metric rows
(``{"time", "run_id", "step", "prefix", "metrics"}``), a row with a ``kind`` is a record about
the run: ``{"kind": "hyperparams", "hyperparams": {...}}`` from ``Logger.log_hyperparams``, and
``{"kind": "resume"}`` where a resumed run (``RunIdentity.resume``) continues the file, and
``{"kind": "rerun"}`` where a run started again under an id the file already holds, without
resume, begins a new attempt of it (a reader shows the last attempt: :func:`starts_over`), and
``{"kind": "end", "status": "finished" | "failed"}`` where the Logger finished it (a run
killed before has none: a reader tells a finished run from a silent one by it). Sample
rows from ``Logger.log_samples`` go to a file beside it, ``<stem>.samples.jsonl`` (one line per
sample: ``{"time", "run_id", "step", "name", "sample"}``), so the metrics file stays small; that
file is written on a thread of its own (:class:`_SamplesFile`), the one write this backend does
not make on the caller's thread.

Values JSON cannot hold faithfully are written as strings: NaN and infinities as ``"nan"``,
``"inf"``, ``"-inf"``; an int with more digits than Python's JSON reader accepts (4300) as
``"<int of N digits>"``; any other object as its ``repr``. A ``Decimal`` or a ``Fraction`` is
the float it stands for.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
import numbers
import os
import stat
import sys
import threading
import time
from collections.abc import Iterator, Mapping, MutableSequence, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

from .. import hookimpl
from .._fork import forget_in_child
from .._process_state import resets_process_state
from .._warn import logger
from ..configuration import FILE_PATH, declare_options
from ..flatten import key_text
from ..identity import RunIdentity, new_run_id
from ..storable import decimal_digits
from ..values import as_plain, as_real
from . import BackendUnavailable
from .worker import BackendWorker

__all__ = [
    "JsonlBackend",
    "SkippedLines",
    "metrics_line",
    "named_lines",
    "open_regular",
    "read_jsonl",
    "register_backends",
    "samples_path",
    "starts_over",
    "to_json_value",
]

DEFAULT_PATH = "rlmetrics.jsonl"
#: Sample tables the samples file's thread may fall behind by (then tables are dropped and
#: counted), and how long ``finish()`` waits for it to write them.
SAMPLES_QUEUE_SIZE = 256
SAMPLES_FINISH_S = 30.0
#: The ``kind`` of a row that is not a metrics row.
HYPERPARAMS_KIND = "hyperparams"
RESUME_KIND = "resume"
RERUN_KIND = "rerun"
END_KIND = "end"

#: ``(file, run id)`` of every JSONL backend this process started (a forked child's
#: included): a second Logger of the same run and file, in the same process, is no new
#: attempt of it.
_started: set[tuple[Path, str]] = set()


@resets_process_state
def _forget_started() -> None:
    _started.clear()


def starts_over(row: Mapping[str, Any]) -> bool:
    """Whether ``row`` begins a new attempt of its run: a script started again under the run's
    id without ``resume=True`` (a rerun after a fix, a requeued job that does not resume).
    What the run logged before it is an earlier attempt's, which a reader leaves out, as the
    trackers do (see docs/trackers.md, "Run identity and resume")."""
    return row.get("kind") == RERUN_KIND


def samples_path(path: str | os.PathLike[str]) -> Path:
    """Where the samples of the metrics file ``path`` go: ``m.jsonl`` → ``m.samples.jsonl``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.samples{path.suffix or '.jsonl'}")


def _line(row: Mapping[str, Any]) -> str:
    """One JSON line; a row json refuses (NaN, a tensor, a huge int...) is converted value by
    value, nested dicts included."""
    try:
        return json.dumps(row, allow_nan=False) + "\n"
    except Exception:
        return json.dumps(to_json_value(dict(row)), allow_nan=False) + "\n"


#: How deep a row's dicts and lists are converted (a configuration nests up to 32 levels);
#: below it a value is its ``repr``.
_MAX_NESTING = 32


#: The most digits an int may have and still be read back by ``json.loads``.
_MAX_INT_DIGITS: int = getattr(sys, "get_int_max_str_digits", lambda: 4300)() or 4300
_INT_LIMIT = 10**_MAX_INT_DIGITS


def to_json_value(value: Any, _depth: int = 0, _on_path: frozenset[int] = frozenset()) -> Any:
    """A JSON-safe stand-in for ``value``: numbers, bools and strings as they are (NumPy and
    torch ones as their plain Python form), lists and dicts element by element (one met again
    inside itself as ``"..."``, as ``repr`` prints a cycle), and what JSON cannot hold
    faithfully as a string (see the module's docstring). Never raises."""
    value = as_plain(value)
    if isinstance(value, (list, tuple, dict)):
        if id(value) in _on_path:
            return "..."  # a cycle: entered again, a dict holding itself twice would double
        _on_path = _on_path | {id(value)}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if abs(value) >= _INT_LIMIT:
            return f"<int of {decimal_digits(value)} digits>"
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (numbers.Real, Decimal)):
        # A Fraction or a Decimal is the number it stands for (its repr, "Decimal('0.5')",
        # is text no reader charts); one no float holds (Decimal('1e400')) is its text.
        number = as_real(value)
        if number is not None and (math.isfinite(number) or not _finite_decimal(value)):
            return to_json_value(number)
        return str(value)
    if isinstance(value, (list, tuple)) and _depth < _MAX_NESTING:
        return [to_json_value(v, _depth + 1, _on_path) for v in value]
    if type(value) is dict and _depth < _MAX_NESTING:
        # A dict inside a list (a configuration's list of tables) stays a table.
        return {key_text(k): to_json_value(v, _depth + 1, _on_path) for k, v in value.items()}
    try:
        return repr(value)
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"


def _finite_decimal(value: Any) -> bool:
    """Whether ``value`` is a finite ``Decimal`` (its float may still be an infinity)."""
    return isinstance(value, Decimal) and value.is_finite()


def metrics_line(run_id: str, metrics: Mapping[str, Any], step: int, prefix: str) -> str:
    """One metrics row, ``{"time", "run_id", "step", "prefix", "metrics"}``, as a JSON line
    (the console backend's JSON rows are the same line)."""
    row = {
        "time": time.time(),
        "run_id": run_id,
        "step": step,
        "prefix": prefix,
        "metrics": metrics,
    }
    try:
        # Almost every row is plain numbers and strings, which json encodes as they are;
        # only a row it refuses (NaN, a tensor, a huge int...) is converted value by value.
        return json.dumps(row, allow_nan=False) + "\n"
    except Exception:
        row["step"] = to_json_value(step)
        row["prefix"] = to_json_value(prefix)
        row["metrics"] = {key_text(k): to_json_value(v) for k, v in metrics.items()}
        return json.dumps(row, allow_nan=False) + "\n"


@declare_options(path=FILE_PATH)
class JsonlBackend:
    """Appends ``{"time", "run_id", "step", "prefix", "metrics"}`` per call to ``path``.

    :param identity: the run (given by the Logger); a resumed run writes a ``resume`` row
        first. Without one, rows carry a generated run id.
    """

    #: Writes on the caller's thread (see the module's docstring), never through a queue.
    inline = True

    def __init__(
        self, path: str | os.PathLike[str] = DEFAULT_PATH, identity: RunIdentity | None = None
    ) -> None:
        self.path = Path(path)
        self.identity = identity or RunIdentity(new_run_id())
        self.run_id = self.identity.run_id
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: TextIO | None = _open_for_append(self.path)
        except OSError as exc:
            raise BackendUnavailable(
                f"cannot append to {self.path} ({exc.strerror or exc}); choose a writable file "
                "path: Logger(backends={'jsonl': {'path': ...}})"
            ) from exc
        self._samples: BackendWorker | None = None
        # Reentrant: a signal's handler that finishes the Logger runs on the thread it
        # interrupted, which may be inside _write holding it.
        self._lock = threading.RLock()
        #: A forked child's: the file object is the parent's, dropped; a new one is opened
        #: at the child's first write (see :meth:`_after_fork_in_child`).
        self._reopen = False
        #: In a forked child: its run's end is its parent's to write.
        self._child = False
        #: Whether it wrote a row: a run that logged none (only samples) gets no end row, and
        #: its file stays empty, as a reader expects of a run that has logged no step.
        self._wrote = False
        forget_in_child(self)
        kind = RESUME_KIND if self.identity.resume else self._rerun_kind()
        if kind is not None:
            self._write(_line({"time": time.time(), "run_id": self.run_id, "kind": kind}))

    def _rerun_kind(self) -> str | None:
        """``rerun`` when this process starts the run anew in a file that holds rows of its id
        already (an earlier attempt's); None for the run's first attempt, and for a run this
        process already logs to this file (another Logger of it, a forked child's)."""
        started = (self.path.resolve(), self.run_id)
        if started in _started:
            return None
        _started.add(started)
        try:
            return RERUN_KIND if _holds_run(self.path, self.run_id) else None
        except OSError:  # unreadable, though appendable: the run's rows are still written
            return None

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        self._write(metrics_line(self.run_id, metrics, step, prefix))

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """One ``hyperparams`` row: the configuration, nested as logged."""
        row = {
            "time": time.time(),
            "run_id": self.run_id,
            "kind": HYPERPARAMS_KIND,
            "hyperparams": dict(params),
        }
        self._write(_line(row))

    def log_samples(self, rows: Sequence[Mapping[str, Any]], step: int, name: str) -> None:
        """One line per sample in :func:`samples_path`, stamped now and written by the
        samples file's own thread (see :class:`_SamplesFile`); the rows are plain values the
        Logger made for this call, so handing them over is safe."""
        with self._lock:
            if self._file is None:
                raise ValueError(f"JSONL backend {self.path} is finished")
            if self._samples is None:
                self._samples = BackendWorker(
                    "jsonl-samples",
                    _SamplesFile(samples_path(self.path), self.run_id),
                    SAMPLES_QUEUE_SIZE,
                )
            self._samples.call("log_samples", rows, step, name, time.time())

    def _write(self, line: str) -> None:
        with self._lock:
            if self._file is None:
                raise ValueError(f"JSONL backend {self.path} is finished")
            if self._reopen:
                self._reopen = False
                self._file = self.path.open("a", encoding="utf-8")
            file = self._file  # a signal's handler may finish the backend between the two
            file.write(line)
            file.flush()
            self._wrote = True

    def _after_fork_in_child(self) -> None:
        # A thread of the parent may have been inside _write at the fork: its lock stays held
        # in the child (which has no such thread), and half its row may sit in the file
        # object's buffer, which any write, close or finalization in the child would flush
        # into the parent's file. So the child forsakes that file object unflushed and appends
        # through one of its own: a row per write, each a whole line (O_APPEND).
        self._lock = threading.RLock()
        self._child = True
        if self._file is not None:
            _forsake(self._file)
            self._reopen = True
        # The samples file's thread stayed behind, with its file object: the child starts
        # its own at its first table.
        samples, self._samples = self._samples, None
        if samples is not None:
            samples.backend.forsake()

    def finish(self, failed: bool = False) -> None:
        """Write the run's ``end`` row (``failed``: the run ended with an exception) and close
        the file. A forked child writes none: the run goes on in its parent."""
        with self._lock:
            if self._file is not None and self._wrote and not self._child:
                end = {"time": time.time(), "run_id": self.run_id, "kind": END_KIND}
                end["status"] = "failed" if failed else "finished"
                with contextlib.suppress(OSError, RuntimeError):  # see below
                    self._write(_line(end))
            # RuntimeError: finish() from a signal's handler that interrupted this thread
            # inside the file's own write ("reentrant call"); that write goes on when the
            # handler returns, and the interpreter closes the file at its exit.
            if self._file is not None:
                with contextlib.suppress(RuntimeError):
                    self._file.close()
            self._file = None
            samples, self._samples = self._samples, None
        if samples is not None:
            samples.finish(time.monotonic() + SAMPLES_FINISH_S, SAMPLES_FINISH_S)


class _SamplesFile:
    """The samples file beside a metrics file, written on a thread of its own.

    A table of samples is a look at the run, not its record: encoding 64 rows of 2 KB text is
    most of a millisecond, which the loop should not pay (the metrics rows, by contrast, are
    on disk when ``log_metrics`` returns). So the JSONL backend hands each table to this file
    through a :class:`~rlmetrics.backends.worker.BackendWorker`: a bounded queue (a table past
    it is dropped and counted), one thread, a bounded wait at ``finish()``."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._file: TextIO | None = None

    def log_samples(
        self, rows: Sequence[Mapping[str, Any]], step: Any, name: str, now: float
    ) -> None:
        # The fields every line of the call shares are encoded once; each row then costs one
        # encode (the rows are plain JSON values already, bounded by the Logger).
        head = _line({"time": now, "run_id": self.run_id, "step": step, "name": name})
        head = head[: -len("}\n")] + ', "sample": '
        text = "".join(f"{head}{_line(row)[:-1]}}}\n" for row in rows)
        if self._file is None:
            self._file = _open_for_append(self.path)
        self._file.write(text)
        self._file.flush()

    def finish(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def forsake(self) -> None:
        """In a forked child: drop the parent's file object unflushed (see :func:`_forsake`)."""
        if self._file is not None:
            _forsake(self._file)


def _forsake(handle: TextIO) -> None:
    """Close the descriptor under ``handle``, leaving its buffer unwritten: a file object whose
    raw file is closed never flushes again (not on a write, ``close()`` or finalization)."""
    # Not a file object of open()'s: nothing of the parent's to hold back.
    with contextlib.suppress(Exception):
        handle.buffer.raw.close()  # type: ignore[attr-defined]


def _open_for_append(path: Path) -> TextIO:
    handle = path.open("a", encoding="utf-8")
    if not _ends_a_line(path):
        # A writer killed mid-line left a fragment: a row appended to it would be lost
        # with it, so the next row starts on a line of its own. Said by its line now: once
        # closed off, a reader can only call it "not JSON".
        logger.warning(
            "rlmetrics: %s ends in a torn line %d (a writer killed mid-row); it is left as "
            "it is, and the rows appended now start on the next line",
            path,
            _count_lines(path),
        )
        handle.write("\n")
        handle.flush()
    return handle


def _holds_run(path: Path, run_id: str) -> bool:
    """Whether ``path`` holds a row of the run ``run_id``: its ``"run_id": "<id>"`` as this
    backend writes it, found by a scan of the bytes (1 to 2 s a GB, once, at the start).
    Only a regular file is read: ``/dev/full`` reads as zeros for ever, a FIFO blocks."""
    if not stat.S_ISREG(path.stat().st_mode):
        return False
    needle = f'"run_id": {json.dumps(run_id)}'.encode()
    tail = b""
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            if needle in tail + chunk[: len(needle)] or needle in chunk:
                return True
            tail = chunk[-len(needle) :]
    return False


def _count_lines(path: Path) -> int:
    """How many lines ``path`` holds, its last one counted unended or not."""
    lines = 1
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            lines += chunk.count(b"\n")
    return lines


def _ends_a_line(path: Path) -> bool:
    """Whether ``path`` is empty or ends with a newline."""
    with path.open("rb") as handle:
        if handle.seek(0, os.SEEK_END) == 0:
            return True
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def open_regular(path: str | os.PathLike[str]) -> TextIO:
    """``path`` opened for reading as text, if it is a regular file; else ``ValueError``.

    A device (``/dev/zero``, ``/dev/full``) reads forever and a FIFO blocks until a writer
    comes, so neither can be a metrics file. The file is opened without blocking and checked
    on the open descriptor, so a FIFO never stalls the open itself.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(
                f"{os.fspath(path)} is not a regular file (a device, a FIFO or a directory); "
                "a JSONL metrics file is read from a regular file"
            )
        os.set_blocking(fd, True)
        head = os.pread(fd, _MAGIC_BYTES, 0)
        for magic, module in _COMPRESSED:
            if head.startswith(magic):  # a rotated or archived run, compressed where it lies
                opened: TextIO = importlib.import_module(module).open(
                    os.fdopen(fd, "rb"), "rt", encoding="utf-8", errors="replace"
                )
                return opened
        return open(fd, encoding="utf-8", errors="replace", closefd=True)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise


#: A compressed file's first bytes, and the module that reads it (gzip: logrotate's
#: ``compress``; bz2 and xz beside it, as Gym's health report reads them).
_COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "lzma"))
_MAGIC_BYTES = 6
#: What a compressed stream raises where it is cut short or damaged.
_CUT_STREAM = (EOFError, OSError, ValueError)


class SkippedLines:
    """The lines :func:`read_jsonl` skipped: how many, and the first few with why.

    A corrupted file can hold thousands of bad lines; a reader says so once, with the count
    and the first :data:`SHOWN` of them, never a line per bad line."""

    #: Bad lines a summary names (the rest are counted).
    SHOWN = 5

    def __init__(self) -> None:
        self.count = 0
        self.first: list[tuple[int, str]] = []

    def add(self, number: int, why: str) -> None:
        self.count += 1
        if len(self.first) < self.SHOWN:
            self.first.append((number, why))

    def named(self) -> str:
        """``line 2 (not JSON), line 9 (a torn last line) and 3 more``."""
        return named_lines(self.first, self.count)

    def summary(self, path: str | os.PathLike[str]) -> str:
        """``3 unreadable lines of m.jsonl skipped: line 2 (not JSON), ...``."""
        return (
            f"rlmetrics: {self.count} unreadable line{'s' * (self.count != 1)} of "
            f"{os.fspath(path)} skipped: {self.named()}"
        )


def named_lines(first: Sequence[tuple[int | None, str]], count: int) -> str:
    """The ``first`` bad lines of ``count``, each as ``line N (why)`` (a line whose number is
    not known as its why alone), and how many more there are."""
    named = ", ".join(why if n is None else f"line {n} ({why})" for n, why in first)
    return named + (f" and {count - len(first)} more" if count > len(first) else "")


def _row_problem(row: Any) -> str | None:
    """Why a parsed line is no row of a metrics file, or None. A metrics row's ``metrics`` is
    an object and its ``step`` an integer (what the JSONL backend writes); other objects (the
    records about the run, sample rows) are rows as they are."""
    if not isinstance(row, dict):
        return "not a JSON object"
    if "metrics" in row and "kind" not in row:
        if not isinstance(row["metrics"], dict):
            return "metrics is not an object"
        step = row.get("step")
        if type(step) is not int:
            return "step is not an integer"
    return None


def read_jsonl(
    path: str | os.PathLike[str],
    *,
    every_row: bool = False,
    skipped: SkippedLines | None = None,
    lines: MutableSequence[int] | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield the rows of a JSONL metrics file, skipping each line that is not one: a line
    that does not parse (a torn last line, a line nested too deeply or with an int too long
    to read), a JSON value that is not an object, a metrics row whose ``metrics`` is not an
    object or whose ``step`` is not an integer.

    The skipped lines are counted into ``skipped`` when given (the caller says what it
    wants); otherwise one WARNING names how many and the first few when reading ends.

    The metric rows only, unless ``every_row``: then also the records about the run (rows with
    a ``kind``: ``hyperparams``, ``resume``). With ``lines``, the line number of each row is
    appended to it as the row is yielded (so a later rule can name a row by its line).
    Refuses (``ValueError``) a path that is not a regular file: a device or a FIFO would be
    read forever."""
    bad = SkippedLines() if skipped is None else skipped
    try:
        with open_regular(path) as handle:
            for number, line in _numbered(handle, bad):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError):
                    bad.add(number, "a torn last line" if not line.endswith("\n") else "not JSON")
                    continue
                problem = _row_problem(row)
                if problem is not None:
                    bad.add(number, problem)
                elif every_row or "kind" not in row:
                    if lines is not None:
                        lines.append(number)
                    yield row
    finally:
        if skipped is None and bad.count:
            logger.warning(bad.summary(path))


def _numbered(handle: TextIO, skipped: SkippedLines) -> Iterator[tuple[int, str]]:
    """``handle``'s lines with their numbers; a compressed file cut short (still being
    compressed, copied in part) or damaged ends where it can no longer be read, counted as a
    skipped line that says so."""
    number = 0
    lines = iter(handle)
    while True:
        try:
            line = next(lines)
        except StopIteration:
            return
        except _CUT_STREAM as exc:
            if isinstance(getattr(handle, "buffer", None), io.BufferedReader):
                raise  # a plain file's read error is no compressed stream's end
            skipped.add(number + 1, f"the compressed file ends early ({exc})")
            return
        number += 1
        yield number, line


@hookimpl
def register_backends(register: Any) -> None:
    register("jsonl", JsonlBackend)
