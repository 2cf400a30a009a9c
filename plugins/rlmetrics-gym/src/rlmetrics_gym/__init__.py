"""rlmetrics for NeMo Gym: the libraries a Gym server, supervisor and rollout driver call.

The family modules declare their series when imported, so they are left to the entry points,
which rlmetrics loads at ``start()`` before declarations freeze; importing this package never
declares anything.
"""

from __future__ import annotations

__version__ = "0.2.0"

__all__ = ["__version__"]
