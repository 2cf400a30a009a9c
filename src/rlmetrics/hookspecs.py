"""The hooks a plugin can implement.

A plugin is a module (or object) with functions named after these specs and marked with
``@rlmetrics.hookimpl``; it is found through an entry point in the ``rlmetrics`` group. An
implementation may accept any subset of a hook's arguments, so hooks can grow arguments
without breaking plugins.

Each implementation runs in its own guard: if it raises, rlmetrics reports it once (plugin
and hook named) and goes on with the other plugins. A hook never raises into the training
loop, so do not rely on raising to signal anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from .backends import Backend
    from .events import EfficiencySummary, RolloutEvent
    from .telemetry import Telemetry

__all__ = ["hookimpl", "hookspec"]

hookspec = pluggy.HookspecMarker("rlmetrics")
hookimpl = pluggy.HookimplMarker("rlmetrics")


# -- per-step metrics -----------------------------------------------------------------------


@hookspec
def log_metrics(metrics: Mapping[str, Any], step: int, prefix: str) -> None:
    """One dict the training loop logged, after every backend has written it.

    :param metrics: flat ``{key: value}``; nested dicts were flattened with ``/``. Values are
        whatever the loop logged (floats, ints, tensors, strings, lists…): take what you
        understand and ignore the rest.
    :param step: the trainer step the loop passed.
    :param prefix: the dict's prefix (``"train"``, ``""``, ``"timing/setup"``…); a key's meaning
        depends on it, so filter on it first.

    Called for every dict, including the ones also routed to a typed hook below. Families
    that mirror values into OpenTelemetry record through :func:`rlmetrics.record`, which is a
    cheap no-op unless telemetry is exporting.
    """


@hookspec
def on_setup_timing(timings: Mapping[str, Any]) -> None:
    """Startup phase durations, once per run.

    :param timings: ``{"<phase>_time_s" | "<phase>_s": seconds, ...}`` as logged under the
        ``timing/setup`` prefix at step 0, plus non-duration flags such as
        ``parallel_init_enabled`` that an implementation should skip.
    """


@hookspec
def on_efficiency_summary(summary: EfficiencySummary) -> None:
    """Where wall time went in one step (and in the run so far).

    :param summary: an :class:`rlmetrics.events.EfficiencySummary`; from a logged dict it is
        built from the ``efficiency/*`` keys of a ``train`` or ``""`` dict.
    """


@hookspec
def on_rollout_checkpoint(event: RolloutEvent) -> None:
    """One sample of a rollout-checkpoint stream.

    :param event: a :class:`~rlmetrics.events.CheckpointSave`,
        :class:`~rlmetrics.events.CheckpointRestore`,
        :class:`~rlmetrics.events.CheckpointOutcome` or
        :class:`~rlmetrics.events.ThroughputSample`; ``event.wall_time_s`` (Unix time) is the
        stream's axis, not the trainer step.
    """


# -- lifecycle ------------------------------------------------------------------------------


@hookspec
def telemetry_started(telemetry: Telemetry) -> None:
    """Telemetry is exporting: declarations are frozen and every instrument exists.

    Start background samplers here (and stop them in :func:`telemetry_stopping`).

    :param telemetry: the handle ``rlmetrics.start()`` returned.
    """


@hookspec
def telemetry_stopping(telemetry: Telemetry) -> None:
    """Telemetry is about to shut down; the last export follows this hook.

    Stop samplers promptly; recording is still possible during this call.
    """


# -- registration ---------------------------------------------------------------------------


@hookspec
def register_backends(register: Callable[[str, Callable[..., Backend]], None]) -> None:
    """Offer logger backends by name.

    Call ``register("name", factory)`` for each; ``Logger(backends={"name": {...}})`` then
    builds one with ``factory(**config)``. The object must provide
    ``log_metrics(metrics, step, prefix)`` and ``finish()`` (see
    :class:`rlmetrics.backends.Backend`).
    """
