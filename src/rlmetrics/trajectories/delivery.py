"""One batch of trajectory records to its three outputs: spans (within the span budget), one
sample row each (``Logger.log_samples``) and the ``on_trajectories`` hook, whose families
record the metrics. The live form and ``Logger.log_trajectories`` both end here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import plugins as _plugins
from .._warn import describe_value, warn_once
from ..tracing._state import state
from ..tracing.scopes import current_step
from ..values import INT64_MAX, as_step
from .held_rows import hold_rows
from .records import Trajectory, TrajectoryBatch
from .rows import row_of
from .settings import settings
from .spans import emit, now_ns

if TYPE_CHECKING:
    from ..logger import Logger

__all__ = ["SAMPLES_NAME", "deliver"]

#: The samples table trajectories are logged as.
SAMPLES_NAME = "trajectories"


def _trace_id(context: Any, binding: Any) -> str | None:
    """The trace id of the span in ``context``; None for a span the sampler left out (it is
    never exported: its id would name a trace no backend has)."""
    try:
        span_context = binding.get_current_span(context).get_span_context()
        if not span_context.trace_flags.sampled:
            return None
        return f"{span_context.trace_id:032x}"
    except Exception:
        return None


def _trace_ids(contexts: Sequence[Any], binding: Any, count: int) -> list[str | None]:
    """Each trajectory's trace id (None where it has no exported span: not tracing, over
    budget, not sampled)."""
    if not contexts:
        return [None] * count
    return [None if c is None else _trace_id(c, binding) for c in contexts]


def _trainer_weight_version() -> int | None:
    """The open step's ``weight_version``, when it is an integer (a NumPy or torch one too):
    the policy being trained."""
    steps = state.steps
    if not steps:
        return None
    version = steps[-1]._tag_values[0]
    if type(version) is int:
        return version
    if version is None or isinstance(version, (str, bool)):
        return None
    return as_step(version)  # a NumPy or torch integer, as the step's span takes it


def deliver(
    trajectories: Sequence[Trajectory],
    step: Any,
    logger: Logger | None,
    *,
    name: str = SAMPLES_NAME,
    budgeted: bool = True,
    parent: Any = None,
    call: str = "Logger.log_trajectories",
) -> TrajectoryBatch:
    """Spans, rows and metrics of ``trajectories`` at ``step`` (see the module's docstring).
    ``parent`` is the context their spans start in (default: the current span's, else the
    open step's, else the process's ``TRACEPARENT``); ``call`` is what a bad ``step`` was
    given to, for the warning. The rows wait for the rest of their step's, to be one table
    (:mod:`.held_rows`). Never raises."""
    number: int | None
    if (
        step is not None
        and not (type(step) is int and 0 <= step <= INT64_MAX)
        and as_step(step) is None
    ):
        # Said here, naming the call it was given to (the Logger's own message names
        # log_metrics), then treated as missing, as log_metrics treats it.
        otherwise = "the step after the last" if logger is not None else "without one"
        warn_once(
            f"trajectory:step:{call}",
            f"rlmetrics: the step given to {call} must be an integer from 0 (a NumPy or torch "
            f"integer counts), got {describe_value(step)}; it is logged as if none were given "
            f"(at the open rlmetrics.step's, else {otherwise})",
        )
        step = None
    if logger is not None:
        number = logger._next_step(step)
    else:
        number = as_step(step) if step is not None else None
        if number is None:
            number = current_step()
    binding = state.binding
    contexts: list[Any] = []
    dropped = 0
    if binding is not None and trajectories:
        keep = settings().budget.select(trajectories) if budgeted else None
        try:
            if parent is None:
                parent = binding.parent()
            now = now_ns()
            for index, trajectory in enumerate(trajectories):
                if keep is not None and not keep[index]:
                    contexts.append(None)
                    dropped += 1
                    continue
                try:
                    contexts.append(emit(binding, trajectory, number, parent, now))
                except Exception:
                    contexts.append(None)
                    warn_once(
                        "trajectory:spans",
                        "rlmetrics: a trajectory's spans could not be recorded; its row and "
                        "metrics are logged",
                    )
        except Exception:
            warn_once(
                "trajectory:trace", "rlmetrics: trajectory spans failed; rows and metrics go on"
            )
        if dropped:
            warn_once(
                "trajectory:budget",
                f"rlmetrics: the trajectory span budget left {dropped} of {len(trajectories)} "
                "trajectories of a batch without spans (they keep their rows and metrics; "
                "rl.trajectory.spans.dropped counts them; rlmetrics.trajectories.configure("
                "budget=...) sets it). Said once",
                expected=True,
            )
    batch = TrajectoryBatch(
        number, tuple(trajectories), tuple(contexts), dropped, _trainer_weight_version()
    )
    # Rows only for a Logger that writes them (building them is most of a batch's own cost):
    # its backends, or a rank's raw file; a finished one says so below, as log_trajectories.
    if logger is not None and trajectories and logger._takes_samples():
        trace_ids = _trace_ids(contexts, binding, len(trajectories))
        try:
            if not logger._finished:
                rows = [row_of(t, i) for t, i in zip(trajectories, trace_ids, strict=True)]
                hold_rows(logger, rows, number if number is not None else 0, name)
        except Exception:
            warn_once("trajectory:rows", "rlmetrics: trajectory rows could not be logged")
        try:  # the backends that show traces of their own (Trackio) take the records too
            logger._call_backends(
                "log_trajectories",
                tuple(trajectories),
                number if number is not None else 0,
                tuple(trace_ids),
            )
        except Exception:
            warn_once("trajectory:traces", "rlmetrics: trajectories could not reach a backend")
    _plugins.hooks().on_trajectories(batch)
    return batch
