"""StepAxes: which define_metric calls a sequence of logged dicts produces."""

from __future__ import annotations

from typing import Any

from rlmetrics_wandb.axes import StepAxes

from rlmetrics.events import STEP_KEY, WALL_TIME_KEY


class _Definitions:
    """Collects define_metric calls as (name, step_metric, step_sync)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, bool]] = []

    def __call__(
        self, name: str, step_metric: str | None = None, step_sync: bool = False, **_: Any
    ) -> None:
        self.calls.append((name, step_metric, step_sync))


def test_the_axes_are_defined_up_front() -> None:
    defined = _Definitions()
    StepAxes(defined)
    assert defined.calls == [(STEP_KEY, None, False), (WALL_TIME_KEY, None, False)]


def test_each_key_is_bound_once_to_its_dicts_axis() -> None:
    defined = _Definitions()
    axes = StepAxes(defined)
    axes.bind(["train/loss", STEP_KEY], STEP_KEY)
    axes.bind(["train/loss", "train/new_key", STEP_KEY], STEP_KEY)
    # A stream under a prefix that shares a trainer prefix's head stays on its own axis.
    axes.bind(["timing/rollout_checkpoint/total_save_seconds", WALL_TIME_KEY], WALL_TIME_KEY)
    axes.bind(["timing/generation"], STEP_KEY)
    assert defined.calls[2:] == [
        ("train/loss", STEP_KEY, True),
        ("train/new_key", STEP_KEY, True),
        ("timing/rollout_checkpoint/total_save_seconds", WALL_TIME_KEY, False),
        ("timing/generation", STEP_KEY, True),
    ]
