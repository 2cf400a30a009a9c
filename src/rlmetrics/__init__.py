"""rlmetrics: the metrics dicts an RL training loop logs, sent to experiment trackers and
mirrored into OpenTelemetry with declared, documented semantics.

``import rlmetrics`` does not import the OpenTelemetry SDK; ``rlmetrics.start()`` does.
"""

from __future__ import annotations

from ._warn import warn_once
from .hookspecs import hookimpl
from .logger import Logger
from .registry import (
    DeclarationError,
    LateDeclarationError,
    MetricRegistry,
    as_number,
    declare,
    default_registry,
    is_exporting,
    record,
    retract,
)
from .spec import OPEN, Kind, MetricSpec, SpecError
from .telemetry import Telemetry, TelemetryError, current, start

__version__ = "0.2.0"

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
    "current",
    "declare",
    "default_registry",
    "hookimpl",
    "is_exporting",
    "record",
    "retract",
    "start",
    "warn_once",
]
