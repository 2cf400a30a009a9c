"""The resource detector that gives each Ray worker process its own identity.

Registered in the SDK's ``opentelemetry_resource_detector`` entry point group as
``rlmetrics_ray``; :func:`rlmetrics_ray.runtime_env` names it in
``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS``, so ``Resource.create()`` runs it in every worker
when ``rlmetrics.start()`` builds the provider. Attributes rlmetrics sets itself (run id,
service name, ``OTEL_RESOURCE_ATTRIBUTES``) take precedence over a detector's.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from opentelemetry.sdk.resources import Resource, ResourceDetector

__all__ = ["NODE_ATTR", "PID_ATTR", "RayProcessResourceDetector", "process_attributes"]

PID_ATTR = "process.pid"
NODE_ATTR = "ray.node.id"


def process_attributes() -> dict[str, str | int]:
    """``process.pid``, and ``ray.node.id`` when this process is connected to Ray."""
    attributes: dict[str, str | int] = {PID_ATTR: os.getpid()}
    ray: Any = sys.modules.get("ray")  # never import Ray here: no Ray, no node
    if ray is not None:
        try:
            if ray.is_initialized():
                node_id = ray.get_runtime_context().get_node_id()
                if isinstance(node_id, str) and node_id:
                    attributes[NODE_ATTR] = node_id
        except Exception:
            pass  # a resource is best effort: the pid alone still keeps processes apart
    return attributes


class RayProcessResourceDetector(ResourceDetector):
    """``process.pid`` and ``ray.node.id`` of the process the resource is built in."""

    def detect(self) -> Resource:
        return Resource(process_attributes())
