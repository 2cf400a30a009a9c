"""``RLMetricsCallback``: a ``transformers.TrainerCallback`` that hands every step the trainer
logs to an :class:`rlmetrics.Logger`.

transformers (and every TRL trainer, which are ``Trainer`` subclasses) calls its callbacks
from the training loop: ``on_log`` with each dict ``Trainer.log`` writes, at
``state.global_step``. The callback is a translation to Logger calls and nothing else:

- ``on_init_end`` / ``on_train_begin``: the setup phases (the trainer's construction and the
  time the first ``train()`` took to reach its first step) as the Logger's setup timing, and
  the training arguments as the run's hyperparameters (once: a second ``train()`` has no
  setup of its own);
- ``on_log``: the dict at the trainer's ``global_step`` — an ``evaluate()``'s as one row under
  ``eval`` (``test`` for a ``test`` ``metric_key_prefix``: :func:`evaluation_split`), else
  ``eval_*`` and ``test_*`` keys under the ``eval`` and ``test`` prefixes (as transformers'
  own W&B integration groups them), the rest under ``train``, where the ``trl`` key map
  makes TRL's keys rlmetrics' series — and, for a TRL trainer that keeps its completions
  (GRPO, RLOO), each completion not logged yet as a trajectory (:mod:`.trajectories`):
  spans, a row of the ``trajectories`` samples table and the trajectory metrics, with the
  rewards TRL computed;
- ``on_predict``: ``predict()``'s metrics (it hands them to no ``Trainer.log``) under ``test``;
- ``on_step_end``: those completions at each optimizer step too, so every generation batch is
  logged (TRL keeps only the last, and logs every 10 steps by default);

The Logger it builds is the callback's for the trainer's whole life: ``train()``, the
``evaluate()`` and ``predict()`` after it and a second ``train()`` all write to it (one run in
each tracker), and it is finished once: by :meth:`RLMetricsCallback.finish`, when the callback
is garbage-collected with its trainer, or at interpreter exit (:mod:`rlmetrics.adapters`).

Only the world's process zero logs, as transformers' own integrations do — unless the Logger
given merges ranks (``rlmetrics.Logger(ranks="torch")``, built on every rank): then every
process hands it its setup timing and each logged dict (the trainer calls its callbacks on every
process, with the same keys), and it merges them across the ranks (:mod:`rlmetrics.ranks`); the
hyperparameters and the trajectories stay process zero's. Every call is guarded: nothing here
can fail the trainer's step, unless strict mode is on, where a ``StrictModeError`` stops the run
as asked.
"""

from __future__ import annotations

import inspect
import time
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from transformers import TrainerCallback

from rlmetrics import KeyMap, Logger
from rlmetrics.adapters import AdapterLogger, guarded, stands_down
from rlmetrics.keyplans import KeyPlans

from .trajectories import CompletionReader, calling_trainer

__all__ = [
    "EVAL_PREFIX",
    "TEST_PREFIX",
    "TRAIN_PREFIX",
    "RLMetricsCallback",
    "evaluation_split",
    "split_prefix",
]

TRAIN_PREFIX, EVAL_PREFIX, TEST_PREFIX = "train", "eval", "test"
_ADAPTER = "rlmetrics-transformers"
_SPLITS = ((EVAL_PREFIX + "_", EVAL_PREFIX), (TEST_PREFIX + "_", TEST_PREFIX))


def split_prefix(logs: Mapping[str, Any], train: str = TRAIN_PREFIX) -> dict[str, dict[str, Any]]:
    """``{prefix: {key: value}}``: ``eval_loss`` is ``loss`` under ``eval``, ``test_loss``
    ``loss`` under ``test``, every other key itself under ``train``."""
    keys = tuple(logs)
    plan = _plans(keys)
    out: dict[str, dict[str, Any]] = {}
    for key, (prefix, name) in zip(keys, plan, strict=True):
        out.setdefault(train if prefix is None else prefix, {})[name] = logs[key]
    return out


def _split(key: Any) -> tuple[str | None, Any]:
    """``(prefix, name)`` of one logged key; None for the training prefix."""
    if isinstance(key, str):
        for head, split in _SPLITS:
            if key.startswith(head) and len(key) > len(head):
                return split, key[len(head) :]
    return None, key


def _split_keys(keys: tuple[Any, ...]) -> tuple[tuple[str | None, Any], ...]:
    return tuple(_split(key) for key in keys)


#: Which keys go where, worked out once per key sequence (a trainer logs the same every step).
_plans = KeyPlans(_split_keys, limit=64)

#: How far up the call stack ``on_log`` looks for the ``evaluate()`` that logs (the guard, the
#: handler's ``call_event`` and ``on_log``, ``Trainer.log``, a subclass's ``log``: 6; room to
#: spare for a subclass's ``evaluate`` calling ``super()``'s).
_EVALUATE_DEPTH = 16


