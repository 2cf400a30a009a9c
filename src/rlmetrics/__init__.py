"""rlmetrics: the metrics dicts an RL training loop logs, sent to experiment trackers and
mirrored into OpenTelemetry with declared, documented semantics.

``import rlmetrics`` is nearly free: each public name is imported from its module on first
use, so a process that only imports rlmetrics (a plugin's module, a library that may log)
pays for nothing it does not touch. Neither the OpenTelemetry SDK nor ``importlib.metadata``
is imported before ``rlmetrics.start()`` or the first plugin lookup.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from ._process_state import resets_process_state
    from ._warn import StrictModeError, describe_value, warn_once
    from .configuration import ConfigurationError
    from .hookspecs import hookimpl
    from .keymaps import KeyMap, KeyRule
    from .known_keys import declare_keys
    from .logger import Logger
    from .registry import (
        DeclarationError,
        LateDeclarationError,
        MetricRegistry,
        activate,
        declare,
        default_registry,
        is_exporting,
        record,
        record_declared,
        record_points,
        retract,
    )
    from .spec import OPEN, Kind, MetricSpec, SpecError
    from .telemetry import Telemetry, TelemetryError, current, start
    from .tracing import (
        PhaseKind,
        PhaseTimer,
        account,
        phase,
        rollout,
        run,
        step,
        trace_carrier,
        trace_context,
        trace_env,
    )
    from .trajectories import SpanBudget, trajectory
    from .values import as_number, as_plain, as_real

#: Each public name and the module it lives in.
_WHERE = {
    "resets_process_state": "._process_state",
    "StrictModeError": "._warn",
    "ConfigurationError": ".configuration",
    "describe_value": "._warn",
    "warn_once": "._warn",
    "hookimpl": ".hookspecs",
    "KeyMap": ".keymaps",
    "KeyRule": ".keymaps",
    "declare_keys": ".known_keys",
    "Logger": ".logger",
    "DeclarationError": ".registry",
    "LateDeclarationError": ".registry",
    "MetricRegistry": ".registry",
    "activate": ".registry",
    "declare": ".registry",
    "default_registry": ".registry",
    "is_exporting": ".registry",
    "record": ".registry",
    "record_declared": ".registry",
    "record_points": ".registry",
    "retract": ".registry",
    "OPEN": ".spec",
    "Kind": ".spec",
    "MetricSpec": ".spec",
    "SpecError": ".spec",
    "Telemetry": ".telemetry",
    "TelemetryError": ".telemetry",
    "current": ".telemetry",
    "start": ".telemetry",
    "PhaseKind": ".tracing",
    "PhaseTimer": ".tracing",
    "account": ".tracing",
    "phase": ".tracing",
    "rollout": ".tracing",
    "run": ".tracing",
    "step": ".tracing",
    "trace_carrier": ".tracing",
    "trace_context": ".tracing",
    "trace_env": ".tracing",
    "SpanBudget": ".trajectories",
    "trajectory": ".trajectories",
    "as_number": ".values",
    "as_plain": ".values",
    "as_real": ".values",
}

__all__ = [
    "__version__",
    "ConfigurationError",
    "DeclarationError",
    "KeyMap",
    "KeyRule",
    "Kind",
    "LateDeclarationError",
    "Logger",
    "MetricRegistry",
    "MetricSpec",
    "OPEN",
    "PhaseKind",
    "PhaseTimer",
    "SpanBudget",
    "SpecError",
    "StrictModeError",
    "Telemetry",
    "TelemetryError",
    "account",
    "activate",
    "as_number",
    "as_plain",
    "as_real",
    "current",
    "declare",
    "declare_keys",
    "default_registry",
    "describe_value",
    "hookimpl",
    "is_exporting",
    "phase",
    "record",
    "record_declared",
    "record_points",
    "resets_process_state",
    "retract",
    "rollout",
    "run",
    "start",
    "step",
    "trace_carrier",
    "trace_context",
    "trace_env",
    "trajectory",
    "warn_once",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rlmetrics' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups find it directly
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
