"""``RLMetricsLogger``: a Lightning ``Logger`` that writes to an :class:`rlmetrics.Logger`.

Lightning hands its loggers what a ``LightningModule`` logs (``self.log``), already reduced to
floats, with the trainer's global step; the hyperparameters (``save_hyperparameters``); and
``finalize(status)`` when the run ends. Each becomes one Logger call; only rank zero logs, as
Lightning's own loggers do. Every call is guarded: nothing here can fail the trainer's step.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Mapping
from typing import Any

from lightning.pytorch.loggers import Logger as LightningLogger
from lightning.pytorch.utilities import rank_zero_only

from rlmetrics import KeyMap, Logger
from rlmetrics.adapters import AdapterLogger, guarded

__all__ = ["RLMetricsLogger"]

_ADAPTER = "rlmetrics-lightning"


class RLMetricsLogger(LightningLogger):  # type: ignore[misc]
    """Send what a Lightning ``Trainer`` logs to rlmetrics.

    :param logger: an :class:`rlmetrics.Logger` to write to (finished by its owner); without
        one, the logger builds its own from ``backends`` and ``key_map`` when the run starts
        logging and finishes it in ``finalize``.
    :param backends: ``Logger``'s ``backends`` for the Logger built here.
    :param key_map: which of your keys is which rlmetrics series (a name or a
        :class:`rlmetrics.KeyMap`); Lightning's keys are yours, so there is no default.
    :param prefix: the prefix every dict is logged under (``train``: the prefix the training
        scalars and key maps read).
    :param name: / :param version: what Lightning shows for this logger.
    """

    def __init__(
        self,
        logger: Logger | None = None,
        *,
        backends: Mapping[str, Mapping[str, Any] | None] | None = None,
        key_map: str | KeyMap | None = None,
        prefix: str = "train",
        name: str = "rlmetrics",
        version: str | int = 0,
    ) -> None:
        super().__init__()
        self.logs = AdapterLogger(logger, backends=backends, key_map=key_map, adapter=_ADAPTER)
        self.prefix = prefix
        self._name = name
        self._version = version
        self._last_step = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str | int:
        return self._version

    @property
    def experiment(self) -> Logger | None:
        """The rlmetrics Logger (on rank zero, once the run has logged)."""
        return self.logs.logger

    @rank_zero_only  # type: ignore[untyped-decorator,misc]
    @guarded(_ADAPTER, "log_hyperparams")
    def log_hyperparams(
        self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any
    ) -> None:
        self.logs.start().log_hyperparams(vars(params) if isinstance(params, Namespace) else params)

    @rank_zero_only  # type: ignore[untyped-decorator,misc]
    @guarded(_ADAPTER, "log_metrics")
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if step is None:  # Lightning passes its global step; a direct call may not
            step = self._last_step
        self._last_step = step
        self.logs.start().log_metrics(metrics, step=step, prefix=self.prefix)

    @rank_zero_only  # type: ignore[untyped-decorator,misc]
    @guarded(_ADAPTER, "finalize")
    def finalize(self, status: str) -> None:
        self.logs.finish()
