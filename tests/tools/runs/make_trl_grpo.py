"""Writes ``trl-grpo.jsonl``: a real TRL GRPOTrainer run (3 steps, beta 0.1, the tiny model
the transformers plugin's tests build, nothing downloaded) logged by ``RLMetricsCallback`` to
the JSONL backend, exactly as a user's run writes it. Run it in the ``integrations`` env:

    .tox/integrations/bin/python tests/tools/runs/make_trl_grpo.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "plugins" / "rlmetrics-transformers" / "tests"))

from transformers_support import length_reward, prompt_dataset, save_tiny_model  # noqa: E402


def main() -> None:
    from rlmetrics_transformers import RLMetricsCallback
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    target = HERE / "trl-grpo.jsonl"
    target.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        model = save_tiny_model(Path(folder) / "model")
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=length_reward,
            args=GRPOConfig(
                output_dir=str(Path(folder) / "out"),
                max_steps=3,
                per_device_train_batch_size=2,
                logging_steps=1,
                report_to="none",
                use_cpu=True,
                save_strategy="no",
                disable_tqdm=True,
                seed=0,
                num_generations=2,
                max_completion_length=8,
                beta=0.1,
            ),
            train_dataset=prompt_dataset(),
            processing_class=AutoTokenizer.from_pretrained(model),
            callbacks=[RLMetricsCallback(backends={"jsonl": {"path": target}})],
        )
        trainer.train()


if __name__ == "__main__":
    main()
