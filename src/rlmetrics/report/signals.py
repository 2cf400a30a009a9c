"""The signals a run's JSONL carries beside the core scalars, summarised for the report: reward
components and per-dataset validation metrics (train dicts), the vLLM engine's state and cache
(``vllm/*`` keys of the train dicts) and each GPU's utilisation and memory (NeMo-RL's
``ray/node.<i>.gpu.<j>.*`` rows, on their own axis).

Every value here is a per-step gauge: the report shows its mean over the steps that carried it
and its last value, never a sum.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..values import finite_float
from .numbers import mean

__all__ = ["GPU_PREFIX", "summarise_signals"]

#: The prefix NeMo-RL's (and rlmetrics-ray's ``GpuRows``) GPU rows are logged under.
GPU_PREFIX = "ray"
_GPU_KEY = re.compile(r"node\.(\d+)\.gpu\.([^.]+)\.(util|mem_gb)")
_VLLM_GAUGES = {
    "prefix_cache_hit_rate": "vllm/prefix_cache_hit_rate",
    "kv_cache_usage": "vllm/kv_cache_usage",
    "awake_share": "vllm/awake_share",
    "mfu": "vllm/mfu",
}


def _mean_last(values: Sequence[float]) -> dict[str, float]:
    return {"mean": mean(values), "last": values[-1], "steps": len(values)}


def summarise_signals(
    by_step: Mapping[int, Mapping[str, Any]], gpu_rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """``by_step``: each step's merged train dicts, in any order; ``gpu_rows``: the GPU rows'
    metrics in the order they were logged. None when the run logged none of these signals."""
    # The training family's own key parsers. Imported here, not with the module: importing the
    # family declares its series, which a report made while telemetry runs must not do first.
    from ..families.training import dataset_metrics, reward_components

    components: dict[str, list[float]] = {}
    datasets: dict[str, dict[str, float]] = {}
    vllm: dict[str, list[float]] = {}
    for step in sorted(by_step):
        metrics = by_step[step]
        for name, value in reward_components(metrics).items():
            if (number := finite_float(value)) is not None:
                components.setdefault(name, []).append(number)
        for dataset, metric, value in dataset_metrics(metrics):
            if (number := finite_float(value)) is not None:
                datasets.setdefault(dataset, {})[metric] = number  # the latest
        for name, key in _VLLM_GAUGES.items():
            if (number := finite_float(metrics.get(key))) is not None:
                vllm.setdefault(name, []).append(number)
    gpus: dict[str, dict[str, list[float]]] = {}
    for row in gpu_rows:
        for key, value in row.items():
            found = _GPU_KEY.fullmatch(key)
            if found is None or (number := finite_float(value)) is None:
                continue
            gpu = f"node.{found.group(1)}.gpu.{found.group(2)}"
            gpus.setdefault(gpu, {}).setdefault(found.group(3), []).append(number)
    if not (components or datasets or vllm or gpus):
        return None
    return {
        "reward_components": {name: _mean_last(v) for name, v in sorted(components.items())},
        "validation_datasets": dict(sorted(datasets.items())),
        "vllm": {name: _mean_last(v) for name, v in vllm.items()},
        "gpus": {
            gpu: {
                "util_mean_pct": mean(values["util"]) if "util" in values else None,
                "mem_gb_max": max(values["mem_gb"]) if "mem_gb" in values else None,
                "readings": max(len(v) for v in values.values()),
            }
            for gpu, values in sorted(gpus.items())
        },
    }
