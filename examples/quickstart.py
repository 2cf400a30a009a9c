"""A tiny synthetic RL loop: JSONL on disk, OpenTelemetry on a Prometheus endpoint.

    python examples/quickstart.py            # then look at quickstart-run/metrics.jsonl

It logs what NeMo-RL's loops log (setup phases, train scalars, async efficiency, a rollout
checkpoint), scrapes its own Prometheus endpoint once on 127.0.0.1 and prints the rl_* series.
"""

from __future__ import annotations

import random
import time
import urllib.request
from pathlib import Path

import rlmetrics
from rlmetrics.events import CheckpointSave
from rlmetrics.families.efficiency import CollectorTimer, EfficiencyTimer

OUT = Path("quickstart-run")


def main() -> None:
    telemetry = rlmetrics.start(
        service_name="quickstart", exporters=["prometheus"], prometheus_port=0
    )
    logger = rlmetrics.Logger(backends={"jsonl": {"path": OUT / "metrics.jsonl"}})
    driver, collector = EfficiencyTimer(), CollectorTimer()
    with telemetry, logger:
        logger.log_setup_timing(
            {
                "policy_init_time_s": 12.5,
                "generation_init_time_s": 30.1,
                "total_setup_time_s": 44.0,
                "parallel_init_enabled": 0.0,
            }
        )
        for step in range(1, 6):
            with driver.time("idle/refit_bubble"):  # waiting for weights: idle
                time.sleep(random.uniform(0.005, 0.02))
            time.sleep(0.05)  # the step's productive work
            collector.record("idle/buffer_full_backoff", random.uniform(0.0, 2.0))
            logger.log_metrics(
                {
                    "reward": random.random(),
                    "loss": 1 / step,
                    "kl_penalty": 0.01 * step,
                    "lr": 1e-6,
                    "grad_norm": random.uniform(0.5, 1.5),
                },
                step=step,
                prefix="train",
            )
            logger.log_efficiency_summary(driver.step_summary(collector), step=step)
        logger.log_rollout_checkpoint(
            CheckpointSave({"total_save_seconds": 2.4, "tq_save_seconds": 1.9, "snapshot_rows": 64})
        )
        host, port = telemetry.prometheus_address or ("127.0.0.1", 0)
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as response:
            exposition = response.read().decode()
        print("\n".join(line for line in exposition.splitlines() if line.startswith("rl_")))
    rows = (OUT / "metrics.jsonl").read_text().count("\n")
    print(f"\n{rows} rows in {OUT / 'metrics.jsonl'}; run id {telemetry.run_id}")


if __name__ == "__main__":
    main()
