"""The SwanLab backend: each logged dict becomes scalars (and text) at the trainer step of one
SwanLab run.

SwanLab keeps the points of a key by step: a step that goes back is kept, but a second value
for a key at a step it already has is dropped by SwanLab, so the backend says so once. Values:

* numbers (Python, NumPy, torch scalars) → scalars; NaN and ±inf as SwanLab takes them;
* bools → ``1.0`` / ``0.0``;
* strings → ``swanlab.Text`` at the step;
* ``None`` → skipped silently; lists and any other value → skipped, one warning per kind (SwanLab
  has no histogram of a plain list; the JSONL backend keeps them).

The configuration goes to the run's config as logged, but for ``-inf``, given as the text
``"-Inf"``: SwanLab writes every infinite float as ``"Inf"`` (``inf`` and NaN are left to it,
``"Inf"`` and ``"NaN"``).

SwanLab writes a run's records and media later, on a thread of its own, and a write it cannot
make is never seen by its caller: on a full disk it retries each media folder for seconds and
logs tracebacks, and a deleted run folder is written into a file no longer on disk. So before
it hands SwanLab a row, the backend checks that the run's folder is still there and that its
disk has at least :data:`MIN_FREE_BYTES` free (room for what SwanLab still holds). When either
fails, that row and every later one are counted as failed at once (one line says why) and the
backend hands SwanLab nothing more.
"""

from __future__ import annotations

import math
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import swanlab

from rlmetrics import as_plain, as_real, warn_once
from rlmetrics.backends import (
    BackendUnavailable,
    RoomCheck,
    SharedRuns,
    StepAxis,
    exit_status,
    first_line,
    full_key,
    merged_config,
    start_within,
    storable_text,
)
from rlmetrics.events import STEP_KEY, WALL_TIME_KEY
from rlmetrics.identity import RunIdentity, tracker_init_kwargs, with_tracker_setting
from rlmetrics.samples import columns_of

from .columns import MAX_KEY_LENGTH, NUMBER, TEXT, Columns

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "MIN_FREE_BYTES",
    "REFUSED_ID_CHARACTERS",
    "SwanLabBackend",
    "altered_by_config_yaml",
]

#: Free space the run folder's disk must have for the backend to hand SwanLab another row.
MIN_FREE_BYTES = 1 << 20

#: The SwanLab runs this process's backends log into: one they started is finished by the
#: last of them to finish (SwanLab has one active run: a second Logger's backend shares it).
_RUNS = SharedRuns()

#: How long an online start may take by default (``connect_timeout_s``): SwanLab's login
#: alone may wait 20 s a try on a slow route.
DEFAULT_CONNECT_TIMEOUT_S = 30.0

#: What SwanLab refuses in a run id (its settings' pattern, besides control characters).
REFUSED_ID_CHARACTERS = '<>:"/\\|?*#%'


def swanlab_value(value: Any) -> Any:
    """A float, a ``swanlab.Text``, None (absent) or a reason string for a skipped value
    (wrapped in a tuple so it is not mistaken for text)."""
    if value is None:
        return None
    plain = as_plain(value)
    if isinstance(plain, bool):
        return float(plain)
    if isinstance(plain, str):
        return swanlab.Text(storable_text(plain))
    number = as_real(plain)
    if number is not None:
        try:
            return float(number)
        except OverflowError:
            return ("an int past float's range",)
    return (f"a {type(value).__name__} value",)


def _sample_text(row: Mapping[str, Any], columns: Sequence[str]) -> Any:
    body = "\n\n".join(f"{c}: {row[c]}" for c in columns if c in row and c != "reward")
    reward = row.get("reward")
    return swanlab.Text(body, caption=None if reward is None else f"reward {reward}")


def _start_off_the_main_thread(
    kwargs: Mapping[str, Any], online: bool, connect_timeout_s: float
) -> Any:
    """``swanlab.init(**kwargs)`` on a thread of its own. Started on the main thread, a SwanLab
    run takes over SIGINT (Ctrl-C would end the run, not the training loop's own handling)
    and can then only be finished on the main thread, while this backend finishes it on its
    queue's thread. Started elsewhere it does neither.

    An online start (logging in, creating or resuming the run) is waited for at most
    ``connect_timeout_s``: against a server that never answers SwanLab's own timeouts and
    retries hold it for over a minute. It never prompts: without an API key SwanLab would ask
    for one on the terminal, from this thread, where a prompt the bound gave up on would go
    on reading the script's stdin (``settings`` in ``init_kwargs`` may say otherwise).
    Offline it is work on this disk, waited for whole."""
    if not online:
        return start_within(lambda: swanlab.init(**kwargs), math.inf, "SwanLab")
    never_prompting = {
        **kwargs,
        "settings": with_tracker_setting(kwargs.get("settings"), "interactive", False),
    }
    return start_within(
        lambda: swanlab.init(**never_prompting),
        connect_timeout_s,
        f"the SwanLab server at {swanlab.Settings().api_host}",
        abandon=_end_abandoned_run,
    )


