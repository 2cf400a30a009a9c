"""rlmetrics in Ray Train (V2): :class:`RLMetricsTrainCallback`, a ``ray.train.UserCallback``.

Ray Train calls a ``UserCallback`` in its Train controller actor, not in the driver that built
it: ``after_report(run_context, metrics, checkpoint)`` once every worker has called
``ray.train.report``, with one dict per worker (``metrics[i]`` from world rank ``i``). So the
callback travels to the controller as configuration only, and there it

- builds its :class:`rlmetrics.Logger` on the first report (from ``backends`` and
  ``key_map``) and logs world rank 0's dict at the trainer's step (the dict's ``step`` key,
  else the number of reports so far) under ``train``; with ``all_workers=True`` each worker's
  dict also reaches the backends under ``worker/<rank>``; with ``ranks=True`` the ``train``
  row is every worker's dict merged as each series declares (:mod:`rlmetrics.ranks`: a reward
  weighted by samples, token counts summed, phase seconds as stragglers), and every worker's
  raw dict is appended, with its rank, to one JSONL file (``raw_path``);
- logs the run's ``train_loop_config`` as its hyperparameters, once;
- logs each failure Ray hands it (``after_exception``: workers that raised or died) as one
  row under ``ray_train/failure`` at the last reported step, before Ray retries
  (``FailureConfig(max_failures=...)``, whose restarted workers report their steps again) or
  ends the run;
- with ``telemetry=`` (``rlmetrics.start``'s arguments), starts telemetry in the controller
  as part of the driver's run: the driver's run identity (:func:`rlmetrics_ray.runtime_env`,
  taken where the callback is made) is applied to the controller's environment first, so
  its series carry the driver's ``rlmetrics.run.id``, its exporter settings, and the
  controller's own ``process.pid`` and Ray node.

Nothing it does can fail a report: every call is guarded. Ray offers a ``UserCallback`` no
end-of-run call, and kills the controller once the driver has the result, so its Logger
would never be finished: :meth:`RLMetricsTrainCallback.run_callbacks` adds a controller
callback (Ray Train's ``ControllerCallback``, a DeveloperAPI: Ray runs a ``UserCallback``'s
report hooks only) whose ``after_controller_finish`` finishes it as the run ends. Telemetry
started here is shut down (bounded) then too, exporting the last reports.

Importing this module imports Ray Train; ``import rlmetrics_ray`` does not import it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ray.train import UserCallback

try:  # Ray Train V2's controller hooks (2.60: a DeveloperAPI, not a UserCallback's)
    from ray.train.v2._internal.execution.callback import ControllerCallback
except ImportError:  # pragma: no cover - an older Ray Train: no run end to hook
    ControllerCallback = None

import rlmetrics
from rlmetrics import KeyMap
from rlmetrics.adapters import AdapterLogger, guarded
from rlmetrics.flatten import flatten
from rlmetrics.ranks import GATHERED_RAW_PATH, RankMerger, gathered
from rlmetrics.spec import Reduce, Reduction

from .workers import WORKER_PREFIX, runtime_env

__all__ = ["CONTROLLER_GROUP", "FAILURE_PREFIX", "WORKER_PREFIX", "RLMetricsTrainCallback"]

#: The ``rl.worker_group`` of the Train controller's telemetry.
CONTROLLER_GROUP = "ray_train_controller"
#: The prefix of the row each worker failure makes: ``count`` (the run's failures so far),
#: ``workers`` (how many raised or died), ``ranks`` (their world ranks, as text) and
#: ``error`` (the first one's type and message's first line).
FAILURE_PREFIX = "ray_train/failure"
#: How much of a failure's message its row keeps.
_ERROR_CHARS = 300
_ADAPTER = "rlmetrics-ray train"


class RLMetricsTrainCallback(UserCallback):  # type: ignore[misc]
    """Send what Ray Train workers report to rlmetrics, from the Train controller.

    :param backends: ``Logger``'s ``backends`` (default: the JSONL backend; a relative path
        is relative to the controller's working directory).
    :param key_map: which reported key is which rlmetrics series.
    :param prefix: the prefix of rank 0's dict.
    :param step_key: the reported key that holds the trainer's step.
    :param all_workers: also log each worker's dict to the backends, under ``worker/<rank>``.
    :param telemetry: ``rlmetrics.start`` arguments (``{"exporters": ["otlp"]}``) to start
        telemetry in the controller; None leaves it off (the backends still get every row).
    :param run_id: the run the controller's telemetry belongs to; default: the driver's.
    :param ranks: log the workers' dicts merged into the run's (one row per report) instead
        of world rank 0's. The controller holds every worker's report, so the merge needs no
        collective: :meth:`rlmetrics.ranks.RankMerger.merge_gathered`.
    :param reductions: ``{key: reduction}`` for keys no series declares (else a mean).
    :param raw_path: with ``ranks``, the workers' raw rows (each with its ``rank``; the
        worker's host is not known in the controller: ``null``); None writes none.
    """

    def __init__(
        self,
        *,
        backends: Mapping[str, Mapping[str, Any] | None] | None = None,
        key_map: str | KeyMap | None = None,
        prefix: str = "train",
        step_key: str = "step",
        all_workers: bool = False,
        telemetry: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        ranks: bool = False,
        reductions: Mapping[str, Reduction | Reduce | str] | None = None,
        raw_path: str | os.PathLike[str] | None = GATHERED_RAW_PATH,
    ) -> None:
        self.logs = AdapterLogger(backends=backends, key_map=key_map, adapter=_ADAPTER)
        self.prefix = prefix
        self.step_key = step_key
        self.all_workers = all_workers
        self.telemetry = None if telemetry is None else dict(telemetry)
        # The driver's run, as environment variables: applied in the controller before its
        # telemetry starts (where this object is unpickled, the driver's handle is gone).
        carried = rlmetrics.current() is not None or run_id is not None
        self.identity: dict[str, str] = (
            runtime_env(CONTROLLER_GROUP, run_id=run_id)["env_vars"] if carried else {}
        )
        self.ranks = ranks
        self.reductions = None if reductions is None else dict(reductions)
        self.raw_path = raw_path
        self._merger: RankMerger | None = None
        self._reports = 0
        self._started = False
        self._last_step = 0
        self._failures = 0
        #: The telemetry this callback started in the controller (shut down at the run's end).
        self._telemetry: Any = None

    def _start_telemetry(self) -> None:
        """In the controller, before its first row: telemetry as part of the driver's run."""
        if self.telemetry is None or rlmetrics.current() is not None:
            return
        os.environ.update(self.identity)
        try:
            self._telemetry = rlmetrics.start(**self.telemetry)
        except Exception:
            rlmetrics.warn_once(
                "ray-train:telemetry",
                "rlmetrics-ray: telemetry could not start in the Ray Train controller; the "
                "backends still get every report",
            )

    @guarded(_ADAPTER, "the run's configuration")
    def _log_config(self, run_context: Any) -> None:
        config = getattr(run_context, "train_loop_config", None)
        logger = self.logs.start() if config else None
        if logger is not None:
            logger.log_hyperparams(config)

    def _step(self, metrics: Mapping[str, Any]) -> int:
        value = rlmetrics.as_number(metrics.get(self.step_key))
        return int(value) if value is not None else self._reports

    @guarded(_ADAPTER, "after_report")
    def after_report(
        self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any = None
    ) -> None:
        if not metrics:
            return
        logger = self._begin(run_context)
        if logger is None:  # never here: nothing finishes this callback's Logger but its exit
            return
        self._reports += 1
        first = metrics[0] or {}
        step = self._last_step = self._step(first)
        if self.ranks and len(metrics) > 1:
            merged = self._merged(logger, metrics, step)
            logger.log_metrics(merged, step=step, prefix=self.prefix)
        else:
            logger.log_metrics(first, step=step, prefix=self.prefix)
        if self.all_workers:
            for rank, reported in enumerate(metrics):
                logger.log_metrics(reported or {}, step=step, prefix=f"{WORKER_PREFIX}/{rank}")

    @guarded(_ADAPTER, "after_exception")
    def after_exception(self, run_context: Any, worker_exceptions: Mapping[int, Any]) -> None:
        """Workers raised or died: one row under :data:`FAILURE_PREFIX` at the last reported
        step. Ray retries the run after it (restarted workers report their steps again) or
        ends it, and without the row neither shows in the run's rows."""
        if not worker_exceptions:
            return
        logger = self._begin(run_context)
        if logger is None:
            return
        self._failures += 1
        ranks = sorted(worker_exceptions)
        first = worker_exceptions[ranks[0]]
        message = str(first).strip().splitlines()
        error = f"{type(first).__name__}: {message[0] if message else ''}"[:_ERROR_CHARS]
        logger.log_metrics(
            {
                "count": self._failures,
                "workers": len(ranks),
                "ranks": ",".join(str(rank) for rank in ranks),
                "error": error,
            },
            step=self._last_step,
            prefix=FAILURE_PREFIX,
        )

    def _begin(self, run_context: Any) -> rlmetrics.Logger | None:
        """The Logger, with the controller's telemetry and the run's configuration started on
        the first call (a report, or a failure before any)."""
        if not self._started:
            self._started = True
            self._start_telemetry()
            self._log_config(run_context)
        return self.logs.start()

    def _merged(
        self, logger: rlmetrics.Logger, metrics: list[dict[str, Any]], step: int
    ) -> dict[str, Any]:
        """Every worker's dict merged into the run's (rank 0's where the merge cannot)."""
        if self._merger is None:  # built in the controller, on its first report
            self._merger = gathered(raw_path=self.raw_path, reductions=self.reductions)
            self._merger.bind(logger.identity)
        flat = [flatten(reported or {}) for reported in metrics]
        return self._merger.merge_gathered(flat, step, self.prefix)

    def run_callbacks(self) -> list[Any]:
        """What to give ``RunConfig(callbacks=...)``: this callback and one that finishes its
        Logger when the run ends (Ray calls a ``UserCallback`` at no run end, and kills the
        controller then: a queued tracker's last rows would be lost). Shipped together, the
        two are one callback in the controller. An older Ray Train without controller
        callbacks gets this callback alone."""
        if ControllerCallback is None:
            return [self]
        return [self, _RunEnd(self)]

    @guarded(_ADAPTER, "the run's end")
    def end_run(self, failed: bool) -> None:
        """The run ended (``failed``: with an error, Ray's retries spent): the Logger built
        here is finished, as a failed run when it failed (W&B exit code 1, MLflow FAILED),
        and the telemetry started here shut down, exporting the reports since its last
        export (Ray kills the controller next: its exit would export nothing)."""
        try:
            self.logs.finish(failed=failed)
        finally:
            started, self._telemetry = self._telemetry, None
            if started is not None:
                started.shutdown(failed=failed)

    def __getstate__(self) -> dict[str, Any]:
        # Shipped to the controller as configuration: what was started here stays here.
        state = dict(self.__dict__)
        state["_merger"] = None
        state["_started"] = False
        state["_reports"] = 0
        state["_last_step"] = 0
        state["_failures"] = 0
        state["_telemetry"] = None
        return state


class _RunEnd(ControllerCallback or object):  # type: ignore[misc]
    """The controller callback :meth:`RLMetricsTrainCallback.run_callbacks` adds: at the
    run's end (``after_controller_finish``, before the driver gets the result) it ends the
    callback's run, failed when the result holds an error."""

    def __init__(self, callback: RLMetricsTrainCallback) -> None:
        self.callback = callback

    def after_controller_finish(self, result: Any) -> None:
        self.callback.end_run(getattr(result, "error", None) is not None)
