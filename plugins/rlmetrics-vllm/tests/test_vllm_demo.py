"""The vLLM part of ``rlmetrics demo`` and this distribution's dashboard rows.

The simulated engine's exposition has vLLM 0.32.0's families, types and labels; the part's
step keys come from the real reader and agree with what it served; the mid-run restart leaves
its step without any ``vllm/*`` key; ``gen_ai`` counts only what reached the driver.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from rlmetrics_vllm.dashboard import engine_row, gen_ai_row
from rlmetrics_vllm.demo import EngineSimulator, VllmDemoPart
from rlmetrics_vllm.engine import ENGINE_FAMILIES, SIGNAL_FAMILIES, SIGNAL_KEYS, STEP_KEYS

from rlmetrics.dashboard.promql import Names
from rlmetrics.demo.parts import DemoSettings
from rlmetrics.demo.simulation import Simulation
from rlmetrics.registry import default_registry
from rlmetrics.testing import points


def _shape(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """``{family: (type, label names)}`` of vLLM's engine families in an exposition."""
    return {
        family.name: (family.type, frozenset(k for s in family.samples for k in s.labels))
        for family in text_string_to_metric_families(text)
        if family.name in ENGINE_FAMILIES or family.name in SIGNAL_FAMILIES
    }


def test_the_simulated_engine_is_shaped_like_vllm(fixture_text: str) -> None:
    simulated = EngineSimulator()
    simulated.finish("0", 12, 30, "stop")
    real = _shape(fixture_text)
    assert set(real) == set(ENGINE_FAMILIES) | set(SIGNAL_FAMILIES)
    assert _shape(simulated.exposition()) == real


def test_step_keys_agree_with_what_the_engine_served(
    telemetry: tuple[Any, Any], tmp_path: Path
) -> None:
    _handle, reader = telemetry
    steps = 6
    part = VllmDemoPart(DemoSettings(seed=1, steps=steps, output=tmp_path))
    simulation = Simulation(seed=1, steps=steps)
    found: dict[int, dict[str, Any]] = {}
    requests = 0
    for number in range(1, steps + 1):
        step = simulation.step(number).demo
        found[number] = dict(part.step(step))
        requests += len(step.rewards)
        if number != part.restart_step:
            keys = found[number]
            waiting = {"vllm/requests_waiting/capacity", "vllm/requests_waiting/deferred"}
            assert set(keys) == set(STEP_KEYS) | (set(SIGNAL_KEYS) - {"vllm/mfu"}) | waiting
            # Asleep from the step's start to the wake-up, awake through generation.
            assert 0.6 < keys["vllm/awake_share"] < 0.85
            assert 0.2 < keys["vllm/prefix_cache_hit_rate"] < 0.8
            assert keys["vllm/generations_ok"] + keys["vllm/generations_failed"] == len(
                step.rewards
            )
            assert keys["vllm/prompt_tokens"] == sum(step.prompt_tokens)
    assert part.restart_step == 4 and found[4] == {}  # restarted mid-step: nothing guessed
    usage = [p for p in points(reader) if p.name == "gen_ai.client.token.usage"]
    received = sum(p.count or 0 for p in usage if p.attributes["gen_ai.token.type"] == "input")
    aborted_or_lost = requests - received
    assert 0 < aborted_or_lost < requests * 0.15  # aborts never reach the driver
    assert {p.attributes["gen_ai.request.model"] for p in usage} == {"Qwen/Qwen2.5-1.5B-Instruct"}


def test_the_dashboard_rows_read_declared_series() -> None:
    names = Names(item.spec for item in default_registry().declared())
    for row in (engine_row(names), gen_ai_row(names)):
        for panel in row.panels:
            assert panel.reads and all(read in names for read in panel.reads)
    exprs = [q.expr for p in engine_row(names).panels for q in p.queries]
    assert any("rate(rl_vllm_generation_tokens_total[" in e for e in exprs)
    quantiles = [q.expr for p in gen_ai_row(names).panels for q in p.queries]
    assert any("gen_ai_client_token_usage_bucket" in e for e in quantiles)