def _leave_the_end_to_the_logger(run: Any) -> None:
    """Take out the ``sys.excepthook`` SwanLab installs for a run it starts: on an exception
    nothing caught it finishes the run (crashed, with the traceback) before the interpreter's
    exit has the Logger write the rows still queued, which are then lost. The Logger's exit
    finishes the run failed instead, after them (:meth:`SwanLabBackend.finish`). SwanLab
    0.10's attributes (the plugin's pin); another hook installed since is left alone."""
    hook = getattr(run, "_handle_except", None)
    previous = getattr(run, "_sys_origin_excepthook", None)
    if hook is not None and callable(previous) and sys.excepthook == hook:
        sys.excepthook = previous


def _end_abandoned_run(run: Any) -> None:
    """A run started after its backend gave up on the server: nothing will log to it."""
    run.finish(state="crashed", error="rlmetrics gave up waiting for SwanLab's start")


class SwanLabBackend:
    """Logs to a SwanLab run it starts with ``swanlab.init`` (or to the active one).

    :param project, workspace, name, description, tags, group, job_type, config: passed to
        ``swanlab.init`` when set.
    :param mode: ``online``, ``offline`` (a local folder, ``swanlab sync`` later), ``local``
        or ``disabled``; default ``SWANLAB_MODE``, else SwanLab's (online).
    :param log_dir: where SwanLab writes the run folder (created if missing); SwanLab's
        default ``./swanlog``.
    :param init_kwargs: any other ``swanlab.init`` argument (``settings``, ``id``,
        ``resume``…); they win over the named ones.
    :param identity: the run (given by the Logger): its id is the SwanLab run id, and a
        resumed run passes ``resume="allow"``.
    :param run: an already started SwanLab run to log into; the backend never finishes it.
    :param connect_timeout_s: how long an online start (logging in, creating or resuming the
        run) may take; past it :class:`~rlmetrics.backends.BackendUnavailable` (the Logger
        skips the backend in one line and goes on with the others).
    """

    def __init__(
        self,
        project: str | None = None,
        workspace: str | None = None,
        name: str | None = None,
        description: str | None = None,
        tags: Sequence[str] | None = None,
        group: str | None = None,
        job_type: str | None = None,
        mode: str | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        config: Mapping[str, Any] | None = None,
        init_kwargs: Mapping[str, Any] | None = None,
        identity: RunIdentity | None = None,
        run: Any = None,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
    ) -> None:
        self._finished = False
        self._room = RoomCheck(
            "SwanLab",
            MIN_FREE_BYTES,
            "this backend hands SwanLab nothing more in this run (the other backends go on)",
        )
        self._columns = Columns()
        self._number = StepAxis("swanlab")
        if run is None and swanlab.has_run():
            run = swanlab.get_run()  # the script's own run: log into it, leave it to the script
        if run is not None:
            self.run = run
            _RUNS.join(run, started=False)
            return
        named: dict[str, Any] = {
            "project": project,
            "workspace": workspace,
            "name": name,
            "description": description,
            "tags": list(tags) if tags is not None else None,
            "group": group,
            "job_type": job_type,
            "mode": mode or os.environ.get("SWANLAB_MODE") or None,
            "log_dir": os.fspath(log_dir) if log_dir is not None else None,
            "config": dict(config) if config is not None else None,
        }
        kwargs = tracker_init_kwargs(
            named, identity, REFUSED_ID_CHARACTERS, init_kwargs, folder="log_dir"
        )
        if "id" in kwargs:
            # Online, SwanLab refuses an id under its default resume="never"; "allow" creates
            # the run under this id, or continues it (offline it changes nothing).
            kwargs.setdefault("resume", "allow")
        online = (kwargs.get("mode") or swanlab.Settings().mode) == "online"
        try:
            self.run = _start_off_the_main_thread(kwargs, online, connect_timeout_s)
        except BackendUnavailable:
            raise  # a condition of the world, said in one line by the Logger
        except RuntimeError as exc:
            # SwanLab's refusals (no API key, a key or server it cannot log in with) are
            # RuntimeErrors whose message says what to change: one line, not a plugin's bug.
            advice = (
                " (an online run needs `swanlab login` or SWANLAB_API_KEY; mode 'offline' "
                "needs neither)"
                if online
                else ""
            )
            raise BackendUnavailable(
                f"SwanLab refused to start the run: {first_line(exc)}{advice}"
            ) from exc
        except Exception as exc:
            shown = {k: v for k, v in kwargs.items() if k != "config"}
            raise RuntimeError(f"rlmetrics-swanlab: swanlab.init({shown}) failed: {exc}") from exc
        _leave_the_end_to_the_logger(self.run)
        _RUNS.join(self.run, started=True)

    @property
    def run_dir(self) -> Path:
        """The run's local folder (``files/config.yaml``, ``media/``, the record log)."""
        return Path(self.run.dir)

    def _check_writable(self) -> None:
        """Raise :class:`BackendUnavailable` if SwanLab could not write another row: the run
        folder was deleted, or its disk is (nearly) full; from then on at once, every time."""
        self._room.check(self.run_dir)

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        self._check_writable()
        number = self._number(step)
        row: dict[str, Any] = {}
        for key, value in metrics.items():
            if key in (STEP_KEY, WALL_TIME_KEY):
                continue
            tag = storable_text(full_key(prefix, key))
            converted = swanlab_value(value)
            if isinstance(converted, tuple):
                warn_once(
                    f"swanlab:skip:{converted[0]}",
                    f"rlmetrics-swanlab: {tag!r} is {converted[0]}, which SwanLab cannot "
                    "show; it is skipped (the JSONL backend keeps it)",
                )
                continue
            if converted is None:
                continue
            kept = self._key(tag)
            kind = NUMBER if isinstance(converted, float) else TEXT
            if kept is not None and self._takes(kept, kind, number):
                row[kept] = converted
        if row:
            self.run.log(row, step=number)

    def _key(self, key: str) -> str | None:
        """The key SwanLab keeps ``key`` as (:func:`.columns.swanlab_key`), a change said
        once; None (said once) for a key nothing is left of."""
        kept, changed = self._columns.key(key)
        if kept is None:
            warn_once(
                "swanlab:empty-key",
                f"rlmetrics-swanlab: key {key!r} is empty once SwanLab strips spaces, '.' and "
                "'/' from its ends; it is skipped (the JSONL backend keeps it)",
            )
        elif changed:
            warn_once(
                "swanlab:key",
                f"rlmetrics-swanlab: key {key[:80]!r} is logged to SwanLab as {kept[:80]!r} "
                "(SwanLab strips spaces, '.' and '/' from a key's ends, refuses control "
                f"characters and keeps {MAX_KEY_LENGTH} characters: a longer key ends in a "
                "hash of its own); later ones at DEBUG",
            )
        return kept

    def _takes(self, key: str, kind: str, step: int) -> bool:
        """Whether SwanLab keeps ``key``'s value of ``kind`` at ``step``; what it would drop
        (:mod:`.columns`) is said once per reason, and not handed to it."""
        refused = self._columns.refusal(key, kind, step)
        if refused is None:
            return True
        reason, text = refused
        warn_once(
            f"swanlab:{reason}",
            f"rlmetrics-swanlab: {text} (the JSONL backend keeps it); later ones for this "
            "reason at DEBUG",
        )
        return False

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """The configuration, nested as logged, into the run's config; what its config.yaml
        would read back otherwise is said once."""
        config = _signed_infinities(params)
        # SwanLab's update replaces a top-level key whole: a section gets the keys it had too.
        self.run.config.update(merged_config(self.run.config, config))
        nulls = [key for key, value in config.items() if value is None]
        if nulls and not _store_nulls(self.run.config, nulls):
            warn_once(
                "swanlab:config-null",
                f"rlmetrics-swanlab: hyperparameter {nulls[0]!r} is None, which SwanLab's "
                "config stores as {} at the top level (the JSONL backend has it as null)",
            )
        altered = altered_by_config_yaml(config)
        if altered:
            warn_once(
                "swanlab:config-yaml",
                f"rlmetrics-swanlab: {len(altered)} hyperparameter(s), first {altered[0]!r}, "
                "are read back otherwise from SwanLab's config.yaml (its YAML writer folds a "
                "line break in some keys and text, and U+0085 reads back as a space); the "
                "JSONL backend has them exactly; later ones at DEBUG",
            )

    def log_samples(self, rows: Sequence[Mapping[str, Any]], step: int, name: str) -> None:
        """One ``swanlab.Text`` per row under ``name`` (its columns as ``column: value``
        paragraphs, the reward as its caption)."""
        self._check_writable()
        number = self._number(step)
        kept = self._key(name)
        if kept is not None and self._takes(kept, TEXT, number):
            columns = columns_of(rows)
            self.run.log({kept: [_sample_text(row, columns) for row in rows]}, step=number)

    def finish(self, failed: bool = False, cause: BaseException | None = None) -> None:
        """Finish the run, once, if a backend of this process started it and no other still
        logs into it (another Logger's); a run the script started is left to the script.
        ``failed`` (the run failed): SwanLab's crashed state, its error saying how (``cause``:
        the exception that left the Logger's ``with`` block; a Ctrl-C's is aborted)."""
        if self._finished:
            return
        self._finished = True
        if not _RUNS.leave(self.run):
            return
        if failed:
            error = cause if cause is not None else exit_status.uncaught_exception()
            interrupted = isinstance(error, KeyboardInterrupt)
            # Ctrl-C: SwanLab's own "aborted", as its excepthook said it.
            state = "aborted" if interrupted else "crashed"
            self.run.finish(state=state, error=_failure(cause))
        else:
            self.run.finish()


