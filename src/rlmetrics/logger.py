"""Logger: the one object a training loop talks to.

Each logged dict is flattened, written by every configured backend first, then handed to the
plugins: to a typed hook where the routing table (:mod:`rlmetrics.routing`) recognises it, and
always to ``log_metrics``. Every backend and every plugin runs in its own guard, so one failing
tracker never costs the others a step, and nothing raises into the training loop.
"""

from __future__ import annotations

import inspect
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from . import _waiting, routing, stall_watch
from ._fork import forget_in_child
from ._warn import (
    StrictModeError,
    describe_value,
    hold_strict,
    not_our_exception,
    raise_if_strict,
    release_strict,
    warn_once,
)
from .backends import Backend, BackendFactory, BackendUnavailable, available_backends
from .backends import worker as _worker
from .backends.worker import (
    DEFAULT_EXIT_TIMEOUT_S,
    DEFAULT_QUEUE_SIZE,
    BackendWorker,
    InlineBackend,
    is_inline,
    snapshot,
)
from .configuration import (
    CALL,
    DEFAULT,
    LOGGER_SETTINGS,
    UNKNOWN_KEYS_MODES,
    ConfigurationError,
    check_call,
    check_configured_options,
    check_names,
    choose,
    configured,
    from_source,
    in_any_case,
    named_choice,
    resolve,
    suggest,
)
from .events import (
    SETUP_TIMING_PREFIX,
    TRAIN_PREFIXES,
    Alert,
    EfficiencySummary,
    RolloutEvent,
    not_a_payload,
)
from .flatten import MAX_FLAT_KEYS, flatten, key_text
from .hooks import Hooks
from .hyperparams import to_hyperparams
from .identity import RESUME_ID_SOURCES, RunIdentity, launcher_run_id, new_run_id
from .instruments import logged_keys
from .keymaps import KeyMap, KeyMapper, available_key_maps, resolve_key_map
from .known_keys import KeyChecker
from .plugins import check_plugin_lists, get_plugins, hooks
from .ranks import EFFICIENCY_STREAM, Ranks, resolve_ranks
from .redaction import redaction
from .registry import default_registry
from .samples import MAX_CELL_BYTES, MAX_SAMPLE_ROWS, to_samples
from .telemetry import current
from .tracing import close_open_scopes, current_step
from .values import INT64_MAX, as_step
from .variables import warn_unknown_variables

__all__ = [
    "DEFAULT_EXIT_TIMEOUT_S",
    "DEFAULT_FINISH_TIMEOUT_S",
    "MAX_FLAT_KEYS",
    "TRAIN_PREFIXES",
    "Logger",
    "flatten",
]

#: How long ``Logger.finish()`` waits for queued backends to write what they hold.
DEFAULT_FINISH_TIMEOUT_S = 30.0

#: Each ``Logger()`` argument configuration can give, and its default (None: decided later).
SETTING_DEFAULTS: dict[str, Any] = {
    "queue_size": DEFAULT_QUEUE_SIZE,
    "finish_timeout_s": DEFAULT_FINISH_TIMEOUT_S,
    "exit_timeout_s": DEFAULT_EXIT_TIMEOUT_S,
    "key_map": None,
    "run_id": None,
    "resume": None,
    "max_sample_rows": MAX_SAMPLE_ROWS,
    "max_cell_bytes": MAX_CELL_BYTES,
    "strict": False,
    "redact": None,
    "unknown_keys": "ignore",
}


class _TeedKeys:
    """The keys a declared series reads, directly or through the Logger's key map: they
    survive a cut past the flatten cap (built only when a dict passes it)."""

    def __init__(self, key_map: KeyMapper | None) -> None:
        self._declared = {item.spec.key for item in default_registry().declared()}
        self._key_map = key_map

    def __contains__(self, key: object) -> bool:
        if key in self._declared:
            return True
        return (
            type(key) is str
            and self._key_map is not None
            and self._key_map.key_map.rule_for(key) is not None
        )


