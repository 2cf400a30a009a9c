"""This distribution's built-in trajectory checks, offered through its own
``gym_health_checks`` hook and entry point (``rlmetrics_gym`` group), exactly as a third-party
distribution offers its checks.

They read only the rollout's final response (Responses API shape: ``response.output``,
``response.status``, ``response.usage.output_tokens``), which every Gym rollout record carries;
a check whose field is absent could not run (None), which makes the rollout ``unobserved``
rather than ``healthy``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from .health import TrajectoryCheck, health_hookimpl

__all__ = ["BUILTIN_CHECKS", "gym_health_checks"]


def _response(rollout: Mapping[str, Any]) -> Mapping[str, Any] | None:
    response = rollout.get("response")
    return response if isinstance(response, Mapping) else None


def response_output_empty(rollout: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The final response has no output items: the agent produced nothing."""
    response = _response(rollout)
    if response is None or not isinstance(response.get("output"), list):
        return None
    return [] if response["output"] else [{"output_items": 0}]


def response_not_completed(rollout: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The final response's status is not ``completed`` (``incomplete``, ``failed``…)."""
    response = _response(rollout)
    status = None if response is None else response.get("status")
    if not isinstance(status, str):
        return None
    return [] if status == "completed" else [{"status": status[:64]}]


def response_zero_output_tokens(rollout: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The final response reports zero output tokens (could not run without a count from 0)."""
    response = _response(rollout)
    usage = None if response is None else response.get("usage")
    tokens = usage.get("output_tokens") if isinstance(usage, Mapping) else None
    if isinstance(tokens, bool) or not isinstance(tokens, (int, float)):
        return None
    if not math.isfinite(tokens) or tokens < 0:  # NaN (Python's json writes it) or junk
        return None
    return [{"output_tokens": 0}] if tokens == 0 else []


BUILTIN_CHECKS: tuple[TrajectoryCheck, ...] = (
    TrajectoryCheck(
        "response_output_empty", response_output_empty, "final response has no output items"
    ),
    TrajectoryCheck(
        "response_not_completed", response_not_completed, "final response status is not completed"
    ),
    TrajectoryCheck(
        "response_zero_output_tokens",
        response_zero_output_tokens,
        "final response reports zero output tokens",
    ),
)


@health_hookimpl
def gym_health_checks() -> Iterable[TrajectoryCheck]:
    return BUILTIN_CHECKS
