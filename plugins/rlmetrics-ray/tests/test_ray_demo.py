"""The host-memory part of ``rlmetrics demo``: simulated raylets on 127.0.0.1 scraped by the
real monitor, and the host-memory dashboard row."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from rlmetrics_ray import active_monitor, settings
from rlmetrics_ray.dashboard import gpu_row, host_memory_row
from rlmetrics_ray.demo import HostMemoryDemoPart
from rlmetrics_ray.exposition import read_memory

from rlmetrics.dashboard.promql import Names
from rlmetrics.demo.parts import DemoSettings
from rlmetrics.demo.simulation import Simulation
from rlmetrics.registry import default_registry
from rlmetrics.testing import in_memory_telemetry, isolated_state, points


def test_the_monitor_scrapes_the_simulated_hosts(tmp_path: Path) -> None:
    part = HostMemoryDemoPart(DemoSettings(seed=0, steps=4, output=tmp_path))
    try:
        # Ray's shape: the plugin's own reader finds the host pair in what a raylet serves.
        raylet = next(iter(part.raylets.values()))
        with urllib.request.urlopen(raylet.endpoint.url, timeout=5) as answer:
            reading = read_memory(answer.read().decode(), "127.0.0.1")
        assert reading is not None and reading.source == "host"
        assert (reading.used, reading.total) == (raylet.used, raylet.total)
        with isolated_state(), in_memory_telemetry() as (_handle, reader):
            monitor = active_monitor()
            assert monitor is not None and monitor.wait_for_cycles(1, timeout_s=10)
            before = {
                p.attributes["host.name"]: p.value
                for p in points(reader)
                if p.name == "rl.host.memory.used"
            }
            part.step(Simulation(0, 4).step(4).demo)
            monitor.refresh()
            collected = points(reader)
            found = [p for p in collected if p.name == "rl.host.memory.used"]
            gpu_points = [p for p in collected if p.name.startswith("hw.gpu.")]
        after = {p.attributes["host.name"]: p.value for p in found}
        assert set(after) == {"demo-head", "demo-worker-1"}
        assert all(after[host] > before[host] for host in after)  # memory grows with the run
        labels = {p.attributes["host.name"]: p.attributes["rl.worker_groups"] for p in found}
        assert labels == {"demo-head": "none", "demo-worker-1": "lm_policy,vllm_policy"}
        # Two GPUs a host, from the same scrape: the worker's busy, the head's mostly idle.
        utilization = {
            (p.attributes["host.name"], p.attributes["hw.id"]): p.value
            for p in gpu_points
            if p.name == "hw.gpu.utilization"
        }
        assert set(utilization) == {(h, g) for h in ("demo-head", "demo-worker-1") for g in "01"}
        assert all(0 <= u <= 1 for u in utilization.values())
        assert min(utilization[("demo-worker-1", g)] for g in "01") > max(
            utilization[("demo-head", g)] for g in "01"
        )
    finally:
        part.close()
    assert settings().nodes is None  # the monitor's configuration is given back
    assert not part.raylets


def test_the_dashboard_row_reads_declared_series() -> None:
    names = Names(item.spec for item in default_registry().declared())
    row = host_memory_row(names)
    assert all(read in names for panel in row.panels for read in panel.reads)
    assert [v.name for v in row.variables] == ["host"]
    assert "rl_host_memory_used_bytes" in row.panels[0].queries[0].expr
    gpus = gpu_row(names)
    assert all(read in names for panel in gpus.panels for read in panel.reads)
    assert "hw_gpu_utilization" in gpus.panels[0].queries[0].expr
    assert "hw_gpu_memory_usage_bytes" in gpus.panels[1].queries[0].expr