class Logger:
    """Fan a training loop's metrics out to backends and to the telemetry plugins.

    ``backends`` maps a backend name to its config (``{"jsonl": {"path": "m.jsonl"}}``), or
    names backends to start with their defaults (``"jsonl"``, ``["jsonl", "wandb"]``, as
    ``start(exporters=...)`` names exporters); None means the backends configured without
    code (``RLMETRICS_BACKENDS``, the configuration file's ``[backends.<name>]`` tables; their
    options also reach the backends a call names), else the JSONL backend with its default
    path. An unknown name or option is a configuration mistake and raises here, naming the
    valid ones; a backend that fails to start (no credentials, store gone) is skipped with a
    warning and the others run. Every
    other argument the call gives wins; one it leaves out (None) takes its variable's value
    (``RLMETRICS_KEY_MAP``, ``RLMETRICS_STRICT``), else the configuration file's ``[logger]``
    value, else its default (docs/configuration.md).

    Every backend but the inline ones (JSONL, console) writes on a thread of its own behind a
    queue of ``queue_size`` rows (:mod:`rlmetrics.backends.worker`), so a stalled tracker
    costs its own rows, never the loop's time; ``finish()`` waits at most
    ``finish_timeout_s`` for them. A Logger never finished is finished when the interpreter
    exits, waiting at most ``exit_timeout_s`` for them (:mod:`rlmetrics.backends.worker`).

    ``key_map`` (a name such as ``"trl"``, or a :class:`~rlmetrics.keymaps.KeyMap`) says
    which key a trainer logs is which declared series: the backends still get the trainer's
    keys, the plugins (the OpenTelemetry tee) the map's (:mod:`rlmetrics.keymaps`). An
    unknown name raises here.

    ``run_id`` names the run in every backend (each JSONL row, the W&B run id, the MLflow
    run's tag, the TensorBoard folder); by default it is the running telemetry's run id (the
    OTel resource's ``rlmetrics.run.id``), else the launcher's
    (:func:`~rlmetrics.identity.launcher_run_id`), else a generated one.
    ``resume=True`` continues that run in every backend (default: what
    ``rlmetrics.start(resume=...)`` said, else False). A ``run_id`` other than the running
    telemetry's is a mistake and raises here.

    ``log_samples`` keeps at most ``max_sample_rows`` rows per call and ``max_cell_bytes``
    bytes of text per cell (:mod:`rlmetrics.samples`).

    ``redact`` says which hyperparameters and sample columns are secrets, logged as
    ``"<redacted>"`` (:mod:`rlmetrics.redaction`): True (default) the documented rule (keys
    like ``hub_token``, ``wandb_api_key``, ``password``), a list of names or glob patterns
    that rule plus those, False nothing.

    ``strict=True`` (or ``RLMETRICS_STRICT=1``) turns strict mode on until ``finish()``: a
    warning that something asked for is not happening — a backend that did not start, a
    value not exported, a row a tracker did not write — raises
    :class:`~rlmetrics.StrictModeError` from this Logger's next call, once that call has done
    its work (docs/configuration.md, "Strict mode"). For CI and first runs; a run you care
    about should degrade, not stop.

    ``unknown_keys`` is an opt-in for typos (:mod:`rlmetrics.known_keys`): a logged key that
    no declared series, no rule of the key map and no documented list knows (``kl_penalti``,
    a prefix ``trian``) is said once per key with the nearest known one under ``"warn"``, and
    under ``"error"`` too, where strict mode raises :class:`~rlmetrics.StrictModeError`
    naming it (outside strict mode ``"error"`` warns: the loop is never raised into).
    ``"ignore"`` (default) checks nothing. Decided once per key sequence; the key still
    reaches every backend.

    ``ranks`` merges what every rank of a distributed run logs into one row per step:
    ``"torch"``, an installed engine's name (``"ray"`` with rlmetrics-ray) or a merger
    (:func:`rlmetrics.ranks.torch_distributed`); rank 0 (on Ray, the driver) writes the run's
    values to the backends and the tee, every rank its raw values to a file of its own
    (docs/ranks.md).
    """

    def __init__(
        self,
        backends: Mapping[str, Mapping[str, Any] | None] | Iterable[str] | str | None = None,
        *,
        queue_size: int | None = None,
        finish_timeout_s: float | None = None,
        exit_timeout_s: float | None = None,
        key_map: str | KeyMap | None = None,
        run_id: str | None = None,
        resume: bool | None = None,
        max_sample_rows: int | None = None,
        max_cell_bytes: int | None = None,
        strict: bool | None = None,
        ranks: str | Ranks | None = None,
        redact: bool | Sequence[str] | None = None,
        unknown_keys: str | None = None,
    ) -> None:
        # A number the file would refuse is refused from the call too, before anything starts
        # (queue_size=0 is an unbounded queue; "5" fails a comparison later), and so is a
        # switch given as text (strict="false" is a true value: it turned strict mode on).
        check_call(
            "Logger()",
            {
                "queue_size": queue_size,
                "finish_timeout_s": finish_timeout_s,
                "exit_timeout_s": exit_timeout_s,
                "max_sample_rows": max_sample_rows,
                "max_cell_bytes": max_cell_bytes,
                "strict": strict,
                "resume": resume,
            },
            LOGGER_SETTINGS,
        )
        # An argument the call gives wins; one it leaves out (None) takes the environment's
        # value, else the configuration file's [logger] one, else the default.
        # (A bad RLMETRICS_STRICT is a mistake: configured() raises it before anything starts.)
        #: Each setting as ``(value, source)``: ``"the call"``, the variable or file setting
        #: that gave it, or ``"default"`` (docs/configuration.md).
        found = configured()
        self.settings = resolve(
            _with_the_runs_identity(found.logger, found.telemetry),
            {
                "queue_size": queue_size,
                "finish_timeout_s": finish_timeout_s,
                "exit_timeout_s": exit_timeout_s,
                "key_map": key_map,
                "run_id": run_id,
                "resume": resume,
                "max_sample_rows": max_sample_rows,
                "max_cell_bytes": max_cell_bytes,
                "strict": strict,
                "redact": redact,
                "unknown_keys": unknown_keys,
            },
            SETTING_DEFAULTS,
        )
        # RLMETRICS_KEY_MAP=TRL names the trl map, as RLMETRICS_UNKNOWN_KEYS=WARN is warn.
        self.settings["key_map"] = in_any_case(self.settings["key_map"], available_key_maps)
        value = {name: found[0] for name, found in self.settings.items()}
        # The settings that can be mistakes are checked before strict mode is held: a Logger
        # that raises here leaves nothing held.
        self._unknown_mode = _unknown_keys_mode(
            value["unknown_keys"], _configured_source(self.settings, "unknown_keys")
        )
        # Secrets a config or a sample carries (rlmetrics.redaction): a bad setting raises now.
        try:
            self._redact = redaction(value["redact"])
        except ValueError as exc:  # a configuration mistake, as every other one is
            source = from_source(_configured_source(self.settings, "redact"))
            raise ConfigurationError(f"Logger(): {exc}{source}") from None
        # Many ranks, one run: the merger is built first (a missing process group is a
        # mistake to raise now) and opens this rank's raw file once the run is known.
        self._ranks = resolve_ranks(ranks)
        self._strict = bool(value["strict"])
        # Strict mode held on, or (an explicit strict=False) off against RLMETRICS_STRICT.
        self._strict_hold = True if self._strict else (False if strict is False else None)
        if self._strict_hold is not None:
            hold_strict(self._strict_hold)
        try:
            self._start(
                backends,
                value["queue_size"],
                value["finish_timeout_s"],
                value["exit_timeout_s"],
                value["key_map"],
                _configured_source(self.settings, "key_map"),
                _configured_source(self.settings, "run_id")
                or _configured_source(self.settings, "resume"),
                value["run_id"],
                value["resume"],
                value["max_sample_rows"],
                value["max_cell_bytes"],
            )
        except BaseException:
            self._release_strict()
            raise
        try:
            raise_if_strict()  # a backend that did not start, a plugin that did not load
        except StrictModeError:
            self._finish(None)
            self._release_strict()
            raise

    def _release_strict(self) -> None:
        """Give back what this Logger held of strict mode (once)."""
        if self._strict_hold is not None:
            release_strict(self._strict_hold)
            self._strict_hold = None

    def _start(
        self,
        backends: Mapping[str, Mapping[str, Any] | None] | Iterable[str] | str | None,
        queue_size: int,
        finish_timeout_s: float,
        exit_timeout_s: float,
        key_map: str | KeyMap | None,
        key_map_source: str | None,
        identity_source: str | None,
        run_id: str | None,
        resume: bool | None,
        max_sample_rows: int,
        max_cell_bytes: int,
    ) -> None:
        if max_sample_rows < 1 or max_cell_bytes < 1:
            raise ConfigurationError(
                f"max_sample_rows and max_cell_bytes must be positive, got {max_sample_rows} "
                f"and {max_cell_bytes}"
            )
        try:
            self.identity = _identity(run_id, resume)
        except ValueError as exc:
            raise ConfigurationError(f"{exc}{from_source(identity_source)}") from None
        self.max_sample_rows = max_sample_rows
        self.max_cell_bytes = max_cell_bytes
        try:
            self._key_map = None if key_map is None else KeyMapper(resolve_key_map(key_map))
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"{exc}{from_source(key_map_source)}") from None
        # The keys nothing knows, decided per key sequence (built only when asked for).
        self._unknown = (
            None
            if self._unknown_mode == "ignore"
            else KeyChecker(None if self._key_map is None else self._key_map.key_map)
        )
        self._plugins_loaded = False
        check_plugin_lists()  # a misspelled plugin name would load or deny nothing in silence
        factories = available_backends()
        warn_unknown_variables(get_plugins())  # a misspelt RLMETRICS_* variable does nothing
        # The call's backends, else RLMETRICS_BACKENDS, else the file's, else JSONL; each with
        # the options the environment and the file give it under the call's own.
        given = named_choice("backend", "Logger", backends)
        found = configured(backend_names=factories, backends_chosen=given or ())
        chosen, sources = choose("backend", given, found.backends)
        config = {"jsonl": {}} if chosen is None else chosen
        check_names(
            "backend",
            config,
            factories,
            None if backends is not None else found.backends_source,
            "A backend comes from a plugin's register_backends hook: install its distribution "
            "(for example rlmetrics-wandb) or check RLMETRICS_PLUGINS / "
            "RLMETRICS_DISABLE_PLUGINS",
        )
        # Every backend's options are checked before any backend starts: a misspelled option
        # is a mistake to fix now, not a backend skipped with a warning.
        checked = {
            name: check_configured_options(
                "backend", name, factories[name][1], options, sources.get(name, {}), ("identity",)
            )
            for name, options in config.items()
        }
        if self._ranks is not None and not self._ranks.logs:
            # A rank that does not log the run's rows opens no tracker (no file, no W&B run
            # per rank); its backends were checked above, so a mistake fails on every rank.
            checked = {}
        self.backends: dict[str, Backend] = {}
        for name, options in checked.items():
            owner, factory = factories[name]
            try:
                self.backends[name] = _build(factory, options, self.identity, name)
            except Exception as exc:
                # A condition of the world (a path that cannot be written) is one line that
                # says what to change; anything else is a plugin's bug, with its traceback.
                expected = isinstance(exc, (BackendUnavailable, OSError, _Shape))
                # Keyed by the run and the reason too: each run says which tracker it goes
                # without (a notebook's next cell, a sweep's next trial), and a new reason is
                # said; the same one for the same run is said once.
                warn_once(
                    f"backend-start:{self.identity.run_id}:{name}:{_reason(exc)}",
                    f"rlmetrics: backend {name!r} (from plugin {owner!r}) failed to start and is "
                    + (f"skipped: {exc}. The" if expected else "skipped; the")
                    + " other backends and telemetry still get every step",
                    expected=expected,
                )
        self.finish_timeout_s = finish_timeout_s
        self.exit_timeout_s = exit_timeout_s
        # Inline backends are called under the lock on the caller's thread; the others are
        # handed to their worker, which queues without blocking.
        self._inline = {n: InlineBackend(n, b) for n, b in self.backends.items() if is_inline(b)}
        self._workers = {
            n: BackendWorker(n, b, queue_size)
            for n, b in self.backends.items()
            if n not in self._inline
        }
        for worker in self._workers.values():
            worker.exit_timeout_s = exit_timeout_s
        # Reentrant: a signal's handler runs on the thread it interrupts, and one that calls
        # finish() (a SIGTERM handler) while that thread is inside log_metrics, holding the
        # lock, would otherwise wait for it for ever.
        self._lock = threading.RLock()
        self._samples: dict[str, int] = {}
        #: The last trainer step logged (given or continued): a call without one takes the next.
        self._last_step = -1
        self._finished = False
        if self._ranks is not None:
            # The ranks agree on the run's id as they bind: a rank whose id was not given
            # takes rank 0's (it has no backends of its own: only its raw rows carry it).
            agreed = self._ranks.bind(self.identity, self)
            if isinstance(agreed, RunIdentity):
                self.identity = agreed
        self._pid = os.getpid()
        _unfinished.add(self)
        forget_in_child(self)
        if self._takes_alerts():
            stall_watch.listener_appeared()  # the first listener starts the stall watch

    def _takes_alerts(self) -> bool:
        return any(callable(getattr(b, "log_alert", None)) for b in self.backends.values())

    def _drain_ranks(self, timeout_s: float) -> None:
        try:
            self._ranks.drain(timeout_s)  # type: ignore[union-attr]
        except Exception:
            warn_once("logger:ranks-drain", "rlmetrics: the ranks' last rows were not delivered")

    def _after_fork_in_child(self) -> None:
        # Another thread may have held the lock when the process forked; the child has no
        # such thread. (Queued backends drop what a child logs: their threads stayed behind.)
        self._lock = threading.RLock()

    # -- the training loop's calls --------------------------------------------------------

    def log_metrics(
        self,
        metrics: Mapping[str, Any],
        step: int | None = None,
        prefix: str = "",
        step_metric: str | None = None,
        step_finished: bool = False,
    ) -> None:
        """Log one dict under ``prefix`` at trainer ``step``. Never raises.

        ``step`` is an integer from 0 (a NumPy or torch integer counts). Without one the dict
        lands at the step of the ``rlmetrics.step`` scope it is logged in, else at the step
        after the last this Logger logged, as ``wandb.log`` does (the first is 0); a step that
        is not an integer is said once and treated as missing, so the row still lands.

        ``step_metric`` and ``step_finished`` are NeMo-RL's ``LoggerInterface`` arguments,
        accepted so this Logger is a drop-in for NeMo-RL's: every backend keeps each key (the
        step metric's too) and puts the row at ``step``.
        """
        try:
            step = self._next_step(step)
            flat = flatten(metrics, teed=self._teed_keys)
            prefix = key_text(prefix) if prefix else ""
            if self._unknown is not None:
                self._say_unknown(prefix, flat)
            if self._ranks is not None:
                own, flat = flat, self._ranks.merge(flat, step, prefix)  # type: ignore[assignment]
                if self._ranks.export_own:
                    # Every rank tees its own values, the logging one's too: the recording
                    # rules merge the ranks' series by run id (the run's row beside them
                    # would count the others twice). Only the trackers get the run's row.
                    plugins = hooks()
                    for part_prefix, part, logged in _by_prefix(own, prefix):
                        if self._key_map is not None:
                            part = self._key_map.tee(part, part_prefix)
                        logged_keys.pairs = logged  # a value dropped is said as logged
                        try:
                            plugins.log_metrics(part, step, part_prefix)
                        finally:
                            logged_keys.pairs = ()
                    if flat is not None:
                        self._to_backends(flat, step, prefix)
                    return
                if flat is None:  # not the logging rank, or a row the ranks' thread
                    # delivers once merged (_log_merged_row)
                    return
            plugins = hooks()
            # {"train/reward": r} logged without a prefix: the plugins read it as prefix="train"
            # has them read {"reward": r}; the backends get the keys as logged.
            by_prefix = None if prefix else routing.by_prefix(tuple(flat))
            if by_prefix is not None:
                self._to_backends(flat, step, prefix)
                for part_prefix, part, logged in routing.split(flat, by_prefix):
                    self._to_plugins(plugins, part, step, part_prefix, logged)
            else:
                hooks_keys = self._key_map is None  # the hooks get flat's keys, not a key map's
                taken = routing.take(prefix, flat, plugins.wanted, hooks_keys)
                # The backends get the trainer's keys; the plugins the key map's (a new dict).
                tee = flat if hooks_keys else self._key_map.tee(flat, prefix)  # type: ignore[union-attr]
                # What _to_plugins does, written out: the call a loop makes every step.
                self._to_backends(flat, step, prefix)
                if taken:
                    routing.deliver(taken, plugins, prefix, tee, step, hooks_keys)
                plugins.log_metrics(tee, step, prefix)
        except Exception:
            warn_once("logger:log_metrics", "rlmetrics: Logger.log_metrics failed; step dropped")
        raise_if_strict()

    def _to_plugins(
        self,
        plugins: Hooks,
        flat: dict[str, Any],
        step: int,
        prefix: str,
        logged: tuple[tuple[str, str], ...] = (),
    ) -> None:
        """A dict's typed hooks and ``log_metrics`` (with the key map's keys when there is
        one), for a dict the backends already got (or that a route does not stamp); ``logged``
        its keys as logged when they carried ``prefix`` (:func:`rlmetrics.routing.split`)."""
        hooks_keys = self._key_map is None
        taken = routing.take(prefix, flat, plugins.wanted, hooks_keys)
        tee = flat if hooks_keys else self._key_map.tee(flat, prefix)  # type: ignore[union-attr]
        logged_keys.pairs = logged  # a value dropped is said by the key as logged
        try:
            if taken:
                routing.deliver(taken, plugins, prefix, tee, step, hooks_keys)
            plugins.log_metrics(tee, step, prefix)
        finally:
            logged_keys.pairs = ()

    def _log_merged_row(
        self, flat: dict[str, Any], step: int, prefix: str, stream: str | None
    ) -> None:
        """The run's row of a step a ranks engine merged off the loop's thread (rank 0's
        torch.distributed merger, in step order): delivered as ``log_metrics`` (or, for the
        efficiency summary's stream, ``log_efficiency_summary``) delivers a merged row, the
        backends under this Logger's lock. Never raises."""
        try:
            if getattr(self._ranks, "export_own", False):  # the tee had this rank's own values
                self._to_backends(flat, step, prefix)
                return
            if stream == EFFICIENCY_STREAM:
                summary = EfficiencySummary.from_metrics(flat)
                self._log(
                    flat, step, "", lambda plugins: plugins.on_efficiency_summary(summary, step)
                )
                return
            if not prefix and routing.by_prefix(tuple(flat)) is not None:
                self._to_backends(flat, step, prefix)  # keys that carry their prefix
                plugins = hooks()
                for part_prefix, part, logged in _by_prefix(flat, prefix):
                    self._to_plugins(plugins, part, step, part_prefix, logged)
                return
            taken = routing.take(prefix, flat, hooks().wanted)
            tee = flat if self._key_map is None else self._key_map.tee(flat, prefix)
            self._log(
                flat,
                step,
                prefix,
                lambda plugins: routing.deliver(taken, plugins, prefix, tee, step),
                tee=tee,
            )
        except Exception:
            warn_once("logger:ranks-row", "rlmetrics: a merged row of the ranks was dropped")

    def log_setup_timing(self, timings: Mapping[str, Any]) -> None:
        """Startup phase durations (``<phase>_time_s``), logged once at step 0."""
        self.log_metrics(timings, step=0, prefix=SETUP_TIMING_PREFIX)

    def log_efficiency_summary(self, summary: EfficiencySummary, step: int = 0) -> None:
        """One step's efficiency accounting, typed; backends get its ``efficiency/*`` dict."""
        if not_a_payload(summary, EfficiencySummary, "log_efficiency_summary"):
            return raise_if_strict()
        try:
            metrics = summary.to_metrics()
            step = self._table_step(step, "log_efficiency_summary")
            if self._ranks is not None:
                merged = self._ranks.merge(metrics, step, "", stream=EFFICIENCY_STREAM)
                if self._ranks.export_own:  # this rank's own to the tee, as log_metrics
                    hooks().on_efficiency_summary(summary, step)
                    if merged is not None:
                        self._to_backends(merged, step, "")
                    return
                if merged is None:
                    return
                metrics, summary = merged, EfficiencySummary.from_metrics(merged)
            self._log(
                metrics,
                step,
                "",
                lambda plugins: plugins.on_efficiency_summary(summary, step),
            )
        except Exception:
            warn_once("logger:efficiency", "rlmetrics: Logger.log_efficiency_summary failed")
        raise_if_strict()

    def log_rollout_checkpoint(self, event: RolloutEvent) -> None:
        """One rollout-checkpoint event; backends get it under its prefix with its wall time.

        The backends' step is the stream's own sample index, not the trainer step.
        """
        if not_a_payload(event, RolloutEvent, "log_rollout_checkpoint"):
            return raise_if_strict()
        try:
            metrics, sample = event.to_metrics(), self._next_sample(event.prefix)
            if self._ranks is not None and not self._ranks.logs:
                # Not merged (each rank's stream is its own), and no tracker on this rank:
                # the rank's raw file keeps it, as it keeps the rank's merged dicts.
                keep = getattr(self._ranks, "log_unmerged", None)
                if keep is not None:
                    keep(metrics, sample, event.prefix)
            self._log(
                metrics,
                sample,
                event.prefix,
                lambda plugins: plugins.on_rollout_checkpoint(event),
            )
        except Exception:
            warn_once("logger:rollout", "rlmetrics: Logger.log_rollout_checkpoint failed")
        raise_if_strict()

    def log_hyperparams(self, config: Any) -> None:
        """The run's configuration, to every backend that keeps one (W&B config, MLflow
        params, TensorBoard hparams, SwanLab config, a JSONL row; any backend with a
        ``log_hyperparams`` method). ``config`` is a dict, a dataclass, an attrs class, an
        OmegaConf config, a pydantic model or a namespace, nested in any mix; it is converted
        to plain values now (:func:`rlmetrics.hyperparams.to_hyperparams`). Never raises."""
        try:
            params = to_hyperparams(config, self._redact)
            if params and self._ranks is not None and not self._ranks.logs:
                # No tracker on a rank that writes no run rows: its raw file keeps it.
                keep = getattr(self._ranks, "log_hyperparams", None)
                if keep is not None:
                    keep(params)
            if params:
                self._call_backends("log_hyperparams", params)
        except Exception:
            warn_once("logger:hyperparams", "rlmetrics: Logger.log_hyperparams failed")
        raise_if_strict()

    def log_samples(self, rows: Any, step: int, name: str = "samples") -> None:
        """A few samples of the run (``[{"prompt": ..., "completion": ..., "reward": ...,
        <any other column>: ...}, ...]``) as the table ``name`` at ``step``: a W&B Table, an
        MLflow table artifact, TensorBoard text, SwanLab text and rows of the JSONL's samples
        file. Rows are bounded (``max_sample_rows``, ``max_cell_bytes``) and converted to plain
        values now; queued backends write them on their own threads. Never raises."""
        try:
            table = to_samples(rows, self.max_sample_rows, self.max_cell_bytes, self._redact)
            if not isinstance(name, str) or not name:
                warn_once(
                    "logger:samples-name",
                    f"rlmetrics: log_samples' name is a non-empty str, got "
                    f"{describe_value(name)}; 'samples' is used",
                )
                name = "samples"
            if table:
                at = self._table_step(step, "log_samples")
                if self._ranks is not None and not self._ranks.logs:
                    self._log_rank_samples(table, at, name)
                else:
                    self._call_backends("log_samples", table, at, name)
        except Exception:
            warn_once("logger:samples", "rlmetrics: Logger.log_samples failed")
        raise_if_strict()

    def _takes_samples(self) -> bool:
        """Whether a samples table logged now is written anywhere: by a backend, or (a rank
        that writes no run rows, so has no tracker) beside the rank's raw file."""
        return bool(self._inline or self._workers) or (
            self._ranks is not None and not self._ranks.logs
        )

    def _log_rank_samples(self, table: list[dict[str, Any]], step: int, name: str) -> None:
        """A samples table on a rank that writes no run rows: its engine keeps it with the
        rank's raw rows (rank 0 writes only its own tables to the trackers, and the other
        ranks' rollouts would vanish); an engine that cannot is said once."""
        with self._lock:
            if self._finished:
                self._say_finished("log_samples")
                return
            keep = getattr(self._ranks, "log_samples", None)
            if keep is None:
                warn_once(
                    "logger:ranks-samples",
                    f"rlmetrics: this rank writes no tracker rows and its merger "
                    f"({type(self._ranks).__name__}) keeps no samples, so the samples and "
                    "trajectory rows it logs are not written; log them on the rank that "
                    "writes the run's rows",
                )
                return
            keep(table, step, name)

    @not_our_exception  # a loop logs the rollouts that finished inside its own except
    def log_trajectories(
        self, records: Any, step: int | None = None, name: str = "trajectories"
    ) -> None:
        """Finished rollouts as trajectories (issue 33): a list of plain dicts, one per
        rollout (schema: :mod:`rlmetrics.trajectories.records`). Each becomes spans under the
        current step (within the span budget), a row of the samples table ``name`` for every
        backend (bounded like ``log_samples``) and the trajectory metrics, all from the same
        record. Text is kept only under a text policy
        (:func:`rlmetrics.trajectories.configure`). Never raises.

        ``step`` is an integer from 0 (a NumPy or torch integer counts); without one, as in
        ``log_metrics`` and ``rlmetrics.trajectory``, the trajectories land at the step of the
        ``rlmetrics.step`` scope they are logged in, else at the step after the last this
        Logger logged (which they become); a step that is not an integer is said once and
        treated as missing."""
        try:
            from .trajectories import deliver, parse_trajectories, settings

            deliver(parse_trajectories(records, settings().text), step, self, name=name)
        except Exception:
            warn_once("logger:trajectories", "rlmetrics: Logger.log_trajectories failed")
        raise_if_strict()

    def finish(self, timeout_s: float | None = None, *, failed: bool = False) -> None:
        """Write what is queued and close every backend, once, waiting at most ``timeout_s``
        (default ``finish_timeout_s``) for the queued ones; says what did not make it.

        ``failed=True`` finishes the run as a failed one in the trackers that keep a run's
        outcome (W&B exit code 1, MLflow FAILED, SwanLab crashed), as the interpreter's exit
        does after an uncaught exception or a failing ``sys.exit``: for a SIGTERM handler
        that finishes the Logger before ``sys.exit(143)`` (a preempted job).

        A ``rlmetrics.step`` of this Logger still open (never left: the loop died inside it)
        ends first, with what was opened inside it, marked truncated, so its seconds and
        summary are logged and exported. In strict mode, raises
        :class:`~rlmetrics.StrictModeError` once everything is closed if anything asked for
        did not happen (rows a tracker did not write included)."""
        if timeout_s is not None and not _waiting.is_bound(timeout_s):
            # The loop's last call: said, and finished with the Logger's own bound, for a
            # raise here would leave the queued trackers unfinished and their rows unsaid.
            warn_once(
                "logger:finish-timeout",
                "rlmetrics: Logger.finish()'s timeout_s must be a number of 0 or more (inf: "
                f"wait until every row is written), got {describe_value(timeout_s)}; the "
                f"Logger's own bound ({self.finish_timeout_s:g} s) is used",
            )
            timeout_s = None
        if type(failed) is not bool:
            # Said, not raised: this is the loop's (or a signal handler's) last call. Marked
            # failed, for what was passed is most likely an exception or an exit status.
            warn_once(
                "logger:finish-failed",
                "rlmetrics: Logger.finish()'s failed must be True or False, got "
                f"{describe_value(failed)}; the run is finished as failed",
            )
            failed = True
        if self._finish(timeout_s, failed=failed):
            self._release_strict()
        raise_if_strict()

    def _finish(
        self,
        timeout_s: float | None,
        started: float | None = None,
        failed: bool = False,
        cause: BaseException | None = None,
    ) -> bool:
        """Close everything, once, waiting ``timeout_s`` from ``started`` (default: now);
        whether this call did. ``failed``: the run ended with an exception (``cause``, when
        known), which the trackers that keep a run's outcome are told (W&B, MLflow, SwanLab)."""
        close_open_scopes("still open at Logger.finish()", self)
        from .trajectories.held_rows import release_rows

        if not self._finished:  # the rows of live trajectories it held (their steps did not end)
            release_rows(self)
        if self._ranks is not None and not self._finished:
            # An engine whose run rows arrive off this thread delivers them now, through this
            # Logger, so before its lock is taken.
            self._drain_ranks(self.finish_timeout_s if timeout_s is None else timeout_s)
        with self._lock:
            if self._finished:
                return False
            self._finished = True
            _unfinished.discard(self)
            for inline in self._inline.values():
                inline.finish(failed, cause)
            if self._ranks is not None:
                self._ranks.finish()
        # A live trajectory's row held between the release above and _finished: said now.
        release_rows(self)
        bound = self.finish_timeout_s if timeout_s is None else timeout_s
        deadline = (time.monotonic() if started is None else started) + bound
        try:
            for worker in self._workers.values():
                worker.request_finish(failed, cause)  # all at once: side by side
            for worker in self._workers.values():
                worker.finish(deadline, bound, failed, cause)
        except BaseException as exc:  # a SIGTERM handler's SystemExit, a KeyboardInterrupt
            waiting = "Logger.finish()" if started is None else "the exit's wait"
            for worker in self._workers.values():
                worker.say_unwritten(f"{waiting} was interrupted ({type(exc).__name__})")
            raise
        return True

    def __enter__(self) -> Logger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.finish()
        elif self._finish(None, failed=_is_failure(exc), cause=exc):
            self._release_strict()  # the block's own exception is the one to see

    # -- internals ------------------------------------------------------------------------

    def _next_step(self, given: Any) -> int:
        """The step a call logs at: ``given`` when it is one (:func:`rlmetrics.values.as_step`),
        else the open ``rlmetrics.step``'s, else the one after the last; remembered."""
        # A loop's own int, checked here: as_step's frame is a tenth of a 4-key call.
        step = given if type(given) is int and 0 <= given <= INT64_MAX else as_step(given)
        if step is None:
            if given is not None:
                warn_once(
                    "logger:step",
                    "rlmetrics: log_metrics' step must be an integer from 0 (a NumPy or torch "
                    f"integer counts), got {describe_value(given)}; the row is logged as if no "
                    "step were given (at the step after the last)",
                )
            step = current_step()
        with self._lock:
            if step is None:
                step = self._last_step + 1
            self._last_step = step
        return step

    def _table_step(self, given: Any, call: str) -> int:
        """The step a samples table or a step's efficiency summary (``call``) is logged at:
        ``given`` when it is one, else the open ``rlmetrics.step``'s, else the last logged (0
        before any), said once. Unlike a row it does not advance the steps: it shows a step
        already logged."""
        step = given if type(given) is int and 0 <= given <= INT64_MAX else as_step(given)
        if step is not None:
            return step
        opened = current_step()
        step = opened if opened is not None else max(self._last_step, 0)
        warn_once(
            f"logger:{call}-step",
            f"rlmetrics: {call}'s step must be an integer from 0 (a NumPy or torch integer "
            f"counts), got {describe_value(given)}; it is logged at the last step ({step})",
        )
        return step

    def _teed_keys(self) -> _TeedKeys:
        """The keys a cut past the flatten cap keeps (asked for only then)."""
        return _TeedKeys(self._key_map)

    def _say_unknown(self, prefix: str, flat: Mapping[str, Any]) -> None:
        """Warn once per key nothing knows (``unknown_keys``); never raises."""
        try:
            if not self._plugins_loaded:  # what the plugins declare is known from the start
                hooks()
                self._plugins_loaded = True
            found = self._unknown(prefix, flat) if self._unknown is not None else ()
        except Exception:
            warn_once("logger:unknown-keys", "rlmetrics: checking for unknown keys failed")
            return
        # "warn" is information (strict mode never raises for it); "error" is a request:
        # strict mode raises it from this call.
        cause = "unknown-key" if self._unknown_mode == "warn" else "unknown-key-error"
        for unknown in found:
            warn_once(
                f"{cause}:{unknown.prefix}:{unknown.key}",
                f"rlmetrics: {unknown.message()}. Logger(unknown_keys={self._unknown_mode!r}) "
                "says so; a key logged on purpose is declared with rlmetrics.declare_keys "
                "(docs/concepts.md)",
            )

    def _next_sample(self, prefix: str) -> int:
        with self._lock:
            self._samples[prefix] = self._samples.get(prefix, -1) + 1
            return self._samples[prefix]

    def _log(
        self,
        flat: Mapping[str, Any],
        step: int,
        prefix: str,
        typed: Callable[[Hooks], None],
        tee: Mapping[str, Any] | None = None,
    ) -> None:
        """Backends first, then the typed hook this dict stands for, then ``log_metrics``
        (with ``tee``, the dict as a key map made it, when given)."""
        self._to_backends(flat, step, prefix)
        plugins = hooks()
        typed(plugins)
        plugins.log_metrics(flat if tee is None else tee, step, prefix)

    def _to_backends(self, flat: Mapping[str, Any], step: int, prefix: str) -> None:
        # One lock for the inline backends: a sampler thread and the training loop may both
        # log, and no backend should have to be thread-safe for that.
        with self._lock:
            if self._finished:
                self._say_finished("log_metrics")
                return
            for inline in self._inline.values():
                inline.log_metrics(flat, step, prefix)
            if self._workers:
                # Taken now, once for every queued backend: the loop may refill its buffers
                # before their threads write the row. (Queuing never blocks; under the lock,
                # no row is queued behind finish() and the counts stay exact.)
                queued, queued_step = snapshot(flat), snapshot(step)
                for worker in self._workers.values():
                    worker.log_metrics(queued, queued_step, prefix)

    def _say_finished(self, call: str) -> None:
        """Say, once per kind of call, that what ``call`` logs after ``finish()`` reaches no
        tracker (a row logged then was dropped unsaid)."""
        warn_once(
            f"logger:after-finish:{self.identity.run_id}:{id(self)}:{call}",
            f"rlmetrics: Logger.{call} after Logger.finish(): its trackers are closed, so what "
            "it logs reaches none of them (telemetry still gets metrics); finish the Logger "
            "after its last call. Said once",
            expected=True,
        )

    def _call_backends(self, method: str, *args: Any) -> None:
        """``backend.<method>(*args)`` on every backend that has the method: inline ones now,
        in their guard, queued ones on their threads with a :func:`snapshot` of ``args`` (plain
        already, but a backend keeps what it is given: it gets its own copy)."""
        with self._lock:
            if self._finished:
                if method != "log_alert":  # an alert is the stack's, not a call of the loop
                    self._say_finished(method)
                return
            for inline in self._inline.values():
                if callable(getattr(inline.backend, method, None)):
                    inline.call(method, *args)
            takers = [
                w for w in self._workers.values() if callable(getattr(w.backend, method, None))
            ]
            if takers:
                queued = snapshot(args)
                for worker in takers:
                    worker.call(method, *queued)


