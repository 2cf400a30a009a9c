"""rlmetrics in Accelerate: :class:`RLMetricsTracker`, an ``accelerate`` ``GeneralTracker``.

Importing this package imports Accelerate (the tracker's base class).
"""

from __future__ import annotations

from .tracker import RLMetricsTracker

__version__ = "0.2.0"

__all__ = ["RLMetricsTracker", "__version__"]
