"""rlmetrics in Lightning: :class:`RLMetricsLogger`, a ``lightning.pytorch`` Logger.

Importing this package imports Lightning (the logger's base class).
"""

from __future__ import annotations

from .logger import RLMetricsLogger

__version__ = "0.2.0"

__all__ = ["RLMetricsLogger", "__version__"]
