"""``rlmetrics demo``: a simulated async GRPO run through the real Logger and telemetry.

- :mod:`.parts`: what a family contributes to the run (the ``register_demo_parts`` hook);
- :mod:`.simulation`: the run itself, deterministic for a seed (curves, efficiency, setup,
  rollout checkpoints);
- :mod:`.progress`: the progress bar (tqdm on a terminal, plain lines otherwise);
- :mod:`.run`: the loop: JSONL backend, Prometheus endpoint on 127.0.0.1, optional OTLP, the
  report at the end.
"""

from __future__ import annotations

__all__: list[str] = []
