"""rlmetrics in transformers and TRL: :class:`RLMetricsCallback`, a ``TrainerCallback``.

Importing this package imports transformers (the callback's base class).
"""

from __future__ import annotations

from .callback import RLMetricsCallback, split_prefix

__version__ = "0.2.0"

__all__ = ["RLMetricsCallback", "__version__", "split_prefix"]