def evaluation_split() -> str | None:
    """The prefix the dict being logged goes under when a trainer's ``evaluate()`` logs it —
    ``test`` for a ``metric_key_prefix`` of ``test`` or ``test_*``, ``eval`` for any other —
    and None when training logs it.

    ``evaluate()`` prefixes every key with its ``metric_key_prefix`` (``val_loss`` for
    ``"val"``) and ``Trainer.log`` adds ``epoch``: neither says "evaluation" in a way the
    keys alone can tell from a training dict (``train_loss`` is both the training summary's
    and an evaluation's on the training set), so the nearest ``evaluate`` frame up the stack
    whose ``self`` calls callbacks says it, with its own ``metric_key_prefix``."""
    frame = inspect.currentframe()
    try:
        depth = 0
        while frame is not None and depth < _EVALUATE_DEPTH:
            if frame.f_code.co_name == "evaluate":
                local = frame.f_locals
                prefix = local.get("metric_key_prefix")
                if isinstance(prefix, str) and hasattr(local.get("self"), "callback_handler"):
                    test = prefix == TEST_PREFIX or prefix.startswith(TEST_PREFIX + "_")
                    return TEST_PREFIX if test else EVAL_PREFIX
            frame = frame.f_back
            depth += 1
        return None
    finally:
        del frame  # a frame held in a local keeps every frame above it alive


