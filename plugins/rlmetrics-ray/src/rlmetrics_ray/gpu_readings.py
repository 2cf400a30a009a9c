"""What a host's GPUs report: one :class:`GpuReading` per GPU, from a raylet's exposition.

Every raylet's metrics agent publishes, per GPU of its machine, three gauges labelled with the
GPU's index (``GpuIndex``), its model (``GpuDeviceName``) and its UUID (``GpuUuid``), beside
the node's own labels:

- ``ray_node_gpus_utilization``: the GPU's utilisation in percent (0 to 100), as NVML reports it;
- ``ray_node_gram_used``: memory in use, and ``ray_node_gram_available``: memory not in use.

Ray declares both memory gauges in bytes, but fills them with NVML's byte counts integer-divided
by 2**20 (``memory_info.used // MB`` in Ray 2.60's GPU providers): they are MiB, which is why
NeMo-RL's logger divides ``ray_node_gram_used`` by 1024 for its ``mem_gb`` rows. A GPU's
memory limit is used plus available.

The GPU families are picked out of the exposition by a substring search, as the memory
families are (:func:`rlmetrics_ray.exposition.family_lines`), and parsed together with them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from .exposition import Sample, pick_value

__all__ = [
    "GPU_FAMILIES",
    "GPU_PREFIXES",
    "GRAM_AVAILABLE_FAMILY",
    "GRAM_USED_FAMILY",
    "MIB",
    "UTILIZATION_FAMILY",
    "GpuReading",
    "gpus_from_samples",
]

UTILIZATION_FAMILY = "ray_node_gpus_utilization"
GRAM_USED_FAMILY = "ray_node_gram_used"
GRAM_AVAILABLE_FAMILY = "ray_node_gram_available"
GPU_FAMILIES = frozenset({UTILIZATION_FAMILY, GRAM_USED_FAMILY, GRAM_AVAILABLE_FAMILY})
#: What the GPU families' names start with, for the substring search.
GPU_PREFIXES = ("ray_node_gpus_", "ray_node_gram_")
#: The unit of Ray's GPU memory gauges.
MIB = 2**20

_INDEX_LABEL = "GpuIndex"
_MODEL_LABEL = "GpuDeviceName"


@attrs.frozen
class GpuReading:
    """One GPU of one host. ``index`` is the GPU's index on its host (NVML's, as Ray reports
    it); a field is None when the source gave no usable value for it."""

    index: str
    model: str | None = None
    utilization_pct: float | None = None  # 0 to 100
    used_bytes: float | None = None
    limit_bytes: float | None = None

    @property
    def utilization(self) -> float | None:
        """Utilisation as a fraction (``hw.gpu.utilization`` is unit ``1``)."""
        return None if self.utilization_pct is None else self.utilization_pct / 100.0

    @property
    def memory_utilization(self) -> float | None:
        """The fraction of the GPU's memory in use (``hw.gpu.memory.utilization``, unit ``1``):
        used / limit, None without both or with no memory at all."""
        if self.used_bytes is None or self.limit_bytes is None or not self.limit_bytes > 0:
            return None
        return self.used_bytes / self.limit_bytes


def gpus_from_samples(
    samples: Mapping[str, Sequence[Sample]], ip: str | None = None
) -> tuple[GpuReading, ...]:
    """Every GPU the GPU families' samples describe, sorted by index (numerically where the
    index is a number). Where a GPU has samples of several nodes, the one labelled with the
    node's own ``ip`` wins, else the first; a sample without ``GpuIndex`` is not a GPU's."""
    by_index: dict[str, dict[str, list[Sample]]] = {}
    models: dict[str, str] = {}
    for family in GPU_FAMILIES:
        for labels, value in samples.get(family, ()):
            index = labels.get(_INDEX_LABEL)
            if not isinstance(index, str) or not index:
                continue
            by_index.setdefault(index, {}).setdefault(family, []).append((labels, value))
            model = labels.get(_MODEL_LABEL)
            if isinstance(model, str) and model and index not in models:
                models[index] = model
    readings = []
    for index, families in by_index.items():
        utilization = pick_value(families.get(UTILIZATION_FAMILY, ()), ip)
        used = pick_value(families.get(GRAM_USED_FAMILY, ()), ip)
        available = pick_value(families.get(GRAM_AVAILABLE_FAMILY, ()), ip)
        readings.append(
            GpuReading(
                index=index,
                model=models.get(index),
                utilization_pct=utilization if utilization is None or utilization <= 100 else None,
                used_bytes=None if used is None else used * MIB,
                limit_bytes=None if used is None or available is None else (used + available) * MIB,
            )
        )
    return tuple(sorted(readings, key=lambda r: _order(r.index)))


def _order(index: str) -> tuple[int, int, str]:
    return (0, int(index), "") if index.isdigit() else (1, 0, index)