def _failure(cause: BaseException | None = None) -> str:
    """How the run failed, for SwanLab's crashed state: the traceback of the exception that
    left the Logger's block (``cause``) or that nothing caught (as SwanLab's excepthook gave
    it), the failing exit status, else a run its code finished as failed."""
    error = cause if cause is not None else exit_status.uncaught_exception()
    if isinstance(error, SystemExit):
        return f"the process exited with status {exit_status.as_status(error.code)}"
    if error is not None:
        return "".join(traceback.format_exception(error))
    return exit_status.failure() or "the run was finished as failed (Logger.finish(failed=True))"


def _store_nulls(config: Any, keys: Sequence[str]) -> bool:
    """Store ``None`` under each of ``keys`` (top-level) in SwanLab's run ``config``, whose
    ``update`` parses each top-level value as a configuration of its own and stores None as
    ``{}`` (a nested None stays null). Done as ``update`` does it, through SwanLab 0.10's
    ``Config`` (the plugin's pin): the value set under SwanLab's lock, then its file and event
    rewritten. False when that ``Config`` is not there to write to."""
    try:
        from swanlab.sdk.internal.run.components import config as swanlab_config

        with swanlab_config._lock:
            for key in keys:
                config._config[key] = None
            if config._bound:
                config._flush()
    except Exception:
        return False
    return True