def _unknown_keys_mode(mode: Any, source: str | None) -> str:
    """``unknown_keys`` checked: one of its values, else the mistake, naming its source."""
    if isinstance(mode, str) and mode in UNKNOWN_KEYS_MODES:
        return mode
    shown = repr(mode) if isinstance(mode, str) else describe_value(mode)
    raise ConfigurationError(
        f"unknown_keys={shown}{from_source(source)} is not one of "
        f"{', '.join(map(repr, UNKNOWN_KEYS_MODES))}"
        + (suggest(mode, UNKNOWN_KEYS_MODES) if isinstance(mode, str) else "")
    )


def _configured_source(settings: Mapping[str, tuple[Any, str]], name: str) -> str | None:
    """The variable or file setting that gave ``name``; None for the call's or the default."""
    source = settings[name][1]
    return None if source in (CALL, DEFAULT) else source


#: Every Logger of this process not finished yet (held weakly): the interpreter's exit
#: finishes them.
_unfinished: weakref.WeakSet[Logger] = weakref.WeakSet()


def alerts_taken() -> bool:
    """Whether an unfinished Logger of this process has a backend that takes alerts."""
    pid = os.getpid()
    return any(lg._pid == pid and lg._takes_alerts() for lg in list(_unfinished))


# The stall watch asks through this whether a Logger listens (it does not import this module).
stall_watch.listens_when(alerts_taken)


