"""The Trackio backend: each logged dict becomes values at the trainer step of one Trackio run,
in a local project (Trackio's SQLite store under ``TRACKIO_DIR``).

Values:

* numbers (Python, NumPy, torch scalars) → numbers; NaN and ±inf as Trackio keeps them; an int
  past int64 as a float (Trackio skips such ints), one past float's range is skipped;
* bools → ``1.0`` / ``0.0``; strings as they are;
* ``None`` → skipped silently; lists and any other value → skipped, one warning per kind (the
  JSONL backend keeps them).

The configuration goes into the run's config (later calls add to it); sample rows become one
``trackio.Table`` per call under their name, a cell Trackio cannot hold as its text.
Trajectories (``Logger.log_trajectories``, the live form) become Trackio traces, one per
rollout, under ``trajectory_traces`` at their step (their rows are the ``trajectories`` table
as for every backend); rlmetrics' in-process alerts (``RLStepStalled``) become
``trackio.alert`` s of the run (:mod:`rlmetrics_trackio.traces`).
"""

from __future__ import annotations

import math
import os
import tempfile
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import trackio
import trackio.utils
from trackio.sqlite_storage import SQLiteStorage

from rlmetrics import as_plain, as_real, resets_process_state, warn_once
from rlmetrics.backends import (
    BackendUnavailable,
    RoomCheck,
    SharedRuns,
    StepAxis,
    first_line,
    full_key,
    merged_config,
    start_within,
    storable_text,
)
from rlmetrics.events import STEP_KEY, WALL_TIME_KEY, Alert
from rlmetrics.identity import RunIdentity
from rlmetrics.samples import columns_of
from rlmetrics.trajectories import Trajectory

from .traces import TRACE_KEY, alert_level, alert_title, trace_of

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "MIN_FREE_BYTES",
    "REFUSED_NAME_CHARACTERS",
    "TrackioBackend",
    "trackio_cell",
    "trackio_value",
]

#: Seconds a start on a Space or a Trackio server may take before the backend is skipped:
#: W&B's own bound. Against a Hub that accepts and never answers, Trackio's start held
#: ``Logger()`` for over 5 minutes; a first start that creates the Space uploads its app.
DEFAULT_CONNECT_TIMEOUT_S = 90.0
#: The free space a local store's disk must have for the backend to hand Trackio another
#: record: room for what Trackio's own thread still holds and its sqlite write-ahead log
#: (with 0.5 MiB left, Trackio could not write the rows it held: "database or disk is full").
MIN_FREE_BYTES = 16 << 20
#: The HTTP stacks whose exceptions (or OSError) say a remote start could not reach its host
#: or was refused there: one line, not a plugin's traceback.
_HTTP_STACKS = frozenset({"httpx", "httpx2", "httpcore", "requests", "urllib3", "huggingface_hub"})

#: What a Trackio run name may not hold: it names files of the run's media.
REFUSED_NAME_CHARACTERS = '<>:"/\\|?*'
#: Trackio keeps integers in int64 and skips a larger one.
_INT64 = 2**63

#: The Trackio runs this process's backends started, by (project, name), while one of them
#: still logs into it: a second Logger of the run logs into the same Trackio run (Trackio
#: would start a second run of that name, which its API and storage, by name, do not show),
#: and the last of them to finish finishes it.
_RUNS = SharedRuns()
_started_runs: dict[tuple[str, str], Any] = {}


@resets_process_state
def _forget_started_runs() -> None:
    _started_runs.clear()
    _RUNS.forget()


def trackio_value(value: Any) -> Any:
    """A number or a string, None (absent) or a reason string for a skipped value (wrapped
    in a tuple so it is not mistaken for text)."""
    if value is None:
        return None
    plain = as_plain(value)
    if isinstance(plain, bool):
        return float(plain)
    if isinstance(plain, str):
        return storable_text(plain)
    number = as_real(plain)
    if number is None:
        return (f"a {type(value).__name__} value",)
    if isinstance(number, int) and -_INT64 <= number < _INT64:
        return number
    try:
        return float(number)
    except OverflowError:
        return ("an int past float's range",)


def trackio_cell(value: Any) -> Any:
    """A table cell as Trackio stores it: None, a bool, a finite number or a string (any
    other value as its text: a table keeps every row)."""
    plain = as_plain(value)
    if plain is None or isinstance(plain, (bool, str)):
        return plain
    if isinstance(plain, int) and -_INT64 <= plain < _INT64:
        return plain
    if isinstance(plain, float) and math.isfinite(plain):
        return plain
    try:
        return str(plain)
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"


