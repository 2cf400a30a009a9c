from __future__ import annotations

import io

from rlmetrics.backends.console import ConsoleBackend


def test_one_line_per_call_with_prefixed_keys() -> None:
    stream = io.StringIO()
    backend = ConsoleBackend(stream=stream, max_keys=2)
    backend.log_metrics({"loss": 0.123456789, "reward": 1, "kl": 0.5}, step=3, prefix="train")
    backend.log_metrics({"telemetry/wall_time_seconds": 10.0}, step=0, prefix="rollout/throughput")
    assert stream.getvalue().splitlines() == [
        "step 3 | train/loss=0.123457 train/reward=1 ... 1 more",
        "step 0 | telemetry/wall_time_seconds=10",
    ]