def alert_loggers(alert: Alert) -> None:
    """``backend.log_alert(alert)`` on every backend of every unfinished Logger of this
    process that takes alerts (:class:`rlmetrics.backends.TakesAlerts`). Never raises."""
    for logger in list(_unfinished):
        if logger._pid == os.getpid():
            try:
                logger._call_backends("log_alert", alert)
            except Exception:
                warn_once("logger:alert", "rlmetrics: an alert could not reach a Logger's backends")


def _finish_at_exit() -> None:
    """Finish every Logger that was never finished, when the interpreter exits: its queued
    backends write what they hold within its ``exit_timeout_s`` (counted from the exit's
    start), and what they could not write is counted and said. One of threading's exit hooks
    (:func:`rlmetrics.backends.worker.at_exit`): it runs before telemetry's own exit shutdown,
    an ``atexit`` handler, so what it counts and what a step it closes delivers is still
    exported. Never raises."""
    loggers = [lg for lg in list(_unfinished) if lg._pid == os.getpid()]
    failed = _worker.exits_failed()
    # A finished Logger whose finish gave up on a tracker is waited for too (the tracker's
    # thread goes on to finishing its run): within that Logger's bound, not the default.
    bounds = [lg.exit_timeout_s for lg in loggers] + [
        worker.exit_timeout_s
        for worker in _worker.live_backends()
        if isinstance(worker, BackendWorker) and worker.given_up
        if worker.exit_timeout_s is not None
    ]
    bound = max(bounds, default=DEFAULT_EXIT_TIMEOUT_S)
    deadline, bound = _worker.begin_exit(bound)
    started = deadline - bound
    for logger in loggers:
        try:
            if logger._finish(logger.exit_timeout_s, started, failed) and logger._strict:
                release_strict()
        except Exception:
            warn_once("logger:exit", "rlmetrics: finishing a Logger at exit failed")
        except BaseException:
            # An interrupt (a second SIGTERM, Ctrl-C) cut this Logger's wait short: _finish
            # has said what each backend did not write. The user's, not a failure: no
            # traceback, and the next Logger is still finished within the exit's bound.
            continue