class TrackioBackend:
    """Logs to a Trackio run it starts with ``trackio.init`` (or to the script's active one).

    :param project: the Trackio project (default ``rlmetrics``).
    :param name: the run's name; default the run id (so a resumed run finds its run).
    :param group, config: passed to ``trackio.init``.
    :param init_kwargs: any other ``trackio.init`` argument; they win over the named ones.
    :param identity: the run (given by the Logger): a resumed run passes ``resume="allow"``.
    :param run: an already started Trackio run to log into; the backend never finishes it.

    Trackio's own system monitors stay off unless ``init_kwargs`` turns them on: rlmetrics
    exports host and GPU series itself.
    """

    def __init__(
        self,
        project: str = "rlmetrics",
        name: str | None = None,
        group: str | None = None,
        config: Mapping[str, Any] | None = None,
        init_kwargs: Mapping[str, Any] | None = None,
        identity: RunIdentity | None = None,
        run: Any = None,
        connect_timeout_s: float | None = None,
    ) -> None:
        self._finished = False
        self._number = StepAxis("trackio")
        self._logged = False
        #: The local store's folder, checked for room before each record (None: not known to
        #: be local); why it can take nothing more, once it cannot.
        self._store: Path | None = None
        self._room = RoomCheck(
            "Trackio",
            MIN_FREE_BYTES,
            "this backend hands Trackio nothing more in this run (the other backends go on)",
        )
        if run is None:
            run = trackio.context_vars.current_run.get()  # the script's own run, if any
        self._shared_as: tuple[str, str] | None = None
        if run is not None:
            self.run = run
            _RUNS.join(run, started=False)
            return
        kwargs: dict[str, Any] = {
            "project": project,
            "name": name
            if name is not None or identity is None
            else identity.tracker_id(REFUSED_NAME_CHARACTERS),
            "group": group,
            "config": dict(config) if config is not None else None,
            "resume": "allow" if identity is not None and identity.resume else "never",
            "embed": False,
            "auto_log_gpu": False,
            "auto_log_cpu": False,
        }
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        kwargs.update(init_kwargs or {})
        if kwargs.get("name") is not None:
            shared_as = (str(kwargs["project"]), str(kwargs["name"]))
            started = _started_runs.get(shared_as)
            if started is not None:  # another Logger's backend in this process started it
                self.run = started
                _RUNS.join(started, started=False)
                return
            self._shared_as = shared_as
        # trackio.init makes its run the thread's current one; put the script's back, so a
        # later Logger (or the script's own trackio.log) never takes this run for its own.
        _check_store_writable()
        remote = _remote(kwargs)
        current = trackio.context_vars.current_run
        script_run = current.get()
        try:
            if remote is None:
                self.run = trackio.init(**kwargs)
            else:
                bound = (
                    DEFAULT_CONNECT_TIMEOUT_S if connect_timeout_s is None else connect_timeout_s
                )
                self.run = start_within(
                    lambda: trackio.init(**kwargs), bound, remote, abandon=lambda r: r.finish()
                )
        except BackendUnavailable:
            raise
        except Exception as exc:
            if remote is not None and _from_the_network(exc):
                raise BackendUnavailable(
                    f"rlmetrics-trackio: Trackio could not reach {remote}: {first_line(exc)}"
                ) from exc
            shown = {k: v for k, v in kwargs.items() if k != "config"}
            raise RuntimeError(f"rlmetrics-trackio: trackio.init({shown}) failed: {exc}") from exc
        finally:
            current.set(script_run)
        _RUNS.join(self.run, started=True)
        if remote is None:
            self._store = Path(trackio.utils.TRACKIO_DIR)
        if self._shared_as is not None:
            _started_runs[self._shared_as] = self.run
        if identity is not None and identity.resume and remote is None:
            self._keep_stored_config()

    def _keep_stored_config(self) -> None:
        """Put a resumed run's stored config under what this process starts with: Trackio
        stores the config each process holds at its first record in place of the run's, so
        the keys only an earlier process logged were gone. Local runs only (a Space's or a
        server's store is not read here)."""
        try:
            stored = SQLiteStorage.get_run_config(self.run.project, run_id=self.run.id)
        except Exception as exc:
            warn_once(
                "trackio:resume-config",
                f"rlmetrics-trackio: the resumed run's stored configuration could not be read "
                f"({first_line(exc)}); Trackio keeps only what this process logs",
            )
            return
        if not isinstance(stored, dict):
            return  # a run resume="allow" started anew
        earlier = {k: v for k, v in stored.items() if not str(k).startswith("_")}
        config = self.run.config  # its "_" keys (user, creation time) are this process's
        config.update({**earlier, **merged_config(earlier, config)})

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        row: dict[str, Any] = {}
        for key, value in metrics.items():
            if key in (STEP_KEY, WALL_TIME_KEY):
                continue
            name = storable_text(full_key(prefix, key))
            converted = trackio_value(value)
            if isinstance(converted, tuple):
                warn_once(
                    f"trackio:skip:{converted[0]}",
                    f"rlmetrics-trackio: {name!r} is {converted[0]}, which Trackio cannot "
                    "show; it is skipped (the JSONL backend keeps it)",
                )
                continue
            if converted is not None:
                row[name] = converted
        if row:
            self._log(row, self._number(step))

    def _log(self, row: dict[str, Any], step: int) -> None:
        # Trackio writes its store later, on its own thread, and says a write the disk refuses
        # only as a warning that a batch "could not be persisted": the row counted as written.
        self._room.check(self._store)
        self.run.log(row, step=step)
        self._logged = True

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """The configuration, nested as logged, into the run's config. Trackio stores a
        run's config once, with its first record: a call after that is said once (the JSONL
        backend keeps it)."""
        if self._logged:
            warn_once(
                "trackio:late-config",
                "rlmetrics-trackio: hyperparameters logged after the run's first step do not "
                "reach Trackio, which stores a run's config with its first record; log them "
                "before the first step (the JSONL backend keeps them)",
            )
            return
        # Trackio's update replaces a top-level key whole: a section gets the keys it had too.
        self.run.config.update(merged_config(self.run.config, params))

    def log_samples(self, rows: Sequence[Mapping[str, Any]], step: int, name: str) -> None:
        """One ``trackio.Table`` under ``name`` per call, its columns in the samples'
        order (prompt, completion, reward first)."""
        columns = columns_of(rows)
        data = [[trackio_cell(row.get(column)) for column in columns] for row in rows]
        self._log({name: trackio.Table(columns=columns, data=data)}, self._number(step))

    def log_trajectories(
        self, trajectories: Sequence[Trajectory], step: int, trace_ids: Sequence[str | None]
    ) -> None:
        """One Trackio trace per trajectory, all under ``trajectory_traces`` at ``step``; a
        trajectory that cannot become one is said once and the others land."""
        traces = []
        for trajectory, trace_id in zip(trajectories, trace_ids, strict=False):
            try:
                traces.append(trace_of(trajectory, trace_id))
            except Exception as exc:
                warn_once(
                    "trackio:trace",
                    f"rlmetrics-trackio: a trajectory could not become a Trackio trace ({exc!r}); "
                    "it is skipped (its row is in the trajectories table)",
                )
        if traces:
            self._log({TRACE_KEY: traces}, self._number(step))

    def log_alert(self, alert: Alert) -> None:
        """``run.alert``: ``RLStepStalled firing`` (warn) / ``resolved`` (info), its summary as
        the text, at the newest step (Trackio's own when there is none yet)."""
        if self._finished:
            return
        step = alert.step if alert.step is not None and alert.step >= 0 else None
        self.run.alert(
            title=alert_title(alert), text=alert.summary, level=alert_level(alert), step=step
        )

    def finish(self) -> None:
        """Finish the run, once, if a backend of this process started it and no other still
        logs into it (another Logger's); a run the script started is left to the script."""
        if self._finished:
            return
        self._finished = True
        if _RUNS.leave(self.run):
            for key, started in list(_started_runs.items()):
                if started is self.run:
                    del _started_runs[key]
            self.run.finish()


