"""A naming profile: other names the phase timer speaks besides its own, while telemetry runs
with one (``rlmetrics.start(naming=...)``). The tracing package names no stage and no profile;
a family registers its profile by name at import (:func:`register`; the proposed RL
conventions' is :class:`rlmetrics.families.rl_proposal.Profile`), and says which phase is which
stage, what a stage's span is called, where its seconds go and what the resource carries.

Without a profile (the default) a phase pays one attribute read for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._warn import warn_once
from ._state import state

__all__ = [
    "DEFAULT",
    "Naming",
    "build",
    "names",
    "phase_seconds",
    "register",
    "step_seconds",
    "use",
]

#: The stage of a step (the loop around the phases).
LOOP = "loop"
#: rlmetrics' own names only: no profile.
DEFAULT = "rlmetrics"
#: Every registered profile, by the name ``start(naming=...)`` takes.
_PROFILES: dict[str, Callable[[], Naming]] = {}


class Naming:
    """A profile's answers; each method is called only while the profile is in use."""

    def stage(self, phase: str) -> str | None:
        """The stage phase ``phase`` is, or None (it keeps rlmetrics' span name)."""
        raise NotImplementedError

    def span_name(self, stage: str) -> str:
        """The span name of ``stage`` (``loop`` for a step)."""
        raise NotImplementedError

    def step_attributes(self, attributes: dict[str, Any], iteration: int | None) -> None:
        """Add the profile's attributes of a step's span to ``attributes``."""

    def record(self, stage: str, seconds: float) -> None:
        """One ``stage`` lasted ``seconds``."""
        raise NotImplementedError

    def resource_attributes(self, resource: Mapping[str, Any]) -> dict[str, Any]:
        """What the profile adds to a resource that holds ``resource``."""
        return {}


def register(name: str, profile: Callable[[], Naming]) -> None:
    """Offer ``profile`` as ``start(naming=name)`` (a family's import does it, so the
    declarations and the profile come and go together)."""
    _PROFILES[name] = profile


def names() -> list[str]:
    """The values ``start(naming=...)`` takes: the default and every registered profile."""
    return [DEFAULT, *sorted(_PROFILES)]


def build(name: str) -> Naming | None:
    """The profile ``name`` names (None for the default); KeyError for a name none has."""
    return None if name == DEFAULT else _PROFILES[name]()


def use(naming: Naming | None) -> None:
    """Speak ``naming`` from now on (None: rlmetrics' names only)."""
    state.naming = naming


def phase_seconds(naming: Naming, phase: str, seconds: float) -> None:
    """A phase named ``phase`` lasted ``seconds``: recorded if it is one of the stages."""
    try:
        stage = naming.stage(phase)
        if stage is not None:
            naming.record(stage, seconds)
    except Exception:
        warn_once("naming:phase", "rlmetrics: the naming profile could not record a phase")


def step_seconds(naming: Naming, seconds: float) -> None:
    """A step lasted ``seconds``."""
    try:
        naming.record(LOOP, seconds)
    except Exception:
        warn_once("naming:step", "rlmetrics: the naming profile could not record a step")
