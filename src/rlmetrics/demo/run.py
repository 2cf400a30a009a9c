"""The demo's loop: the simulated run through the real Logger, JSONL backend and telemetry.

Telemetry exports to a Prometheus endpoint on 127.0.0.1 (and to an OTLP collector when one is
named); the Logger writes ``metrics.jsonl`` in the output folder. Family parts
(:mod:`.parts`) are built before telemetry starts and step with the run. At the end the run's
own JSONL is read back and reported, and with ``serve`` the endpoint stays up until
interrupted, so a Prometheus (or a person with curl) can read the final state.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import attrs

from .. import Logger, start, warn_once
from ..backends.jsonl import samples_path
from ..hooks import collect_offers
from ..plugins import load_plugins
from ..report.summary import RunReport, read_report
from .parts import DemoPart, DemoSettings
from .progress import Progress
from .simulation import _MAX_TOKENS, SETUP_PREFIX, Simulation
from .tables import SAMPLES_EVERY, demo_hyperparams, demo_samples

__all__ = ["DEFAULT_OUTPUT", "DemoOptions", "DemoResult", "run_demo"]

DEFAULT_OUTPUT = Path("rlmetrics-demo")
JSONL_NAME = "metrics.jsonl"


@attrs.frozen
class DemoOptions:
    """How to run the demo (the ``rlmetrics demo`` options)."""

    steps: int = 40
    seed: int = 0
    output: Path = DEFAULT_OUTPUT
    interval_s: float = 0.1
    prometheus_host: str = "127.0.0.1"
    prometheus_port: int = 9464
    otlp_endpoint: str | None = None
    serve: bool = False
    run_id: str | None = None
    bar: bool | None = None


@attrs.frozen
class DemoResult:
    jsonl: Path
    url: str | None
    run_id: str
    parts: tuple[str, ...]
    report: RunReport

    def as_dict(self) -> dict[str, Any]:
        return {
            "jsonl": str(self.jsonl),
            "url": self.url,
            "run_id": self.run_id,
            "parts": list(self.parts),
            "report": self.report.as_dict(),
        }


def _build_parts(settings: DemoSettings) -> dict[str, DemoPart]:
    offers = collect_offers("demo part", load_plugins().hooks.register_demo_parts)
    parts: dict[str, DemoPart] = {}
    for name in sorted(offers):
        plugin, factory = offers[name]
        try:
            parts[name] = factory(settings)
        except Exception:
            warn_once(
                f"demo-part:{name}",
                f"rlmetrics demo: part {name!r} (from {plugin!r}) failed to start and is left out",
            )
    return parts


def _step_parts(parts: dict[str, DemoPart], step: Any) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for name in list(parts):
        try:
            extra = parts[name].step(step)
        except Exception:
            warn_once(
                f"demo-part-step:{name}",
                f"rlmetrics demo: part {name!r} failed at step {step.step}; left out from here",
            )
            _close(name, parts.pop(name))
            continue
        if isinstance(extra, Mapping):
            merged.update(extra)
    return merged


def _close(name: str, part: DemoPart) -> None:
    try:
        part.close()
    except Exception:
        warn_once(f"demo-part-close:{name}", f"rlmetrics demo: closing part {name!r} failed")


def run_demo(
    options: DemoOptions,
    *,
    say: TextIO,
    progress: TextIO,
    stop: threading.Event | None = None,
    on_result: Callable[[DemoResult], None] | None = None,
) -> DemoResult:
    """Run the demo; ``say`` gets where things are, ``progress`` the progress bar.
    ``on_result`` gets the result (the run's report) as soon as the steps are done; with
    ``options.serve`` the endpoint then stays up until ``stop`` is set or the user interrupts.
    """
    output = Path(options.output)
    output.mkdir(parents=True, exist_ok=True)
    jsonl = output / JSONL_NAME
    jsonl.unlink(missing_ok=True)  # each run writes its own log
    samples_path(jsonl).unlink(missing_ok=True)
    settings = DemoSettings(seed=options.seed, steps=options.steps, output=output)
    simulation = Simulation(options.seed, options.steps)
    parts = _build_parts(settings)
    exporters: dict[str, dict[str, Any]] = {
        "prometheus": {"host": options.prometheus_host, "port": options.prometheus_port}
    }
    if options.otlp_endpoint:
        exporters["otlp"] = {"endpoint": options.otlp_endpoint}
    try:
        telemetry = start(
            service_name="rlmetrics-demo",
            run_id=options.run_id,
            exporters=exporters,
            export_interval_s=1.0,
        )
    except BaseException:
        for name, part in parts.items():
            _close(name, part)
        raise
    try:
        address = telemetry.prometheus_address
        url = f"http://{address[0]}:{address[1]}/metrics" if address else None
        say.write(f"run id:              {telemetry.run_id}\n")
        say.write(f"metrics (JSONL):     {jsonl}\n")
        say.write(f"Prometheus endpoint: {url}\n")
        if options.otlp_endpoint:
            say.write(f"OTLP endpoint:       {options.otlp_endpoint}\n")
        say.write(f"family parts:        {', '.join(parts) or 'none installed'}\n")
        say.flush()
        with Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger:
            logger.log_hyperparams(demo_hyperparams(options.seed, options.steps, _MAX_TOKENS))
            logger.log_metrics(simulation.setup_timings(), step=0, prefix=SETUP_PREFIX)
            logger.log_rollout_checkpoint(simulation.resume())
            bar = Progress(options.steps, progress, bar=options.bar)
            try:
                for step in range(1, options.steps + 1):
                    simulated = simulation.step(step)
                    train = {**_step_parts(parts, simulated.demo), **simulated.train}
                    for event in simulated.events:
                        logger.log_rollout_checkpoint(event)
                    logger.log_metrics(train, step=step, prefix="train")
                    if step % SAMPLES_EVERY == 0 or step == options.steps:
                        logger.log_samples(demo_samples(simulated.demo), step=step)
                    bar.update(
                        step, reward=train["reward"], goodput=train["efficiency/efficiency_pct"]
                    )
                    if options.interval_s > 0 and step < options.steps:
                        time.sleep(options.interval_s)  # pacing, so a scraper sees the run move
            finally:
                bar.close()
        report = read_report(jsonl)
        result = DemoResult(jsonl, url, telemetry.run_id, tuple(parts), report)
        if on_result is not None:
            on_result(result)
        if options.serve:
            say.write(f"Serving {url} until interrupted (Ctrl-C)\n")
            say.flush()
            _serve(stop)
        return result
    finally:
        telemetry.shutdown(timeout_s=5)
        for name, part in parts.items():
            _close(name, part)


def _serve(stop: threading.Event | None) -> None:
    """Wait until ``stop`` is set or the user interrupts."""
    stop = stop or threading.Event()
    with contextlib.suppress(KeyboardInterrupt):
        while not stop.wait(0.5):
            pass
