"""rlmetrics for vLLM: per-step engine deltas (``rl.vllm.*``) and driver-side ``gen_ai.*``.

The engine reader is re-exported here. The family modules (:mod:`rlmetrics_vllm.family`,
:mod:`rlmetrics_vllm.gen_ai`) declare series when imported, so they are left to the entry
points, which rlmetrics loads at ``start()`` before declarations freeze; importing this package
never declares anything.
"""

from __future__ import annotations

from .engine import (
    SIGNAL_KEYS,
    STEP_KEYS,
    Snapshot,
    engine_signals,
    merge_snapshots,
    read_registry,
    read_text,
    scrape,
    step_metrics,
)

__version__ = "0.2.0"

__all__ = [
    "SIGNAL_KEYS",
    "STEP_KEYS",
    "Snapshot",
    "__version__",
    "engine_signals",
    "merge_snapshots",
    "read_registry",
    "read_text",
    "scrape",
    "step_metrics",
]
