"""The W&B backend: each logged dict becomes one W&B history row with its own axis value."""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import wandb

from rlmetrics import describe_value, resets_process_state, warn_once
from rlmetrics.backends import (
    BackendUnavailable,
    RoomCheck,
    SharedRuns,
    as_step,
    first_line,
    full_key,
    merged_config,
    storable_text,
)
from rlmetrics.events import STEP_KEY, WALL_TIME_KEY
from rlmetrics.identity import RunIdentity, tracker_init_kwargs, with_tracker_setting
from rlmetrics.samples import columns_of

from .axes import StepAxes
from .values import SKIP, WideInt, config_value, to_wandb

__all__ = ["MIN_FREE_BYTES", "REFUSED_ID_CHARACTERS", "ROW_FIELDS", "WandbBackend"]

#: The free space an offline run's disk must have for the backend to hand W&B another row:
#: room for what W&B's own process still holds (it writes the run's transaction log later, and
#: says a write the disk refuses only in its debug-internal.log, the row lost).
MIN_FREE_BYTES = 1 << 20
#: What W&B refuses in a run id.
REFUSED_ID_CHARACTERS = "/\\#?%:"
#: The fields W&B writes into every history row itself: a logged key of one of these names
#: is logged as ``_`` plus its name (``__step``), said once.
ROW_FIELDS = frozenset({"_step", "_runtime", "_timestamp"})

# Every backend that started a W&B run of its own, held weakly: see _finish_leftover_runs.
_started: weakref.WeakSet[WandbBackend] = weakref.WeakSet()
#: The W&B runs this process's backends log into: one they started is finished by the last.
_RUNS = SharedRuns()


@resets_process_state
def _finish_leftover_runs() -> None:
    """Finish the W&B runs backends started and nobody finished (a Logger never finished, a
    finish that ran out of time). W&B keeps one active run per process and its default reinit
    policy hands it to the next ``wandb.init``: the next test's backend would log into an
    earlier test's run."""
    for backend in list(_started):
        backend._finished = True
        try:
            backend.run.finish()
        except Exception:
            warn_once("wandb:reset", "rlmetrics-wandb: finishing a leftover W&B run failed")
    _started.clear()
    _RUNS.forget()


def _init_timeout(settings: Any) -> float:
    """The ``init_timeout`` a ``wandb.init`` given ``settings`` waits: theirs (a
    ``wandb.Settings`` holds W&B's default when not set), else W&B's."""
    if isinstance(settings, Mapping):
        given = settings.get("init_timeout")
    else:
        given = getattr(settings, "init_timeout", None)
    return float(wandb.Settings().init_timeout if given is None else given)


def _server() -> str:
    """The W&B server a run starts against: ``WANDB_BASE_URL``, else W&B's default."""
    return os.environ.get("WANDB_BASE_URL") or str(wandb.Settings().base_url)


def _not_a_row_field(name: str) -> str:
    """``name``, or ``_<name>`` for one of W&B's own :data:`ROW_FIELDS`, which W&B would write
    over (``_step``, ``_runtime``) or which would write over W&B's row time (``_timestamp``)."""
    if name not in ROW_FIELDS:
        return name
    warn_once(
        "wandb:row-field",
        f"rlmetrics-wandb: {name!r} is a field W&B writes into every history row itself; "
        f"it is logged as {'_' + name!r} (the JSONL backend has it as logged)",
    )
    return "_" + name


def _wide_int(text: WideInt, name: str) -> str:
    """An int past int64 as its text, said once."""
    warn_once(
        "wandb:wide-int",
        f"rlmetrics-wandb: {name!r} is an int past int64, which W&B's history would store as "
        "a double, rounded; it is logged as its text (later ones too; the JSONL backend has "
        "them as ints)",
    )
    return str(text)


