"""The ``acme_queue`` family: replay-queue depth and dropped batches, teed from a train dict.

Specs first (declared at import, so they exist before ``rlmetrics.start()`` freezes the
registry), pure mapping below, the hook last.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import rlmetrics
from rlmetrics import Kind, MetricSpec

__all__ = ["DEPTH_KEY", "DROPPED_KEY", "GROUP", "QUEUE_ATTR", "queue_values"]

GROUP = "acme.queue"
DEPTH_KEY = "acme/queue_depth"  # the keys the training loop logs
DROPPED_KEY = "acme/dropped_batches"
QUEUE_ATTR = "acme.queue.name"

rlmetrics.declare(
    GROUP,
    [
        MetricSpec(
            "acme.queue.depth",
            Kind.GAUGE,
            unit="{batch}",
            key=DEPTH_KEY,
            attributes={QUEUE_ATTR: {"replay", "staging"}},
            description="Batches waiting in the queue",
        ),
        MetricSpec(
            "acme.batches.dropped",
            Kind.COUNTER,
            unit="{batch}",
            key=DROPPED_KEY,
            attributes={QUEUE_ATTR: {"replay", "staging"}},
            description="Batches dropped because the queue was full",
        ),
    ],
)


def queue_values(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``{registry key: value}`` for the queue keys a train dict carries."""
    return {key: metrics[key] for key in (DEPTH_KEY, DROPPED_KEY) if key in metrics}


@rlmetrics.hookimpl
def log_metrics(metrics: Mapping[str, Any], prefix: str) -> None:
    if prefix == "train":
        rlmetrics.record(GROUP, queue_values(metrics), {QUEUE_ATTR: "replay"})
