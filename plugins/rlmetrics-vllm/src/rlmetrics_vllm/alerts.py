"""The vLLM alert: an engine restarted. Read from vLLM's own ``/metrics`` (which ``rlmetrics
stack`` scrapes beside the run), where a restart shows as a counter's ``_created`` time
changing or its total going back to zero; the names are vLLM's, as :mod:`.engine` reads them.

A restart costs the step it happens in (its engine deltas are unknowable and left out), and a
restart loop (out of memory at load, a crashing CUDA graph capture) costs the run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import rlmetrics
from rlmetrics.alerts.model import AlertContext, AlertExample, AlertRule, RuleBuilder

from .engine import PROMPT_TOKENS_FAMILY

__all__ = ["engine_rules", "register_alert_rules"]


def engine_rules(context: AlertContext) -> Iterator[AlertRule]:
    created, total = f"{PROMPT_TOKENS_FAMILY}_created", f"{PROMPT_TOKENS_FAMILY}_total"
    window = context.threshold(
        "vllm.restart_window_s", 900.0, "how long an engine restart keeps its alert firing"
    )
    span = f"{window:g}s"
    engine = 'job="vllm",instance="e",engine="0",model_name="m"'
    labels = {"job": "vllm", "instance": "e", "engine": "0", "model_name": "m"}
    yield AlertRule(
        "VLLMEngineRestarted",
        f"changes({created}[{span}]) > 0 or resets({total}[{span}]) > 0",
        summary="vLLM engine {{ $labels.engine }} on {{ $labels.instance }} restarted",
        description="The engine's counters were created anew (or went back to zero) within "
        f"the last {window:g} s. The step it restarted in has no engine deltas; repeated "
        "restarts mean the engine cannot stay up.",
        runbook="Read the engine's log around the restart: out of memory at load (lower "
        "gpu_memory_utilization or max_num_seqs), a crash in CUDA graph capture, or a killed "
        "worker.",
        for_s=context.for_(0),
        group="rlmetrics-vllm",
        examples=(
            AlertExample(
                "restarted at minute 6",
                [
                    (f"{created}{{{engine}}}", "100x5 460x10"),
                    (f"{total}{{{engine}}}", "0+50x5 0+50x10"),
                ],
                at_s=600,
                alerts=[labels],
            ),
            AlertExample(
                "running since minute 0",
                [(f"{created}{{{engine}}}", "100x15"), (f"{total}{{{engine}}}", "0+50x15")],
                at_s=600,
            ),
            AlertExample(
                "restarted long ago",
                [
                    (f"{created}{{{engine}}}", "100x5 460x30"),
                    (f"{total}{{{engine}}}", "0+50x5 0+50x30"),
                ],
                at_s=1800,
            ),
        ),
    )


@rlmetrics.hookimpl
def register_alert_rules(register: Callable[[RuleBuilder], None]) -> None:
    register(engine_rules)
