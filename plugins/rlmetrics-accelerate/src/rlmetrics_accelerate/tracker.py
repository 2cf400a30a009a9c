"""``RLMetricsTracker``: an Accelerate ``GeneralTracker`` that writes to an
:class:`rlmetrics.Logger`.

``Accelerator(log_with=[RLMetricsTracker()])`` calls it like its built-in trackers:
``start`` in ``init_trackers`` (the Logger is built then, on the main process only),
``store_init_configuration`` with ``init_trackers``' ``config`` (the run's hyperparameters),
``log`` for each ``Accelerator.log(values, step=...)``, ``finish`` in ``end_training``.

``end_training`` is the loop's explicit end: the Logger built here is finished there, once
(else when the tracker is garbage-collected, or at interpreter exit: :mod:`rlmetrics.adapters`).
One tracker is one run: what is logged through it after ``end_training`` is dropped and said
once, never written to a second run under the same run id.

Every call is guarded: nothing here can fail the training loop, unless strict mode is on,
where a ``StrictModeError`` stops the loop as asked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from accelerate import Accelerator
from accelerate.tracking import GeneralTracker, on_main_process

from rlmetrics import KeyMap, Logger, warn_once
from rlmetrics.adapters import (
    AdapterLogger,
    HandedAgain,
    caller,
    guarded,
    merges_ranks,
    stands_down,
)
from rlmetrics.values import as_real, as_step

__all__ = ["RLMetricsTracker", "calling_accelerator", "whole_step"]

_ADAPTER = "rlmetrics-accelerate"
#: How far up the call stack a tracker looks for the Accelerator calling it (the guard, the
#: main-process wrapper, ``Accelerator.log``: 3; room to spare).
_STACK_DEPTH = 8


def calling_accelerator() -> Accelerator | None:
    """The ``Accelerator`` calling a tracker, found on the call stack (Accelerate hands its
    trackers none); None when called otherwise (by hand)."""
    found: Accelerator | None = caller(_an_accelerator, _STACK_DEPTH)
    return found


def whole_step(step: Any) -> Any:
    """Accelerate's ``step`` as the Logger's: an integer as it is; a float (``step /
    accumulation`` is one, and so is ``epoch + batch / batches``) at its whole part, as
    Accelerate's TensorBoard tracker writes it (``int(step)``), a fraction said once. The
    Logger takes integer steps only and logs a float's row at the step after the last: every
    row one off its step, and epoch fractions out of order with the whole ones. Anything else
    (a negative or NaN step, a string) goes on as it is, for the Logger to say."""
    if step is None or as_step(step) is not None:
        return step
    number = as_real(step)
    if number is None or not math.isfinite(number) or number < 0:
        return step
    whole = int(number)
    if whole != number:
        warn_once(
            f"{_ADAPTER}:fraction-step",
            f"rlmetrics: {_ADAPTER}: Accelerator.log's step {number!r} is not a whole number; "
            f"its row is logged at step {whole} (the whole part, as Accelerate's TensorBoard "
            "tracker does), and so are later fractions' (pass the optimizer step as an integer "
            "for one row per step)",
        )
    return whole


def _an_accelerator(local: Mapping[str, Any]) -> Accelerator | None:
    owner = local.get("self")
    return owner if isinstance(owner, Accelerator) else None


class RLMetricsTracker(GeneralTracker):  # type: ignore[misc]
    """Send what an Accelerate loop logs to rlmetrics.

    :param logger: an :class:`rlmetrics.Logger` to write to (finished by its owner; one
        built with ``ranks=`` is refused: Accelerate calls trackers on the main process only,
        :func:`~rlmetrics_accelerate.log_ranks` merges the ranks); without one, the tracker
        builds its own from ``backends`` and ``key_map`` in ``init_trackers``
        and finishes it in ``end_training``.
    :param backends: ``Logger``'s ``backends`` for the Logger built here (default: the JSONL
        backend, ``./rlmetrics.jsonl`` in the working directory of the main process).
    :param key_map: which of your keys is which rlmetrics series (a name such as ``"trl"``
        or ``"verl"``, or a :class:`rlmetrics.KeyMap`).
    :param prefix: the prefix every dict is logged under.
    """

    name = "rlmetrics"
    requires_logging_directory = False
    main_process_only = True

    def __init__(
        self,
        logger: Logger | None = None,
        *,
        backends: Mapping[str, Mapping[str, Any] | None] | Iterable[str] | str | None = None,
        key_map: str | KeyMap | None = None,
        prefix: str = "train",
    ) -> None:
        if merges_ranks(logger):
            raise ValueError(
                f"{_ADAPTER}: the Logger given to RLMetricsTracker was built with ranks=, but "
                "Accelerate calls its trackers on the main process only, so its merges would "
                "wait for ranks that never call it. Give the tracker a rlmetrics.Logger() "
                "without ranks= (or none), and call rlmetrics_accelerate.log_ranks(accelerator, "
                "values, step=step) on every rank in place of accelerator.log: it merges the "
                "ranks' values and hands the run's to the tracker"
            )
        super().__init__()
        self.logs = AdapterLogger(logger, backends=backends, key_map=key_map, adapter=_ADAPTER)
        self.prefix = prefix
        self._last_step = 0
        #: Each init_trackers lists the tracker again, and Accelerator.log hands the one dict
        #: to each entry: written once.
        self._handed_again = HandedAgain()

    @property
    def tracker(self) -> Logger | None:
        """The rlmetrics Logger (on the main process, once ``init_trackers`` ran)."""
        return self.logs.logger

    @on_main_process  # type: ignore[untyped-decorator,misc]
    @guarded(_ADAPTER, "start")
    def start(self) -> None:
        if not self._stands_down():
            self.logs.start()

    @on_main_process  # type: ignore[untyped-decorator,misc]
    @guarded(_ADAPTER, "store_init_configuration")
    def store_init_configuration(self, values: Mapping[str, Any]) -> None:
        # Each init_trackers stores it again (once per time the tracker is listed): an
        # unchanged configuration is logged once.
        if not self._stands_down():
            self.logs.log_hyperparams(values)

    @on_main_process  # type: ignore[untyped-decorator,misc]
    @guarded(_ADAPTER, "log")
    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs: Any) -> None:
        if self._handed_again(values, step) or self._stands_down():
            return
        step = whole_step(step)
        if step is None:  # Accelerator.log's step is optional; keep the last one
            step = self._last_step
        self._last_step = step
        logger = self.logs.start()
        if logger is not None:
            logger.log_metrics(values, step=step, prefix=self.prefix)

    def _stands_down(self) -> bool:
        """Whether an earlier ``RLMetricsTracker`` on the calling Accelerator logs."""
        accelerator = calling_accelerator()
        trackers = accelerator.trackers if accelerator is not None else ()
        return stands_down(_ADAPTER, self, RLMetricsTracker, trackers, "the Accelerator")

    @on_main_process  # type: ignore[untyped-decorator,misc]
    @guarded(_ADAPTER, "finish")
    def finish(self) -> None:
        self.logs.finish()
