"""``RLMetricsLogger``: a Lightning ``Logger`` that writes to an :class:`rlmetrics.Logger`.

Lightning hands its loggers what a ``LightningModule`` logs (``self.log``), already reduced to
floats, with the trainer's global step; the hyperparameters (``save_hyperparameters``); and
``finalize(status)`` at the end of every ``fit``, ``validate``, ``test`` and ``predict``. Each
logged dict becomes one Logger call, under ``train`` (what the validation loop logs under
``eval``, ``test()``'s under ``test``: no training series reads them); only rank zero logs,
as Lightning's own loggers do.

With ``ranks="torch"`` (DDP and the other strategies on a torch.distributed process group),
every rank hands its dict to a Logger of its own that merges them across the ranks as each
series declares (:mod:`rlmetrics.ranks`): rank zero writes the run's values, one row per step,
and every rank its raw values to ``rlmetrics.rank{rank}.jsonl``. Lightning calls its loggers'
``log_metrics`` on every rank at the same steps, which the merge's collective needs. That Logger
is built on every rank at once (it opens a process group of its own: a collective), in
``log_graph``, which Lightning calls on every rank right after ``log_hyperparams`` (rank zero
only: the hyperparameters wait there for it), else at the first ``log_metrics``.

The Logger built here is the logger's for the trainer's whole life: ``finalize`` ends a stage,
not the run, so the ``validate()`` or ``test()`` after a ``fit()`` (and a second ``fit()``)
write to the same Logger, one run in each tracker. It is finished once: by
:meth:`RLMetricsLogger.finish`, when the logger is garbage-collected with its trainer, or at
interpreter exit (:mod:`rlmetrics.adapters`).

Every call is guarded: nothing here can fail the trainer's step, unless strict mode is on,
where a ``StrictModeError`` stops the run as asked.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Iterable, Mapping
from typing import Any

from lightning.pytorch import Trainer
from lightning.pytorch.loggers import Logger as LightningLogger
from lightning.pytorch.loggers.logger import DummyExperiment
from lightning.pytorch.utilities import rank_zero_only

from rlmetrics import KeyMap, Logger, warn_once
from rlmetrics.adapters import AdapterLogger, HandedAgain, caller, guarded, stands_down
from rlmetrics.ranks import RankMerger

__all__ = ["EVAL_PREFIX", "TEST_PREFIX", "RLMetricsLogger", "calling_trainer"]

_ADAPTER = "rlmetrics-lightning"
#: The prefixes of what the validation loop (in ``fit`` and ``validate()``) and ``test()`` log:
#: the transformers adapter's, so the training scalars (read under ``train``) never see them.
EVAL_PREFIX, TEST_PREFIX = "eval", "test"
#: How far up the call stack ``log_metrics`` looks for the trainer calling it (the logger
#: connector: 4 frames up; a ``self.logger.log_metrics`` in a ``validation_step``: 7, more
#: through a strategy's wrappers; room to spare).
_STACK_DEPTH = 12


def calling_trainer() -> Trainer | None:
    """The Lightning ``Trainer`` calling a logger, found on the call stack (Lightning hands its
    loggers no trainer): a frame's ``trainer`` or ``self``, or the ``trainer`` its ``self``
    holds (the logger connector's); None when there is none (a call by hand). Only instance
    dicts are read, so no property runs."""
    found: Trainer | None = caller(_a_trainer, _STACK_DEPTH)
    return found


def _a_trainer(local: Mapping[str, Any]) -> Trainer | None:
    owner = local.get("self")
    held = getattr(owner, "__dict__", None)
    for candidate in (
        local.get("trainer"),
        owner,
        held.get("trainer") if isinstance(held, dict) else None,
    ):
        if isinstance(candidate, Trainer):
            return candidate
    return None


class RLMetricsLogger(LightningLogger):  # type: ignore[misc]
    """Send what a Lightning ``Trainer`` logs to rlmetrics.

    :param logger: an :class:`rlmetrics.Logger` to write to (finished by its owner); without
        one, the logger builds its own from ``backends`` and ``key_map`` when the run starts
        logging, and keeps it for every later ``fit``/``validate``/``test`` until
        :meth:`finish`, garbage collection or interpreter exit.
    :param backends: ``Logger``'s ``backends`` for the Logger built here (default: the JSONL
        backend, ``./rlmetrics.jsonl`` in the working directory of rank zero).
    :param key_map: which of your keys is which rlmetrics series (a name or a
        :class:`rlmetrics.KeyMap`); Lightning's keys are yours, so there is no default.
    :param prefix: the prefix every dict is logged under (``train``: the prefix the training
        scalars and key maps read).
    :param name: / :param version: what Lightning shows for this logger, and the folder
        its checkpoints go to (``<default_root_dir>/<name>/<version>/checkpoints``); the
        version is the rlmetrics run's id unless given, so each run has a folder of its own
        and a run restarted under its id finds its checkpoints (``fit(ckpt_path="last")``).
    :param ranks: ``"torch"`` merges every rank's values over the trainer's default process
        group (or a merger, :func:`rlmetrics.ranks.torch_distributed`); None (the default)
        logs rank zero's values only. A run on one process logs its values as they are. A
        ``logger`` built with ``ranks=`` merges too: it is called on every rank.
    """

    def __init__(
        self,
        logger: Logger | None = None,
        *,
        backends: Mapping[str, Mapping[str, Any] | None] | Iterable[str] | str | None = None,
        key_map: str | KeyMap | None = None,
        prefix: str = "train",
        name: str = "rlmetrics",
        version: str | int | None = None,
        ranks: str | RankMerger | None = None,
    ) -> None:
        super().__init__()
        self.logs = AdapterLogger(
            logger, backends=backends, key_map=key_map, adapter=_ADAPTER, ranks=ranks
        )
        self.prefix = prefix
        self._name = name
        self._version = version
        self._last_step = 0
        #: Hyperparameters rank zero was given before the Logger that merges the ranks was
        #: built (it is built on every rank at once): logged once it is.
        self._held_hyperparams: dict[str, Any] | None = None
        self._handed_again = HandedAgain()

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str | int:
        """The ``version`` given, else the run's id (as W&B's and MLflow's Lightning loggers
        say theirs), known before the Logger is built: Lightning names the checkpoint folder
        before the first step. On a rank whose Logger takes rank 0's id it is only that
        rank's guess (Lightning takes rank zero's folder)."""
        if self._version is not None:
            return self._version
        run_id = self._run_id()
        return 0 if run_id is None else run_id  # (None: it failed, and said so)

    @guarded(_ADAPTER, "version")
    def _run_id(self) -> str | None:
        return self.logs.run_id(reserve=getattr(rank_zero_only, "rank", 0) == 0)

    @property
    def save_dir(self) -> str | None:
        """The calling trainer's ``default_root_dir``, where Lightning puts what a run saves
        when it has no logger (None when no trainer is calling). ``trainer.log_dir`` is the
        first logger's ``save_dir``, and LightningCLI's config saving, the profilers' files
        and user code need one; the checkpoints' folder is the same as with None."""
        trainer = calling_trainer()
        return None if trainer is None else trainer.default_root_dir

    @property
    def experiment(self) -> Any:
        """The rlmetrics Logger, built on first use as Lightning's loggers build theirs (so
        ``self.logger.experiment`` works from the first step, before Lightning has logged
        anything); on another rank Lightning's dummy, whose calls do nothing, as theirs. With
        the ranks merged, every rank's own Logger, built in ``log_graph`` before the first
        step (None before it: building it is a collective). None after :meth:`finish`."""
        if self.logs.merges or self.logs.finished:
            return self.logs.logger
        if getattr(rank_zero_only, "rank", 0) != 0:
            return DummyExperiment()
        return self._start()

    @guarded(_ADAPTER, "experiment")
    def _start(self) -> Logger | None:
        return self.logs.start()

    @rank_zero_only  # type: ignore[untyped-decorator,misc]
    @guarded(_ADAPTER, "log_hyperparams")
    def log_hyperparams(
        self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any
    ) -> None:
        if self._stands_down(calling_trainer()):
            return
        config = dict(vars(params) if isinstance(params, Namespace) else params)
        if self.logs.merges and self.logs.logger is None and not self.logs.finished:
            # Lightning calls this on rank zero only, and the Logger that merges the ranks is
            # built on every rank at once (its process group: a collective): built here, it
            # would wait for the other ranks until the group's timeout. The hyperparameters
            # wait for it instead (log_graph, called on every rank right after this).
            self._held_hyperparams = config
            return
        # Lightning hands them again at each stage: logged again only when they changed.
        self.logs.log_hyperparams(config)

    @guarded(_ADAPTER, "log_graph")
    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Lightning calls it on every rank, right after ``log_hyperparams``, before the
        first step: the Logger that merges the ranks is built here, on every rank at once
        (no graph is logged)."""
        if self.logs.merges and not self._stands_down(calling_trainer()):
            self._held_to(self.logs.start())

    @guarded(_ADAPTER, "log_metrics")
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        # Rank zero only, as Lightning's loggers; every rank when the ranks are merged (each
        # rank's Logger takes part in the step's collective).
        if not self.logs.merges and getattr(rank_zero_only, "rank", 0) != 0:
            return
        if self._handed_again(metrics, step):
            return  # the logger listed twice in the trainer's loggers: written once
        trainer = calling_trainer()
        if self._stands_down(trainer):
            return
        if step is None:  # Lightning passes its global step; a direct call may not
            step = self._last_step
        self._last_step = step
        logger = self.logs.start()
        if logger is not None:
            self._held_to(logger)
            logger.log_metrics(metrics, step=step, prefix=self._stage_prefix(trainer))

    def _stands_down(self, trainer: Trainer | None) -> bool:
        """Whether an earlier ``RLMetricsLogger`` on ``trainer``'s ``loggers`` logs."""
        loggers = trainer.loggers if trainer is not None else ()
        return stands_down(_ADAPTER, self, RLMetricsLogger, loggers, "the trainer")

    def _stage_prefix(self, trainer: Trainer | None) -> str:
        """``eval`` while the trainer validates (the validation loop in ``fit`` too), ``test``
        in ``test()``, else the training ``prefix``: a validation's ``reward`` is no training
        reward, and the tee reads training scalars under ``train`` only."""
        if trainer is None:
            return self.prefix
        if trainer.testing:
            return TEST_PREFIX
        if trainer.validating or trainer.sanity_checking:
            return EVAL_PREFIX
        return self.prefix

    def _held_to(self, logger: Logger | None) -> None:
        """The hyperparameters held for the Logger that merges the ranks, logged to it."""
        held, self._held_hyperparams = self._held_hyperparams, None
        if held is not None and logger is not None:
            self.logs.log_hyperparams(held)

    def finalize(self, status: str) -> None:
        """The end of a ``fit``, ``validate``, ``test`` or ``predict``, not of the run: the
        Logger stays open for the next one (queued backends go on writing on their threads)."""

    @guarded(_ADAPTER, "finish")
    def finish(self) -> None:
        """Finish the Logger built here (a given one is its owner's): call it when the trainer
        is done and the process goes on (on every rank when the ranks are merged). Later
        calls are dropped."""
        if not self.logs.merges and getattr(rank_zero_only, "rank", 0) != 0:
            return
        if self._held_hyperparams is not None:
            self._held_hyperparams = None
            warn_once(
                f"adapter:{_ADAPTER}:held-hyperparams",
                "rlmetrics: rlmetrics-lightning: the hyperparameters were not logged: the "
                "Logger that merges the ranks is built on every rank at once, by the trainer's "
                "log_graph or first log_metrics, and neither came before finish()",
            )
        self.logs.finish()