def _signed_infinities(value: Any) -> Any:
    """``value`` (a plain configuration) with each ``-inf`` as the text ``"-Inf"``: SwanLab
    writes every infinite float as ``"Inf"``, so the sign would be lost. The rest is left to
    SwanLab (``inf`` as ``"Inf"``, NaN as ``"NaN"``)."""
    if type(value) is float:
        return "-Inf" if value == -math.inf else value
    if isinstance(value, Mapping):
        return {k: _signed_infinities(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_signed_infinities(v) for v in value]
    return value


def altered_by_config_yaml(config: Mapping[str, Any]) -> list[str]:
    """The keys of ``config`` whose entry SwanLab's ``config.yaml`` reads back otherwise: each
    is dumped as SwanLab dumps it (``yaml.safe_dump``, Unicode kept, block style, the value one
    level down) and read back."""
    import yaml  # SwanLab's own dependency, which writes the file

    altered = []
    for key, value in config.items():
        entry = {key: {"value": value}}
        try:
            back = yaml.safe_load(
                yaml.safe_dump(entry, allow_unicode=True, default_flow_style=False)
            )
        except Exception:  # SwanLab's own conversion decides what such a value becomes
            continue
        if not _same_text(back, entry):
            altered.append(str(key))
    return altered


def _same_text(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (a float YAML keeps as it is)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_text(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_text(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return type(a) is type(b) and a == b
