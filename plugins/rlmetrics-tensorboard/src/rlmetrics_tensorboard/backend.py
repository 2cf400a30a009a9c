"""The TensorBoard backend: event files, one log folder per run.

Events are built with tensorboardX's summaries and written synchronously on the backend's own
thread (:mod:`.eventfile`): a write the disk refuses, or a log folder deleted mid-run, is
counted as the row's failure and said once, and the backend then stops writing at once.

Each logged dict becomes scalars (text, histograms) at the trainer step, stamped with the time
it is written (a queued row waits well under a millisecond unless the writer falls behind), or
with the rollout-checkpoint streams' own ``telemetry/wall_time_seconds`` when they carry it.
TensorBoard keeps every (step, value) point, so a step that goes back is never lost.

A resumed run (``RunIdentity.resume``) writes into the same folder. Its first trainer step
carries TensorBoard's restart marker, so points the previous process wrote past its last
checkpoint (steps logged again after the restart) are dropped by TensorBoard's reader instead
of shown twice. A run started again with the same id without resume (a rerun, a requeued job)
starts the folder over the same way, said once: TensorBoard shows its points, not the two
processes' interleaved. What a restarted job logs before its first trainer step is no restart point:
its setup timing (step 0 of every process) and the rollout-checkpoint streams (their own
sample index, from 0 in every process); a marker at their step would hide, in every tag, all
the earlier run logged from that step on. Nor is a second Logger of the run in this process
(a trainer callback's and the script's own): it writes beside the first, no marker.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tensorboardX.proto.event_pb2 import Event, SessionLog
from tensorboardX.proto.plugin_hparams_pb2 import HParamsPluginData
from tensorboardX.proto.summary_pb2 import Summary
from tensorboardX.summary import histogram, hparams, text

from rlmetrics import resets_process_state, warn_once
from rlmetrics.backends import StepAxis, full_key, storable_text
from rlmetrics.events import SETUP_TIMING_PREFIX, STEP_KEY, WALL_TIME_KEY
from rlmetrics.hyperparams import flat_hyperparams, param_text
from rlmetrics.identity import RunIdentity, new_run_id
from rlmetrics.samples import columns_of, markdown_table

from .eventfile import EventFile, events
from .values import HISTOGRAM, SCALAR, TEXT, tensorboard_value

__all__ = ["HPARAMS_FOLDER", "TensorBoardBackend"]

#: The sub-folder of the run's log folder that holds its hyperparameters (TensorBoard's
#: HParams dashboard reads each folder with an hparams event as one session).
HPARAMS_FOLDER = "hparams"


#: The log folders this process's backends write into and have not all finished, each with how
#: many do: a second Logger of the run in the process (a trainer callback's beside the script's
#: evaluation Logger) writes beside the first, which is no earlier process's run to start over.
_writing: dict[Path, _Folder] = {}
_writing_lock = threading.Lock()


class _Folder:
    """A log folder this process's backends write into: how many do, and the run's one
    hparams session, which they share (each rewriting it with its own keys would lose the
    other's)."""

    def __init__(self) -> None:
        self.users = 0
        self.lock = threading.Lock()
        #: Every hyperparameter logged so far (a later value wins), and the event file that
        #: holds them: TensorBoard's reader shows the first session it meets in a folder, so
        #: each call rewrites the one session instead of adding a second it would hide.
        self.hparams: dict[str, bool | int | float | str] = {}
        self.hparams_file: Path | None = None


@resets_process_state
def _forget_writing() -> None:
    with _writing_lock:
        _writing.clear()


def _join_folder(folder: Path) -> tuple[_Folder, bool]:
    """Count a backend writing into ``folder``: its shared state, and whether another backend
    of this process already was."""
    with _writing_lock:
        shared = _writing.setdefault(folder, _Folder())
        shared.users += 1
    return shared, shared.users > 1


def _leave_folder(folder: Path) -> None:
    with _writing_lock:
        shared = _writing.get(folder)
        if shared is not None:
            shared.users -= 1
            if shared.users <= 0:
                del _writing[folder]


#: The largest int the HParams dashboard holds exactly (it stores numbers as doubles).
EXACT_INT = 2**53


def _hparam_value(value: Any, texts: list[str], key: str) -> bool | int | float | str:
    """A value the HParams dashboard takes: bool, int, float, str; lists and None as their
    text, as MLflow's params are (:func:`rlmetrics.hyperparams.param_text`). An int past ±2⁵³
    is its text too (appended to ``texts`` for the one warning): a double would round it, and
    one past int64 made tensorboardX refuse the whole session."""
    if type(value) is int and abs(value) > EXACT_INT:
        texts.append(key)
        return str(value)
    if isinstance(value, (bool, int, float, str)):
        return value
    return param_text(value)


#: The tag of an hparams session's start, which holds its hyperparameters.
_SESSION_START_TAG = "_hparams_/session_start_info"


def _earlier_sessions(folder: Path) -> tuple[dict[str, bool | float | str], list[Path]]:
    """The hyperparameters the hparams sessions already in ``folder`` hold (an earlier process
    of the run wrote them; files in name order, a later value winning), and their files."""
    values: dict[str, bool | float | str] = {}
    files = sorted(folder.glob("events.out.tfevents.*"))
    for path in files:
        for event in events(path):
            for summary in event.summary.value:
                if summary.tag != _SESSION_START_TAG:
                    continue
                try:
                    content = summary.metadata.plugin_data.content
                    start = HParamsPluginData.FromString(content).session_start_info
                except Exception:  # not a session rlmetrics can read: replaced as it is
                    continue
                for key, value in start.hparams.items():
                    kind = value.WhichOneof("kind")
                    if kind in ("number_value", "string_value", "bool_value"):
                        values[key] = getattr(value, kind)
    return values, files


def _default_bins() -> list[float]:
    """The histogram bins tensorboardX's ``add_histogram`` uses (TensorFlow's defaults)."""
    value, positive = 1e-12, []
    while value < 1e20:
        positive.append(value)
        value *= 1.1
    return [-v for v in reversed(positive)] + [0.0] + positive


_BINS = _default_bins()


def _unique_suffix() -> str:
    """An event file's name ends in its writer's start second and host: two writers started
    in one second (a quick restart) would write one file. Nanoseconds keep them apart, in the
    order TensorBoard must read them (by name)."""
    return f".{time.time_ns()}"


class TensorBoardBackend:
    """Writes a run's event files into ``log_dir``.

    :param log_dir: the run's folder; default ``<root_dir>/<run id>``.
    :param root_dir: where run folders go when ``log_dir`` is not given (point TensorBoard at
        it: ``tensorboard --logdir runs``); default ``runs``.
    :param flush_secs: how often the event file is fsynced (each row reaches the OS when it
        is written).
    :param identity: the run (given by the Logger): its id names the folder, and a resumed
        run continues it.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] | None = None,
        root_dir: str | os.PathLike[str] = "runs",
        flush_secs: float = 10.0,
        identity: RunIdentity | None = None,
    ) -> None:
        self.identity = identity or RunIdentity(new_run_id())
        self.log_dir = Path(root_dir) / self.identity.run_id if log_dir is None else Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.flush_secs = flush_secs
        self._file: EventFile | None = None
        self._lock = threading.Lock()
        self._step = StepAxis("tensorboard")
        self._finished = False
        #: A restart marker is still to be written, at the first trainer step: a resumed
        #: run's, and a run's started again (without resume) where an earlier process of it
        #: wrote, which starts the folder over instead of interleaving the two. Neither for a
        #: second backend of the folder in this process: the first one's points are this run's.
        self._folder = self.log_dir.resolve()
        self._shared, beside = _join_folder(self._folder)
        again = (
            not beside
            and not self.identity.resume
            and any(self.log_dir.glob("events.out.tfevents.*"))
        )
        self._restart_pending = not beside and (self.identity.resume or again)
        if again:
            warn_once(
                f"tensorboard:again:{self.log_dir}",
                f"rlmetrics-tensorboard: {str(self.log_dir)!r} holds an earlier process's "
                f"events of run {self.identity.run_id!r}; started again without resume=True, "
                "this run starts it over (TensorBoard shows its points from its first step "
                "on, not the earlier ones). Pass resume=True to continue the earlier run, or "
                "a new run id to keep both",
            )

    def _open(self) -> EventFile:
        """The run's event file, opened at the first write."""
        if self._finished:
            raise ValueError(f"TensorBoard backend {self.log_dir} is finished")
        if self._file is None:
            self._file = EventFile(self.log_dir, _unique_suffix(), self.flush_secs)
        return self._file

    def _restart(self, step: int, walltime: float) -> list[Event]:
        """A resumed run's restart marker at ``step``, its first trainer step (see the
        module's docstring), to write before that step's events; [] otherwise."""
        if not self._restart_pending:
            return []
        self._restart_pending = False
        return [
            Event(wall_time=walltime, step=step, session_log=SessionLog(status=SessionLog.START))
        ]

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        number = self._step(step)
        wall = metrics.get(WALL_TIME_KEY)
        walltime = float(wall) if isinstance(wall, (int, float)) else time.time()
        with self._lock:
            file = self._open()
            events: list[Event] = []
            scalars: list[Summary.Value] = []
            for key, value in metrics.items():
                if key in (STEP_KEY, WALL_TIME_KEY):
                    continue  # the axes themselves are the event's step and time
                tag = storable_text(full_key(prefix, key))
                kind, payload = tensorboard_value(value)
                if kind == SCALAR:
                    scalars.append(Summary.Value(tag=tag, simple_value=payload))
                elif kind == TEXT:
                    events.append(_event(text(tag, storable_text(payload)), number, walltime))
                elif kind == HISTOGRAM:
                    events.append(_event(histogram(tag, payload, _BINS), number, walltime))
                elif payload is not None:
                    warn_once(
                        f"tensorboard:skip:{payload}",
                        f"rlmetrics-tensorboard: {tag!r} is {payload}, which TensorBoard cannot "
                        "show; it is skipped (the JSONL backend keeps it)",
                    )
            if scalars:
                # The dict's scalars as one event, as add_scalar writes each (a float32
                # simple_value) but without its NaN check, which logs a warning per value: a
                # diverging loss would say so on every step.
                events.insert(0, _event(Summary(value=scalars), number, walltime))
            if events and WALL_TIME_KEY not in metrics and prefix != SETUP_TIMING_PREFIX:
                events[:0] = self._restart(number, walltime)  # a trainer step (see above)
            if events:
                file.write(events)  # the dict's events in one write: all of them or the error

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """The configuration, flattened with ``/``, as an hparams session in
        ``<log_dir>/hparams`` (TensorBoard's HParams dashboard)."""
        texts: list[str] = []
        flat = {
            key: _hparam_value(value, texts, key) for key, value in flat_hyperparams(params).items()
        }
        if texts:
            warn_once(
                "tensorboard:hparam-text",
                f"rlmetrics-tensorboard: {len(texts)} hyperparameter(s), first {texts[0]!r}, "
                "are ints past 2**53, which the HParams dashboard would round; they are "
                "logged as their text",
            )
        folder = self.log_dir / HPARAMS_FOLDER
        shared = self._shared
        with shared.lock:
            replaced: list[Path] = []
            if shared.hparams_file is None:
                # This process's first session replaces an earlier process's (TensorBoard
                # would show that one, the first of the folder): a resumed run keeps its
                # keys, later values winning; a run started again begins with its own.
                earlier, replaced = _earlier_sessions(folder)
                if self.identity.resume:
                    shared.hparams = {**earlier, **shared.hparams}
            merged = {**shared.hparams, **flat}
            experiment, start, end = hparams(merged, {})
            file = EventFile(folder, _unique_suffix(), self.flush_secs)
            try:
                file.write(
                    _event(summary, None, time.time()) for summary in (experiment, start, end)
                )
            finally:
                file.close()
            # Only once the merged session is on disk is the one it replaces removed: a
            # failed write keeps the previous session whole.
            shared.hparams = merged
            previous, shared.hparams_file = shared.hparams_file, file.path
            if previous is not None:
                replaced.append(previous)
            for path in replaced:
                path.unlink(missing_ok=True)

    def log_samples(self, rows: Sequence[Mapping[str, Any]], step: int, name: str) -> None:
        """The rows as one Markdown table under the tag ``name`` (the Text dashboard)."""
        number = self._step(step)
        table = markdown_table(rows, columns_of(rows))
        now = time.time()
        with self._lock:
            self._open().write(
                [*self._restart(number, now), _event(text(name, table), number, now)]
            )

    def finish(self) -> None:
        """fsync and close the event file, once."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            _leave_folder(self._folder)
            if self._file is not None:
                self._file.close()


def _event(summary: Summary, step: int | None, walltime: float) -> Event:
    event = Event(summary=summary, wall_time=walltime)
    if step is not None:
        event.step = step
    return event