class RLMetricsCallback(TrainerCallback):  # type: ignore[misc]
    """Send every step a ``Trainer`` logs to rlmetrics.

    :param logger: an :class:`rlmetrics.Logger` to write to, used as it is (and finished by
        its owner); one built with ``ranks=`` is called on every process. Without one the
        callback builds its own when the trainer first logs, from ``backends`` (default: the
        JSONL backend, ``./rlmetrics.jsonl`` in the working directory of the process that
        logs) and ``key_map``; it serves every later ``train()``, ``evaluate()`` and
        ``predict()`` and is finished by :meth:`finish`, when the callback is
        garbage-collected, or at interpreter exit.
    :param backends: ``Logger``'s ``backends`` for the Logger the callback builds.
    :param key_map: which key the trainer logs is which rlmetrics series; ``"trl"`` (the
        default) covers TRL's trainers and ``Trainer``'s own keys.
    :param prefix: the prefix of the training dicts (an ``evaluate()``'s dict, whatever its
        ``metric_key_prefix``, and ``eval_*`` and ``test_*`` keys go under ``eval`` and
        ``test``).
    :param setup_started: a ``time.monotonic()`` reading where the run's setup began (before
        the model was loaded, say); default: when the callback was made.
    :param trajectories: log a TRL trainer's completions (GRPO, RLOO) as trajectories, one per
        completion with its rewards (text only under the trajectory text policy, off by
        default); False for none.

    A wrong ``backends`` or ``key_map`` raises here, before the trainer starts. In strict mode
    (``RLMETRICS_STRICT=1``, ``Logger(strict=True)``) a ``StrictModeError`` propagates out of
    the callback and stops the trainer.
    """

    def __init__(
        self,
        logger: Logger | None = None,
        *,
        backends: Mapping[str, Mapping[str, Any] | None] | Iterable[str] | str | None = None,
        key_map: str | KeyMap | None = None,
        prefix: str = TRAIN_PREFIX,
        setup_started: float | None = None,
        trajectories: bool = True,
    ) -> None:
        if logger is None and key_map is None:
            key_map = "trl"
        self.logs = AdapterLogger(logger, backends=backends, key_map=key_map, adapter=_ADAPTER)
        self.prefix = prefix
        self._setup_started = time.monotonic() if setup_started is None else setup_started
        self._init_ended: float | None = None
        self._began = False
        self._arguments_logged = False
        self._completions = CompletionReader() if trajectories else None
        #: The trainer calling this callback, found on the call stack (kept weakly).
        self._trainer: weakref.ref[Any] | None = None
        #: The last dict handled, held so that a callback listed twice handles it once.
        self._last_logs: tuple[Mapping[str, Any], int] | None = None

    @property
    def logger(self) -> Logger | None:
        """The Logger steps go to (None before training starts, unless one was given)."""
        return self.logs.logger

    def _calling_trainer(self, *, again: bool = False) -> Any:
        """The trainer calling this callback (transformers hands a callback none): found on
        the call stack the first time it is there (and ``again`` at each ``train()``: the
        callback may have been handed to another trainer), then kept weakly; None when
        called otherwise (by hand, say)."""
        trainer = self._trainer() if self._trainer is not None and not again else None
        if trainer is None:
            trainer = calling_trainer()
            if trainer is not None:
                self._trainer = weakref.ref(trainer)
        return trainer

    def _stands_down(self, trainer: Any) -> bool:
        """Whether an earlier ``RLMetricsCallback`` on ``trainer`` logs (each would also count
        every setup phase and trajectory again)."""
        callbacks = getattr(getattr(trainer, "callback_handler", None), "callbacks", ())
        return stands_down(_ADAPTER, self, RLMetricsCallback, callbacks, "the trainer")

    @guarded(_ADAPTER, "on_init_end")
    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._init_ended = time.monotonic()

    @guarded(_ADAPTER, "on_train_begin")
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = self._calling_trainer(again=True)
        zero = state.is_world_process_zero
        if not (zero or self.logs.merges) or self._began:
            return  # a second train(): its setup is no run's setup, its arguments are known
        if self._stands_down(trainer):
            return
        logger = self.logs.start()
        if logger is None:
            return
        self._began = True
        now = time.monotonic()
        timings = {"total_setup_time_s": now - self._setup_started}
        if self._init_ended is not None:
            timings["trainer_init_time_s"] = self._init_ended - self._setup_started
            timings["train_begin_time_s"] = now - self._init_ended
        logger.log_setup_timing(timings)  # merged across the ranks: on every rank, then
        if zero:
            self._log_arguments(logger, args)

    def _log_arguments(self, logger: Logger, args: Any) -> None:
        """The training arguments as the run's hyperparameters, once in the callback's life:
        at the first ``train()``, else with the first dict of a trainer that only evaluates
        (a checkpoint's evaluation is a run too; transformers' W&B callback logs them then)."""
        if self._arguments_logged:
            return
        self._arguments_logged = True
        to_dict = getattr(args, "to_dict", None)
        logger.log_hyperparams(to_dict() if callable(to_dict) else args)

    @guarded(_ADAPTER, "on_log")
    def on_log(
        self,
        args: Any,
        state: Any,
        control: Any,
        logs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        zero = state.is_world_process_zero
        if not logs or not (zero or self.logs.merges):
            return
        if self._seen(logs, state.global_step):
            return
        trainer = self._calling_trainer()  # found here when added after train() began
        if self._stands_down(trainer):
            return
        logger = self.logs.start()
        if logger is None:
            return
        # An evaluation's dict is one evaluation row, whatever its metric_key_prefix: its
        # val_* keys and its epoch are no training values.
        train = evaluation_split() or self.prefix
        if zero:
            self._log_arguments(logger, args)  # a trainer that never trained: with its first
        for prefix, metrics in split_prefix(logs, train).items():
            logger.log_metrics(metrics, step=state.global_step, prefix=prefix)
        if zero:
            self._log_completions(logger, trainer, state.global_step)

    @guarded(_ADAPTER, "on_predict")
    def on_predict(
        self,
        args: Any,
        state: Any,
        control: Any,
        metrics: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """``predict()``'s metrics, which it hands to the callbacks, never to ``Trainer.log``
        (transformers' own tracker callbacks log them here too): under ``test`` at the
        trainer's step, keys of another ``metric_key_prefix`` as they are — never as training
        values."""
        zero = state.is_world_process_zero
        if not metrics or not (zero or self.logs.merges) or self._seen(metrics, state.global_step):
            return
        if self._stands_down(self._calling_trainer()):
            return
        logger = self.logs.start()
        if logger is None:
            return
        if zero:
            self._log_arguments(logger, args)
        for prefix, values in split_prefix(metrics, TEST_PREFIX).items():
            logger.log_metrics(values, step=state.global_step, prefix=prefix)

    def _seen(self, logs: Mapping[str, Any], step: int) -> bool:
        """Whether ``logs`` was the dict just handled, at the same step: a callback listed
        twice is called twice with it."""
        seen, self._last_logs = self._last_logs, (logs, step)
        return seen is not None and seen[0] is logs and seen[1] == step

    @guarded(_ADAPTER, "on_step_end")
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # Each optimizer step, not only each log: TRL keeps only its last generation batch, and
        # logs every 10 steps by default while each step may generate a new one.
        if self._completions is None or not state.is_world_process_zero:
            return
        trainer = self._calling_trainer()
        if trainer is None or self._stands_down(trainer):
            return
        logger = self.logs.start()
        if logger is not None:
            self._log_completions(logger, trainer, state.global_step)

    def _log_completions(self, logger: Logger, trainer: Any, step: int) -> None:
        """The completions ``trainer`` generated since they were last read, as trajectories
        at ``step`` (a TRL trainer that keeps them: GRPO, RLOO)."""
        if self._completions is None or trainer is None:
            return
        records = self._completions.new_records(trainer, step)
        if records:
            logger.log_trajectories(records, step=step)

    @guarded(_ADAPTER, "finish")
    def finish(self) -> None:
        """Finish the Logger the callback built (a given one is its owner's): call it when the
        trainer is done and the process goes on (the next trainer's callback builds its own
        Logger, under the same run id when telemetry is running). Later calls are dropped."""
        self.logs.finish()