_worker.at_exit(_finish_at_exit)


def _is_failure(exc: BaseException) -> bool:
    """Whether a Logger's block ended the run with ``exc`` as a failure: any exception but a
    ``SystemExit`` of status 0."""
    return not (isinstance(exc, SystemExit) and exc.code in (0, None))


def _with_the_runs_identity(
    logger: Mapping[str, tuple[Any, str]], telemetry: Mapping[str, tuple[Any, str]]
) -> Mapping[str, tuple[Any, str]]:
    """The configured [logger] settings, with the file's [telemetry] ``run_id`` and
    ``resume`` where [logger] gives none and no telemetry runs yet: what ``start()`` will
    name the run, so a Logger made first writes under the same id (a running telemetry's
    is taken in :func:`_identity`)."""
    if current() is not None:
        return logger
    taken = {name: telemetry[name] for name in ("run_id", "resume") if name in telemetry}
    return {**taken, **logger}


def _identity(run_id: str | None, resume: bool | None) -> RunIdentity:
    """The run this Logger writes: the running telemetry's unless told otherwise."""
    telemetry = current()
    if telemetry is not None:
        if run_id is not None and run_id != telemetry.run_id:
            raise ValueError(
                f"Logger(run_id={run_id!r}) differs from the running telemetry's run id "
                f"{telemetry.run_id!r}: one run has one id. Pass run_id to rlmetrics.start() "
                "only, or leave it out here"
            )
        return RunIdentity(telemetry.run_id, telemetry.resume if resume is None else resume)
    if resume and run_id is None and launcher_run_id(resumable=True) is None:
        raise ValueError(
            "Logger(resume=True) continues the run its id names: pass run_id= (or start "
            "telemetry with rlmetrics.start(run_id=..., resume=True) first), or set "
            f"{RESUME_ID_SOURCES}"
        )
    if run_id is None:  # generated here: with ranks, rank 0's wins (RunIdentity.given)
        return RunIdentity(new_run_id(), bool(resume), given=False)
    return RunIdentity(run_id, bool(resume))


