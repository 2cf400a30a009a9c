"""rlmetrics in Accelerate: :class:`RLMetricsTracker`, an ``accelerate`` ``GeneralTracker``, and
:func:`log_ranks`, ``Accelerator.log`` called on every rank with the ranks' values merged.

Importing this package imports Accelerate (the tracker's base class).
"""

from __future__ import annotations

from .ranks import log_ranks
from .tracker import RLMetricsTracker

__version__ = "0.2.0"

__all__ = ["RLMetricsTracker", "__version__", "log_ranks"]
