"""TRL's completions and rewards as rlmetrics trajectory records: one per completion.

TRL's GRPO and RLOO trainers keep the last generation batch, gathered from every process, in
``trainer._logs`` (what their ``log_completions`` table and parquet files are made of):
parallel deques ``prompt``, ``completion``, ``advantages`` and, per reward function,
``rewards[name]`` (a reward function's ``None`` is NaN there), filled when a batch is
generated, before the steps that train on it: at the end of the first of them (a callback's
``on_step_end``) they hold it, and at ``on_log`` the batch the logged step trained on.
transformers hands a callback no trainer, so
:func:`calling_trainer` finds the one calling it on the call stack.

Only training completions are logged: an evaluation's (GRPO fills the same deques in
``evaluate()``) would mix into the training rollouts' reward metrics. A batch can be logged
twice (a generation batch that serves several optimizer steps, or no new generation between
two logs): :class:`CompletionReader` hands over only completions it has not
handed over before, told apart by their advantage objects (``Tensor.tolist()`` makes a fresh
float for each, and the reader holds the last batch's, so no id is reused while it compares).

Each completion becomes ``{"sample_id": "<step>-<i>", "group_id": "<step>-g<i // G>",
"reward": TRL's weighted sum, "rewards": one per reward function that scored it, "turns": one
generation}`` (a function's None, TRL's NaN, is no reward: TRL leaves it out of its means);
the prompt and completion text are read only when the trajectory text policy keeps text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rlmetrics.adapters import caller
from rlmetrics.trajectories import as_text, settings

__all__ = ["CompletionReader", "calling_trainer", "completion_records"]

#: How far up the call stack a callback looks for the trainer calling it (the callback, the
#: handler's ``call_event``, the handler's ``on_*``, the trainer's method: 4; room to spare).
_STACK_DEPTH = 12
#: A model name past this length is cut to its last path part (a local checkpoint's path).
_MAX_MODEL_NAME = 128


def calling_trainer() -> Any:
    """The nearest object up the call stack that calls callbacks through a
    ``callback_handler`` (a ``Trainer``: a callback's caller's caller), None when there is
    none. The nearest, not the one holding this callback: a callback wrapped in another (a
    profiler's, say) is called all the same."""
    return caller(_a_trainer, _STACK_DEPTH)


def _a_trainer(local: Mapping[str, Any]) -> Any:
    owner = local.get("self")
    return owner if getattr(owner, "callback_handler", None) is not None else None


def _model_name(trainer: Any) -> str | None:
    name = getattr(getattr(getattr(trainer, "model", None), "config", None), "name_or_path", None)
    if type(name) is not str or not name:
        return None
    if len(name) > _MAX_MODEL_NAME:
        name = name.rstrip("/").rsplit("/", 1)[-1][:_MAX_MODEL_NAME]
    return name


def _weights(trainer: Any, count: int) -> list[float]:
    weights = getattr(trainer, "reward_weights", None)
    try:
        values = [float(w) for w in weights.tolist()]  # type: ignore[union-attr]
    except Exception:
        return [1.0] * count
    return values if len(values) == count else [1.0] * count


def _unscored(value: Any) -> bool:
    """Whether a reward function gave this completion no reward: TRL's NaN (its None), or
    nothing at all (a column shorter than the batch)."""
    return value is None or (type(value) is float and value != value)


def _weighted_sum(values: Sequence[Any], weights: Sequence[float]) -> float | None:
    """TRL's total reward: the weighted sum over the reward functions that scored it (NaN is
    a function that returned None); None when none did."""
    scored = [(v, w) for v, w in zip(values, weights, strict=True) if type(v) is float and v == v]
    if not scored:
        return None
    return math.fsum(v * w for v, w in scored)


def completion_records(
    trainer: Any, indices: Sequence[int], step: int, *, group_size: int | None = None
) -> list[dict[str, Any]]:
    """The trajectory records of the completions at ``indices`` of ``trainer._logs``."""
    logs = trainer._logs
    rewards: Mapping[str, Sequence[Any]] = logs.get("rewards", {})
    names = list(rewards)
    columns = [list(rewards[name]) for name in names]
    weights = _weights(trainer, len(names))
    size = group_size or 1
    policy = settings().text
    prompts = list(logs.get("prompt", ())) if policy.keeps else []
    completions = list(logs.get("completion", ())) if policy.keeps else []
    model = _model_name(trainer)
    records = []
    for index in indices:
        values = [column[index] if index < len(column) else None for column in columns]
        record: dict[str, Any] = {
            "sample_id": f"{step}-{index}",
            "group_id": f"{step}-g{index // size}",
            # A function's None (NaN in TRL's tensor) is "does not apply to this completion",
            # which TRL leaves out of its means: no reward of that function, not a bad value.
            "rewards": [
                {"value": value, "component": name}
                for name, value in zip(names, values, strict=True)
                if not _unscored(value)
            ],
            "turns": [{"generations": [{"model": model}]}],
        }
        total = _weighted_sum(values, weights)
        if total is not None:
            record["reward"] = total
        if policy.keeps:
            if index < len(prompts):
                record["prompt"] = as_text(prompts[index])
            if index < len(completions):
                record["completion"] = as_text(completions[index])
        records.append(record)
    return records


class CompletionReader:
    """Reads the completions a TRL trainer holds that it has not read before (see the
    module's docstring)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: list[Any] = []

    def new_records(self, trainer: Any, step: int) -> list[dict[str, Any]]:
        """The records of the completions ``trainer`` logged since the last call (none
        without a TRL trainer that keeps completions)."""
        logs = getattr(trainer, "_logs", None)
        if not isinstance(logs, Mapping):
            return []  # not a trainer that keeps its completions
        advantages = list(logs.get("advantages", ()))
        held = {id(a) for a in self._held}
        fresh = [i for i, a in enumerate(advantages) if id(a) not in held]
        self._held = advantages
        if not fresh or not getattr(getattr(trainer, "model", None), "training", True):
            return []  # an evaluation's completions: read (so never later), not logged
        size = getattr(trainer, "num_generations", None)
        return completion_records(
            trainer, fresh, step, group_size=size if type(size) is int and size > 0 else None
        )