class WandbBackend:
    """Logs to a W&B run it starts with ``wandb.init`` (or to a run you pass in).

    :param project, entity, name, tags, mode, dir, group, notes, config: passed to
        ``wandb.init`` when set (``mode`` defaults to ``WANDB_MODE``, else W&B's default).
    :param init_kwargs: any other ``wandb.init`` arguments (``settings``, ``id``, ``resume``,
        ``job_type``…); they win over the named ones.
    :param run: an already started ``wandb.Run`` to log into instead. The backend binds its
        axes on it but never finishes it: its owner does.
    :param identity: the run (given by the Logger): its id is the W&B run id (characters W&B
        refuses become ``-`` plus a hash), and a resumed run passes ``resume="allow"``, so a
        restarted job continues its W&B run. ``init_kwargs`` ``id`` and ``resume`` win.
    :param connect_timeout_s: how long starting the run may take against W&B's server: W&B's
        own ``init_timeout`` (90 s unless set; a ``settings`` in ``init_kwargs`` that sets it
        wins).

    A run W&B does not start — its server did not answer in time or refused the API key, no
    API key in a job without a terminal, an argument W&B refuses — raises
    :class:`~rlmetrics.backends.BackendUnavailable` with W&B's reason: the Logger skips the
    backend in one line and goes on with the others.
    """

    def __init__(
        self,
        project: str | None = None,
        entity: str | None = None,
        name: str | None = None,
        tags: Sequence[str] | None = None,
        mode: str | None = None,
        dir: str | os.PathLike[str] | None = None,
        group: str | None = None,
        notes: str | None = None,
        config: Mapping[str, Any] | None = None,
        init_kwargs: Mapping[str, Any] | None = None,
        run: Any = None,
        identity: RunIdentity | None = None,
        connect_timeout_s: float | None = None,
    ) -> None:
        self._finished = False
        if run is not None:
            self.run = run
            self._owns_run = False
            _RUNS.join(run, started=False)
        else:
            named: dict[str, Any] = {
                "project": project,
                "entity": entity,
                "name": name,
                "tags": list(tags) if tags is not None else None,
                "mode": mode,
                "dir": os.fspath(dir) if dir is not None else None,
                "group": group,
                "notes": notes,
                "config": dict(config) if config is not None else None,
            }
            # (wandb.init warns and falls back to a temp dir when dir is missing.)
            kwargs = tracker_init_kwargs(
                named, identity, REFUSED_ID_CHARACTERS, init_kwargs, folder="dir"
            )
            if connect_timeout_s is not None:
                kwargs["settings"] = with_tracker_setting(
                    kwargs.get("settings"), "init_timeout", connect_timeout_s
                )
            previous = wandb.run
            try:
                self.run = wandb.init(**kwargs)
            except wandb.errors.CommError as exc:
                # W&B's server did not answer within init_timeout, or refused (an API key it
                # does not know): a condition of the world, one line, not a plugin's bug.
                raise BackendUnavailable(
                    f"W&B could not start the run at {_server()} within "
                    f"{_init_timeout(kwargs.get('settings')):.1f} s (the backend's "
                    f"connect_timeout_s; W&B said: {first_line(exc)})"
                ) from exc
            except wandb.errors.UsageError as exc:
                # No API key in a job without a terminal (no `wandb login`), an argument W&B
                # refuses: W&B's message says what to change, in one line.
                raise BackendUnavailable(
                    f"W&B refused to start the run: {first_line(exc)}"
                ) from exc
            except Exception as exc:
                shown = {k: v for k, v in kwargs.items() if k != "config"}
                raise RuntimeError(f"rlmetrics-wandb: wandb.init({shown}) failed: {exc}") from exc
            # With W&B's default reinit policy, init returns the script's own active run:
            # log into it, but leave finishing it to the script.
            self._owns_run = self.run is not previous
            if self._owns_run:
                _started.add(self)
            # Another Logger's run (W&B has one active run): the last backend finishes it.
            _RUNS.join(self.run, started=self._owns_run)
        self.axes = StepAxes(self.run.define_metric)
        #: Whether W&B can write more of this offline run (its folder deleted, its disk full).
        self._room = RoomCheck(
            "W&B",
            MIN_FREE_BYTES,
            "W&B would lose the rows without a word (in its debug-internal.log only), so this "
            "backend hands it nothing more in this run (the other backends go on)",
        )

    def _check_writable(self) -> None:
        """Raise :class:`BackendUnavailable` if an offline run could not take another row:
        its folder was deleted, or its disk is (nearly) full; from then on at once, every time.
        (An online run's rows go to W&B's server as well, so they are handed over.)"""
        self._room.check(self.run_dir if self.run.offline else None)

    @property
    def run_dir(self) -> Path:
        """The run's local directory (holds ``run-<id>.wandb``, the transaction log)."""
        return Path(self.run.dir).parent

    @property
    def transaction_log(self) -> Path:
        """``run-<id>.wandb``: readable with ``wandb leet inspect --json``, syncable offline."""
        return self.run_dir / f"run-{self.run.id}.wandb"

    def log_metrics(self, metrics: Mapping[str, Any], step: int, prefix: str) -> None:
        self._check_writable()
        row: dict[str, Any] = {}
        for key, value in metrics.items():
            converted = to_wandb(value)
            if converted is not SKIP:
                name = _not_a_row_field(storable_text(full_key(prefix, key)))
                if type(converted) is WideInt:
                    converted = _wide_int(converted, name)
                elif type(converted) is str:
                    converted = storable_text(converted)  # W&B's JSON would make it U+FFFD
                row[name] = converted
        if not row:
            return
        if WALL_TIME_KEY in row:
            axis = WALL_TIME_KEY  # an event stream on wall-clock time, not the trainer step
        else:
            axis = STEP_KEY
            number = as_step(step)
            if number is not None:
                row[STEP_KEY] = number
            else:
                # W&B's step_sync fills in the last rlmetrics/step it saw (checked in tests).
                warn_once(
                    "wandb:bad-step",
                    f"rlmetrics-wandb: a step ({describe_value(step)}) is not a number; rows "
                    "without one are "
                    "plotted at the previous rlmetrics/step",
                )
        self.axes.bind(row, axis)
        # Never step=: W&B drops a row whose step is below its last one, and trainer steps
        # repeat or go back (resume, eval loops). The axis value in the row is the x instead.
        self.run.log(row)

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """The configuration, nested as logged, into the run's config (a later value of a key
        replaces the earlier one, as a resumed run's may; a nested section gets new keys). A
        number W&B would round (an int past ±2⁵³, NaN, an infinity) is given as its text,
        said once."""
        self._check_writable()
        texts: list[str] = []
        config = {key: config_value(value, texts, key) for key, value in params.items()}
        if texts:
            warn_once(
                "wandb:config-text",
                f"rlmetrics-wandb: {len(texts)} hyperparameter(s), first {texts[0]!r}, are "
                "numbers W&B's config would round (an int past 2**53, NaN or an infinity); "
                "they are logged as their text",
            )
        # W&B's update replaces a top-level key whole: a section gets the keys it had too.
        self.run.config.update(merged_config(self.run.config, config), allow_val_change=True)

    def log_samples(self, rows: Sequence[Mapping[str, Any]], step: int, name: str) -> None:
        """The rows as a ``wandb.Table`` under ``name``, in a history row at ``rlmetrics/step``
        (a table per call: W&B shows each step's table, and the latest by default)."""
        self._check_writable()
        columns = columns_of(rows)
        # Mixed types in a column (a judge's score, then its "n/a") are one table, not a
        # TypeError that loses every row.
        table = wandb.Table(
            columns=columns,
            data=[[row.get(c) for c in columns] for row in rows],
            allow_mixed_types=True,
        )
        row: dict[str, Any] = {name: table}
        number = as_step(step)
        if number is not None:
            row[STEP_KEY] = number
        self.axes.bind([name], STEP_KEY)
        self.run.log(row)

    def finish(self, failed: bool = False) -> None:
        """Finish the run (flushing it), once, if a backend of this process started it and
        no other still logs into it (another Logger's); a run passed in is left to its owner.
        ``failed`` (the run ended with an exception): exit code 1, W&B's failed run."""
        if self._finished:
            return
        self._finished = True
        _started.discard(self)
        if _RUNS.leave(self.run):
            self.run.finish(exit_code=1 if failed else None)