def _remote(kwargs: Mapping[str, Any]) -> str | None:
    """What a start of ``trackio.init(**kwargs)`` reaches over the network, for messages: the
    Hub and the Space, or the Trackio server (without its write token); None for a local
    run. As Trackio reads them: the arguments, else ``TRACKIO_SPACE_ID`` /
    ``TRACKIO_SERVER_URL``; a Space wins over a server."""
    space = kwargs.get("space_id") or os.environ.get("TRACKIO_SPACE_ID")
    if space:
        from huggingface_hub import constants

        return f"the Hugging Face Hub at {constants.ENDPOINT} (Space {space})"
    server = kwargs.get("server_url") or os.environ.get("TRACKIO_SERVER_URL")
    if server:
        parts = urllib.parse.urlsplit(str(server))  # its query may hold the write token
        port = f":{parts.port}" if parts.port else ""
        return f"the Trackio server at {parts.scheme}://{parts.hostname}{port}"
    return None


def _from_the_network(exc: BaseException) -> bool:
    """Whether ``exc``, or what it was raised from, is the HTTP stack's or an OSError: the
    host could not be reached or refused the request."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) or type(current).__module__.split(".")[0] in _HTTP_STACKS:
            return True
        current = current.__cause__ or current.__context__
    return False


def _check_store_writable() -> None:
    """Trackio's local store can be written, or :class:`BackendUnavailable` naming it: Trackio
    itself only warns at ``finish()`` that a batch "could not be persisted", while the run
    looked healthy throughout."""
    folder = Path(trackio.utils.TRACKIO_DIR)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".rlmetrics-probe-"):
            pass
    except OSError as exc:
        raise BackendUnavailable(
            f"rlmetrics-trackio: Trackio's store {folder} cannot be written "
            f"({exc.strerror or exc}); set TRACKIO_DIR to a folder this process can write"
        ) from None
