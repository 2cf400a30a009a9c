"""The host-memory and GPU dashboard rows: every Ray host's memory, by ``host.name``, and every
GPU's utilisation and memory, by host and ``hw.id``.

One point per host (and GPU) per cycle, so ``max by (host_name)`` reads a host without double
counting; ``rl.worker_groups`` is a descriptor to pick hosts with, never a key to sum on (the
value is the whole host's memory, shared by every group on it).
"""

from __future__ import annotations

from collections.abc import Callable

import rlmetrics
from rlmetrics.dashboard.model import Panel, Query, Row, Variable
from rlmetrics.dashboard.promql import Names, for_run

__all__ = ["gpu_row", "host_memory_row", "register_dashboard_rows"]

_USED, _TOTAL = "rl.host.memory.used", "rl.host.memory.total"
_UTILIZATION, _GPU_USED, _GPU_LIMIT = (
    "hw.gpu.utilization",
    "hw.gpu.memory.usage",
    "hw.gpu.memory.limit",
)


def host_memory_row(names: Names) -> Row:
    host = names.label("host.name")
    used = for_run(f'{names.gauge(_USED)}{{{host}=~"$host"}}')
    total = for_run(f'{names.gauge(_TOTAL)}{{{host}=~"$host"}}')
    return Row(
        "Host memory",
        [
            Panel(
                "Memory in use by host",
                [
                    Query(f"max by ({host}) ({used})", f"{{{{{host}}}}} used"),
                    Query(f"max by ({host}) ({total})", f"{{{{{host}}}}} total"),
                ],
                reads=[_USED, _TOTAL],
                description="From each host's raylet; the object store, the raylet and the "
                "driver are in the number. A gap is a failed scrape, not a zero.",
                unit="bytes",
                width=16,
            ),
            Panel(
                "Memory in use (% of total)",
                [
                    Query(
                        f"100 * max by ({host}) ({used}) / max by ({host}) ({total})",
                        f"{{{{{host}}}}}",
                    )
                ],
                reads=[_USED, _TOTAL],
                type="gauge",
                unit="percent",
                thresholds=[(70, "orange"), (90, "red")],
                width=8,
            ),
        ],
        order=60,
        variables=[Variable("host", host, names.gauge(_USED), "Host")],
    )


def gpu_row(names: Names) -> Row:
    host, gpu = names.label("host.name"), names.label("hw.id")
    by = f"{host}, {gpu}"
    utilization = for_run(f'{names.gauge(_UTILIZATION)}{{{host}=~"$host"}}')
    used = for_run(f'{names.gauge(_GPU_USED)}{{{host}=~"$host"}}')
    limit = for_run(f'{names.gauge(_GPU_LIMIT)}{{{host}=~"$host"}}')
    legend = f"{{{{{host}}}}} GPU {{{{{gpu}}}}}"
    return Row(
        "GPUs",
        [
            Panel(
                "GPU utilisation by host and GPU",
                [Query(f"100 * max by ({by}) ({utilization})", legend)],
                reads=[_UTILIZATION],
                description="From each host's raylet (NVML's figure); a GPU with no point "
                "failed its scrape or left the host. An idle GPU in a colocated run is the "
                "generation fleet waiting for training, or the other way round.",
                unit="percent",
                width=12,
            ),
            Panel(
                "GPU memory in use (% of the GPU's)",
                [Query(f"100 * max by ({by}) ({used}) / max by ({by}) ({limit})", legend)],
                reads=[_GPU_USED, _GPU_LIMIT],
                description="Memory in use over the GPU's total; vLLM's KV cache reserves most "
                "of it up front, so read it against the engine's own KV-cache usage.",
                unit="percent",
                thresholds=[(90, "orange"), (97, "red")],
                width=12,
            ),
        ],
        order=61,
    )


@rlmetrics.hookimpl
def register_dashboard_rows(register: Callable[[Callable[[Names], Row]], None]) -> None:
    register(host_memory_row)
    register(gpu_row)
