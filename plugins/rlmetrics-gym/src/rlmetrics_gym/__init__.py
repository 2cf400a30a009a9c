"""rlmetrics for NeMo Gym: the libraries a Gym server, supervisor and rollout driver call.

One module per family — ``rollouts``, ``health``, ``resources``, ``driver``, ``startup``,
``http_client`` (part 1) and ``runtime``, ``server``, ``memory`` (part 2) — each declaring its
series when imported. They are left to the entry points, which rlmetrics loads at ``start()``
before declarations freeze; importing this package never declares anything. Import the module
you call (``from rlmetrics_gym.resources import resources_operation``).
"""

from __future__ import annotations

__version__ = "0.2.0"

__all__ = ["__version__"]
