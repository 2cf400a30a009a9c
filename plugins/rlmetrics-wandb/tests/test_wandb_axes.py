"""StepAxes: which define_metric calls a sequence of logged dicts produces."""

from __future__ import annotations

from typing import Any

from rlmetrics_wandb.axes import StepAxes

from rlmetrics.events import ROLLOUT_EVENT_TYPES, STEP_KEY, WALL_TIME_KEY


class _Definitions:
    """Collects define_metric calls as (name, step_metric, step_sync)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None, bool]] = []

    def __call__(self, name: str, step_metric: str | None = None, step_sync: bool = False,
                 **_: Any) -> None:
        self.calls.append((name, step_metric, step_sync))


def test_axes_and_rollout_streams_are_defined_up_front() -> None:
    defined = _Definitions()
    StepAxes(defined)
    assert defined.calls[:2] == [(STEP_KEY, None, False), (WALL_TIME_KEY, None, False)]
    assert sorted(defined.calls[2:]) == sorted(
        (f"{prefix}/*", WALL_TIME_KEY, False) for prefix in ROLLOUT_EVENT_TYPES
    )


def test_a_trainer_prefix_is_bound_by_glob_once() -> None:
    defined = _Definitions()
    axes = StepAxes(defined, rollout_prefixes=())
    axes.bind("train", ["train/loss", STEP_KEY])
    axes.bind("train", ["train/loss", "train/new_key", STEP_KEY])
    assert defined.calls[2:] == [("train/*", STEP_KEY, True)]


def test_keys_without_a_safe_glob_are_bound_one_by_one() -> None:
    defined = _Definitions()
    axes = StepAxes(defined, rollout_prefixes=("timing/rollout_checkpoint",))
    # "timing/*" would also match the rollout stream, and "" has no glob at all.
    axes.bind("timing", ["timing/generation", STEP_KEY])
    axes.bind("", ["loss", "efficiency/idle_s", "loss", STEP_KEY])
    axes.bind("", ["timing/rollout_checkpoint/x"])  # its stream's glob already binds it
    assert defined.calls[3:] == [
        ("timing/generation", STEP_KEY, True),
        ("loss", STEP_KEY, True),
        ("efficiency/idle_s", STEP_KEY, True),
    ]


def test_rollout_prefixes_are_recognised() -> None:
    axes = StepAxes(_Definitions())
    assert all(axes.is_rollout(prefix) for prefix in ROLLOUT_EVENT_TYPES)
    assert not axes.is_rollout("train")
