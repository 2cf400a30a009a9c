"""The process's trajectory settings: the text policy and the span budget
(:func:`configure`), read by every trajectory the process logs."""

from __future__ import annotations

from typing import Any

import attrs

from .._process_state import resets_process_state
from .budget import SpanBudget
from .text import Redactor, TextPolicy, check_max_bytes

__all__ = ["TrajectorySettings", "configure", "settings"]


@attrs.frozen(slots=True)
class TrajectorySettings:
    """What :func:`configure` set: the text policy and the span budget."""

    text: TextPolicy = attrs.field(factory=TextPolicy)
    budget: SpanBudget = attrs.field(factory=SpanBudget)


_settings = TrajectorySettings()


def settings() -> TrajectorySettings:
    """The settings in force."""
    return _settings


_UNSET: Any = object()


def configure(
    *,
    text: str | None = None,
    redact: Redactor | None = _UNSET,
    max_text_bytes: int | None = None,
    budget: SpanBudget | None = None,
) -> TrajectorySettings:
    """Set how this process logs trajectories; what is not given stays as it is.

    :param text: the text policy: ``off`` (the default: no prompt, completion or tool text
        leaves the process), ``hash``, ``redacted`` (with ``redact``) or ``full``
        (:mod:`rlmetrics.trajectories.text`).
    :param redact: ``redact(text, field) -> str`` for the ``redacted`` policy.
    :param max_text_bytes: the UTF-8 bytes one kept text may hold (default: the samples
        path's cell cap, 32 KB).
    :param budget: which trajectories of a batch get spans (:class:`SpanBudget`).

    A mistake (an unknown policy, ``redacted`` without ``redact``, a ``max_text_bytes`` that
    is no positive int) raises ``ValueError`` here.
    """
    global _settings
    current = _settings
    policy = current.text
    if max_text_bytes is not None:  # named as this call takes it, not as TextPolicy does
        check_max_bytes(max_text_bytes, "max_text_bytes")
    if text is not None or redact is not _UNSET or max_text_bytes is not None:
        policy = TextPolicy(
            mode=policy.mode if text is None else text,
            redact=policy.redact if redact is _UNSET else redact,
            max_bytes=policy.max_bytes if max_text_bytes is None else max_text_bytes,
        )
    if budget is not None and not isinstance(budget, SpanBudget):
        raise TypeError(f"budget must be a SpanBudget, got {type(budget).__name__}")
    _settings = TrajectorySettings(text=policy, budget=current.budget if budget is None else budget)
    return _settings


@resets_process_state
def _reset() -> None:
    global _settings
    _settings = TrajectorySettings()
