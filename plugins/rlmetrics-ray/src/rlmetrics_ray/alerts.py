"""The Ray alerts: a host's memory, or a GPU's, close to its limit.

Host memory is ``rl.host.memory.*`` (one point per host, the whole host: object store, raylet
and driver included), compared per host. GPU memory is OpenTelemetry's hardware convention
(``hw.gpu.memory.usage`` / ``hw.gpu.memory.limit``), compared per host and GPU; its rule is
offered only where a family declares those series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import rlmetrics
from rlmetrics.alerts.model import (
    AlertContext,
    AlertExample,
    AlertRule,
    RuleBuilder,
    with_run_id,
)
from rlmetrics.dashboard.promql import RUN_ID_LABEL

from .host_memory import TOTAL, USED
from .monitor import HOST_NAME_ATTR

__all__ = [
    "GPU_LIMIT",
    "GPU_USAGE",
    "gpu_memory_rules",
    "host_memory_rules",
    "register_alert_rules",
]

GPU_USAGE, GPU_LIMIT = "hw.gpu.memory.usage", "hw.gpu.memory.limit"
_GPU_ID_ATTR = "hw.id"
_GIB = 2**30
#: The examples' driver: its resource names the run.
_TARGET_INFO = (f'target_info{{job="run",instance="a",{RUN_ID_LABEL}="r1"}}', "1x20")


def host_memory_rules(context: AlertContext) -> Iterator[AlertRule]:
    names = context.names
    share = context.threshold(
        "host_memory.share", 0.9, "the share of a Ray host's memory in use that alerts"
    )
    host = names.label(HOST_NAME_ATTR)
    by = f"max by (job, instance, {host})"
    used, total = names.gauge(USED), names.gauge(TOTAL)
    node = f'job="run",instance="a",{host}="node-1"'
    yield AlertRule(
        "RLHostMemoryHigh",
        with_run_id(f"{by} ({used}) / {by} ({total}) > {share:g}"),
        summary="Host {{ $labels.host_name }} of run {{ $labels.rlmetrics_run_id }} has "
        "{{ $value | humanizePercentage }} of its memory in use "
        f"(rl.host.memory.used / rl.host.memory.total; limit {share:.0%})",
        description=f"More than {share:.0%} of a Ray host's memory has been in use for five "
        "minutes: the whole host's, object store, raylet and driver included. Past it the "
        "kernel's OOM killer (or Ray's memory monitor) kills workers.",
        runbook="See which process grows (ray memory, the dashboard's host memory row): spill "
        "the object store (object_spilling_config), lower the rollout buffer, or move work off "
        "the head node.",
        for_s=context.for_(300),
        reads=(USED, TOTAL),
        group="rlmetrics-ray",
        examples=(
            AlertExample(
                "95% used",
                [
                    (f"{used}{{{node}}}", f"{95 * _GIB}x20"),
                    (f"{total}{{{node}}}", f"{100 * _GIB}x20"),
                    _TARGET_INFO,
                ],
                at_s=900,
                alerts=[{"job": "run", "instance": "a", host: "node-1", RUN_ID_LABEL: "r1"}],
            ),
            AlertExample(
                "60% used",
                [
                    (f"{used}{{{node}}}", f"{60 * _GIB}x20"),
                    (f"{total}{{{node}}}", f"{100 * _GIB}x20"),
                ],
                at_s=900,
            ),
        ),
    )


def gpu_memory_rules(context: AlertContext) -> Iterator[AlertRule]:
    names = context.names
    if GPU_USAGE not in names or GPU_LIMIT not in names:
        return
    share = context.threshold(
        "gpu_memory.share", 0.95, "the share of a GPU's memory in use that alerts"
    )
    usage, limit = names.gauge(GPU_USAGE), names.gauge(GPU_LIMIT)
    host, gpu = names.label(HOST_NAME_ATTR), names.label(_GPU_ID_ATTR)
    by = f"max by (job, instance, {host}, {gpu})"
    device = f'job="run",instance="a",{host}="node-1",{gpu}="0"'
    yield AlertRule(
        "RLGPUMemoryNearLimit",
        with_run_id(f"{by} ({usage}) / {by} ({limit}) > {share:g}"),
        summary="GPU {{ $labels.hw_id }} on {{ $labels.host_name }} (run "
        "{{ $labels.rlmetrics_run_id }}) has {{ $value | humanizePercentage }} of its memory "
        f"in use (hw.gpu.memory.usage / hw.gpu.memory.limit; limit {share:.0%})",
        description=f"More than {share:.0%} of a GPU's memory has been in use for five "
        "minutes: the next allocation spike (a longer batch, a weight refit) runs out.",
        runbook="Lower the engine's gpu_memory_utilization or the training micro-batch; "
        "check for a second process on the device (nvidia-smi).",
        for_s=context.for_(300),
        reads=(GPU_USAGE, GPU_LIMIT),
        group="rlmetrics-ray",
        examples=(
            AlertExample(
                "79 of 80 GiB",
                [
                    (f"{usage}{{{device}}}", f"{79 * _GIB}x20"),
                    (f"{limit}{{{device}}}", f"{80 * _GIB}x20"),
                    _TARGET_INFO,
                ],
                at_s=900,
                alerts=[
                    {"job": "run", "instance": "a", host: "node-1", gpu: "0", RUN_ID_LABEL: "r1"}
                ],
            ),
            AlertExample(
                "60 of 80 GiB",
                [
                    (f"{usage}{{{device}}}", f"{60 * _GIB}x20"),
                    (f"{limit}{{{device}}}", f"{80 * _GIB}x20"),
                ],
                at_s=900,
            ),
        ),
    )


@rlmetrics.hookimpl
def register_alert_rules(register: Callable[[RuleBuilder], None]) -> None:
    register(host_memory_rules)
    register(gpu_memory_rules)
