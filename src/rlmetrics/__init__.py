"""rlmetrics: the metrics dicts an RL training loop logs, sent to experiment trackers and
mirrored into OpenTelemetry with declared, documented semantics.

``import rlmetrics`` imports neither the OpenTelemetry SDK nor ``importlib.metadata``;
``rlmetrics.start()`` does, and entry points are read on first use.
"""

from __future__ import annotations

from ._version import __version__
from ._warn import describe_value, warn_once
from .hookspecs import hookimpl
from .logger import Logger
from .registry import (
    DeclarationError,
    LateDeclarationError,
    MetricRegistry,
    declare,
    default_registry,
    is_exporting,
    record,
    record_declared,
    retract,
)
from .spec import OPEN, Kind, MetricSpec, SpecError
from .telemetry import Telemetry, TelemetryError, current, start
from .values import as_number, as_plain, as_real

__all__ = [
    "OPEN",
    "DeclarationError",
    "Kind",
    "LateDeclarationError",
    "Logger",
    "MetricRegistry",
    "MetricSpec",
    "SpecError",
    "Telemetry",
    "TelemetryError",
    "__version__",
    "as_number",
    "as_plain",
    "as_real",
    "current",
    "declare",
    "default_registry",
    "describe_value",
    "hookimpl",
    "is_exporting",
    "record",
    "record_declared",
    "retract",
    "start",
    "warn_once",
]
