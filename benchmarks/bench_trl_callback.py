"""What RLMetricsCallback costs a real TRL GRPO step, against the same trainer without it.

    tox exec -e integrations -- python benchmarks/bench_trl_callback.py [--rounds 16]
        [--steps 3] [--update-readme]

One ``GRPOTrainer`` (the tests' tiny Llama built from a config, ``beta=0.1``, two generations
of up to 8 tokens per prompt, CPU) runs ``--steps`` steps per ``train()`` call. Each round
times one ``train()`` with the callback (the ``trl`` key map, a JSONL backend, telemetry
exporting to an in-memory reader) and one without it, in alternating order (A B, then B A),
and keeps the ratio. The step's own run-to-run noise is measured the same way: a round of two
``train()`` calls, both without the callback (A/A). The callback is within noise when its
ratios sit inside the A/A spread. Time is this process's CPU time (every thread's, torch's
included), as in ``_harness.py``.

A third line measures the callback directly: the CPU time spent inside its hooks per logged
step, as a share of the step. Nothing is downloaded; the hub is off.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent / "plugins/rlmetrics-transformers/tests")
)

from _harness import compare, printed_into_readme

MARKER = "bench-trl-callback"


class TimedCallback:
    """RLMetricsCallback whose hooks add up the CPU time spent in them: the per-step ones
    (``on_log``, and ``on_step_end``, which logs a GRPO step's completions) apart from the
    others (which run once per ``train()``)."""

    def __init__(self, callback: Any) -> None:
        self.callback = callback
        self.seconds = 0.0
        self.log_seconds = 0.0
        self.logged = 0

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.callback, name)
        if not name.startswith("on_"):
            return target

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return target(*args, **kwargs)
            finally:
                spent = time.process_time() - start
                self.seconds += spent
                if name in ("on_log", "on_step_end"):
                    self.log_seconds += spent
                    self.logged += name == "on_log"

        return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--update-readme", action="store_true")
    args = parser.parse_args()

    import torch
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from rlmetrics_transformers import RLMetricsCallback
    from transformers import AutoTokenizer, PrinterCallback
    from transformers_support import length_reward, prompt_dataset, save_tiny_model
    from trl import GRPOConfig, GRPOTrainer

    import rlmetrics

    torch.set_num_threads(1)  # one core for the trainer, as steady as this VM allows
    work = Path(tempfile.mkdtemp(prefix="bench-trl-"))
    model = save_tiny_model(work / "model")
    telemetry = rlmetrics.start(service_name="bench", readers=[InMemoryMetricReader()])
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=length_reward,
        args=GRPOConfig(
            output_dir=str(work / "out"),
            per_device_train_batch_size=2,
            num_generations=2,
            max_completion_length=8,
            max_steps=args.steps,
            logging_steps=1,
            beta=0.1,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
            disable_tqdm=True,
            seed=0,
        ),
        train_dataset=prompt_dataset(64),
        processing_class=AutoTokenizer.from_pretrained(model),
    )
    trainer.remove_callback(PrinterCallback)  # it prints every logged dict
    callback = RLMetricsCallback(backends={"jsonl": {"path": work / "metrics.jsonl"}})

    def with_callback() -> None:
        trainer.add_callback(callback)
        try:
            trainer.train()
        finally:
            trainer.remove_callback(callback)

    def without() -> None:
        trainer.train()

    without()  # warm-up: first-call costs of torch, TRL and the dataloader
    with_callback()
    with printed_into_readme(MARKER if args.update_readme else None):
        case = compare(
            with_callback, without, number=1, rounds=args.rounds, clock_ns=time.process_time_ns
        )
        noise = compare(
            without, without, number=1, rounds=args.rounds, clock_ns=time.process_time_ns
        )
        timed = TimedCallback(RLMetricsCallback(backends={"jsonl": {"path": work / "t.jsonl"}}))
        trainer.add_callback(timed)
        start = time.process_time()
        trainer.train()
        total = time.process_time() - start
        trainer.remove_callback(timed)
        steps = args.steps

        print(f"{'case':40} {'min':>7} {'median':>7} {'max':>7}   (ratio per round)")
        for label, comparison in (
            ("train() with the callback / without", case),
            ("train() without / without (the noise)", noise),
        ):
            low, mid, high = comparison.spread
            print(f"{label:40} {low:7.3f} {mid:7.3f} {high:7.3f}")
        per_step_ms = 1e3 * case.base_s / steps
        on_log_us = 1e6 * timed.log_seconds / max(timed.logged, 1)
        once_ms = 1e3 * (timed.seconds - timed.log_seconds)
        print()
        print(
            f"{args.rounds} rounds of train() with {steps} GRPO steps; a step takes "
            f"{per_step_ms:.0f} ms CPU without the callback"
        )
        print(
            f"inside on_log and on_step_end: {on_log_us:.0f} us CPU per logged step; the "
            "once-per-train() hooks "
            f"(Logger, setup phases, hyperparameters, finish): {once_ms:.1f} ms; all hooks: "
            f"{100 * timed.seconds / total:.2f}% of a train()'s CPU time"
        )
        low, _mid, high = noise.spread
        verdict = "within" if low <= case.spread[1] <= high else "outside"
        print(
            f"median with/without {case.spread[1]:.3f} is {verdict} the step's own noise "
            f"({low:.3f}-{high:.3f})"
        )
    telemetry.shutdown(timeout_s=5)


if __name__ == "__main__":
    main()