def _reason(exc: BaseException) -> str:
    """``exc`` as text for a warning's key: its type and message (a plugin's exception whose
    ``__str__`` raises is its type alone)."""
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:
        return type(exc).__name__


def _build(
    factory: BackendFactory, options: Mapping[str, Any], identity: RunIdentity, name: str = "NAME"
) -> Backend:
    """``factory(**options)``, with ``identity=`` when the factory names that parameter; a
    :class:`_Shape` error if the offer is no factory or what it built has no
    ``log_metrics`` (refused now, not at every step)."""
    if not callable(factory):
        kind = type(factory).__name__
        raise _Shape(
            f"register_backends offered a {kind} instance, not a factory: "
            f"register({name!r}, {kind}) (the class, or a function "
            "returning a backend)"
        )
    if "identity" not in options and _names_identity(factory):
        backend = factory(**options, identity=identity)
    else:
        backend = factory(**options)
    if not callable(getattr(backend, "log_metrics", None)):
        raise _Shape(
            f"{type(backend).__name__} has no log_metrics(): a backend provides "
            "log_metrics(metrics, step, prefix) and finish() (docs/writing-a-plugin.md)"
        )
    return backend


class _Shape(TypeError):
    """A plugin's backend offered in a shape the Logger cannot use: said in one line."""


def _names_identity(factory: BackendFactory) -> bool:
    try:
        parameter = inspect.signature(factory).parameters.get("identity")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


def _by_prefix(
    flat: dict[str, Any], prefix: str
) -> list[tuple[str, dict[str, Any], tuple[tuple[str, str], ...]]]:
    """``flat`` as the plugins read it: split by the prefixes its keys carry when it was
    logged without one (:func:`rlmetrics.routing.by_prefix`), else whole under ``prefix``."""
    parts = None if prefix else routing.by_prefix(tuple(flat))
    return [(prefix, flat, ())] if parts is None else routing.split(flat, parts)
