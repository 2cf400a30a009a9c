"""The demo's loop: the simulated run through the real Logger, JSONL backend and telemetry.

Telemetry exports to a Prometheus endpoint on 127.0.0.1 (and to an OTLP collector when one is
named, spans and metrics); the Logger writes ``metrics.jsonl`` in the output folder and the
run's spans go to ``traces.jsonl`` beside it (OTLP/JSON lines, when the ``otlp`` extra is
installed). The simulated phases are timed with ``rlmetrics.phase`` inside ``rlmetrics.step``
on the simulation's clock, so each step's efficiency summary and its spans come from the same
readings. Family parts (:mod:`.parts`) are built before telemetry starts and step with the
run. At the end the run's own JSONL (and traces) are read back and reported, and with
``serve`` the endpoint stays up until interrupted, so a Prometheus (or a person with curl) can
read the final state.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import attrs

from .. import Logger, account, phase, run, start, step, warn_once
from ..backends.jsonl import samples_path
from ..configuration import ConfigurationError
from ..exporters.prometheus import END_WAIT_LOGGER, PortTaken
from ..exporters.prometheus import port_from_env as prometheus_port
from ..hooks import collect_offers
from ..plugins import load_plugins
from ..report.destinations import folder_problem
from ..report.summary import RunReport, read_report
from ..telemetry import Telemetry
from .parts import DemoPart, DemoSettings
from .progress import Progress
from .simulation import _MAX_TOKENS, GENERATIONS_PER_PROMPT, SETUP_PREFIX, Simulation
from .tables import SAMPLES_EVERY, demo_hyperparams, demo_samples
from .trajectories import demo_trajectories

__all__ = [
    "DEFAULT_OUTPUT",
    "OUTPUT_FILES",
    "DemoOptions",
    "DemoResult",
    "OutputRefused",
    "output_problem",
    "run_demo",
]

DEFAULT_OUTPUT = Path("rlmetrics-demo")
JSONL_NAME = "metrics.jsonl"
TRACES_NAME = "traces.jsonl"
PLOT_NAME = "report.png"
TIMELINE_NAME = "timeline.png"
#: Every file the demo (and ``rlmetrics demo``'s pictures) writes in its output folder,
#: replacing a previous demo's.
OUTPUT_FILES = (
    JSONL_NAME,
    samples_path(Path(JSONL_NAME)).name,
    TRACES_NAME,
    PLOT_NAME,
    TIMELINE_NAME,
)
#: How much of a metrics.jsonl's first line is read to tell whether a demo wrote it.
_FIRST_LINE_BYTES = 64 * 1024
#: The SDK's variable for a batch span processor's queue (2048 spans unless set).
_SPAN_QUEUE_VARIABLE = "OTEL_BSP_MAX_QUEUE_SIZE"
#: More spans than one demo step makes (its 32 trajectories' trees and its phases: about 300).
_SPANS_PER_STEP = 1024
#: At most this many spans wait in memory for a slow OTLP endpoint.
_MAX_SPAN_QUEUE = 100_000
#: How long the end of the run waits for a reachable OTLP endpoint to take the spans still
#: queued (MLflow took about 400 spans a second here; a 40-step run has about 12 000).
OTLP_DRAIN_S = 60.0


class OutputRefused(ValueError):
    """The output folder cannot take the demo's files: it is a file, cannot be created, or
    holds files of the demo's names that no previous demo wrote (a real run's)."""


def _written_by_demo(jsonl: Path) -> bool:
    """Whether ``jsonl`` is a previous demo's log: its first row is the demo's configuration
    (the first thing the demo logs), recognisable by its simulated model."""
    try:
        with jsonl.open("rb") as handle:
            row = json.loads(handle.readline(_FIRST_LINE_BYTES))
        model = row["hyperparams"]["policy"]["model"]
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        return False
    return bool(model == demo_hyperparams(0, 1, 0)["policy"]["model"])


def output_problem(output: str | os.PathLike[str]) -> str | None:
    """Why the demo cannot write in ``output``, or None. The demo replaces its own files
    (:data:`OUTPUT_FILES`) and touches nothing else: a folder holding any of them is taken
    only when it is a previous demo's output (its ``metrics.jsonl`` the demo's log), so a real
    run's files are never deleted."""
    output = Path(output)
    problem = folder_problem(output)
    if problem is not None or not output.is_dir():
        return problem
    present = [name for name in OUTPUT_FILES if os.path.lexists(output / name)]
    if not present or _written_by_demo(output / JSONL_NAME):
        return None
    return (
        f"{output} holds {', '.join(present)}, which no previous demo wrote (a run's files?) "
        "and the demo would replace: give a new or empty folder, or a previous demo's"
    )


@attrs.frozen
class DemoOptions:
    """How to run the demo (the ``rlmetrics demo`` options)."""

    steps: int = 40
    seed: int = 0
    output: Path = DEFAULT_OUTPUT
    interval_s: float = 0.1
    prometheus_host: str = "127.0.0.1"
    #: None: ``OTEL_EXPORTER_PROMETHEUS_PORT``, else 9464. A taken port falls back to a free one.
    prometheus_port: int | None = None
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
    #: The run's spans (OTLP/JSON lines), None without the ``otlp`` extra.
    traces: Path | None = None
    #: Goodput from the spans beside the metrics' (:func:`rlmetrics.report.traces.compare_goodput`).
    goodput: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "jsonl": str(self.jsonl),
            "url": self.url,
            "run_id": self.run_id,
            "parts": list(self.parts),
            "report": self.report.as_dict(),
            "traces": None if self.traces is None else str(self.traces),
            "goodput_from_traces": self.goodput,
        }


def _can_write_traces() -> bool:
    """Whether the ``otlp_file`` exporter can encode spans (the ``otlp`` extra)."""
    try:  # asking for a submodule imports its parent, which may be missing too (``google``)
        return all(
            importlib.util.find_spec(name) is not None
            for name in ("google.protobuf", "opentelemetry.exporter.otlp.proto.common")
        )
    except ImportError:
        return False


def _build_parts(settings: DemoSettings) -> dict[str, DemoPart]:
    plugins = load_plugins()
    offers = collect_offers("demo part", plugins.hooks.register_demo_parts, plugins)
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


@contextlib.contextmanager
def _span_queue_for(options: DemoOptions) -> Iterator[None]:
    """While telemetry starts with an OTLP endpoint, a span queue that holds the whole run:
    the demo makes spans far faster than a trace UI (Phoenix, MLflow) writes them to its
    database, and a full queue drops them (half of a 40-step run never reached MLflow). A
    ``OTEL_BSP_MAX_QUEUE_SIZE`` the user set is kept."""
    if not options.otlp_endpoint or _SPAN_QUEUE_VARIABLE in os.environ:
        yield
        return
    queue = min(_MAX_SPAN_QUEUE, max(2048, options.steps * _SPANS_PER_STEP))
    os.environ[_SPAN_QUEUE_VARIABLE] = str(queue)
    try:
        yield
    finally:
        os.environ.pop(_SPAN_QUEUE_VARIABLE, None)


def _reachable(endpoint: str) -> bool:
    """Whether something accepts connections at ``endpoint`` (``host:port`` or a URL): only
    then is the run's end worth waiting for (a dead one would hold it for the whole bound)."""
    url = urllib.parse.urlsplit(endpoint if "//" in endpoint else f"//{endpoint}")
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
        with socket.create_connection((url.hostname or "localhost", port), timeout=2):
            return True
    except (OSError, ValueError):
        return False


def _start(options: DemoOptions, exporters: dict[str, dict[str, Any]], say: TextIO) -> Telemetry:
    """Telemetry for the demo; a Prometheus port another process holds (a second demo, a
    trainer) is a demo's hiccup, not an error: a free port is taken instead, and said."""

    def attempt() -> Telemetry:
        return start(
            service_name="rlmetrics-demo",
            run_id=options.run_id,
            exporters=exporters,
            export_interval_s=1.0,
        )

    try:
        return attempt()
    except PortTaken:
        pass
    except ImportError as exc:
        # An exporter whose extra is not installed (`--otlp-endpoint` over HTTP without
        # `rlmetrics[otlp-http]`): the message names the install, which is the user's to run.
        raise ConfigurationError(str(exc)) from exc
    prometheus = exporters["prometheus"]
    port = prometheus.get("port", prometheus_port())
    say.write(
        f"Prometheus port {options.prometheus_host}:{port} is taken (another demo or trainer?); "
        "serving on a free port instead\n"
    )
    prometheus["port"] = 0
    return attempt()


def run_demo(
    options: DemoOptions,
    *,
    say: TextIO,
    progress: TextIO,
    stop: threading.Event | None = None,
    on_result: Callable[[DemoResult], None] | None = None,
) -> DemoResult:
    """Run the demo; ``say`` gets where things are, ``progress`` the progress bar. Raises
    :class:`OutputRefused` (nothing written) for an output folder it must not write in.
    ``on_result`` gets the result (the run's report) as soon as the steps are done; with
    ``options.serve`` the endpoint then stays up until ``stop`` is set or the user interrupts.
    """
    output = Path(options.output)
    problem = output_problem(output)
    if problem is not None:
        raise OutputRefused(problem)
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputRefused(f"{output}: cannot create {exc.filename}: {exc.strerror}") from None
    jsonl = output / JSONL_NAME
    jsonl.unlink(missing_ok=True)  # each run writes its own log
    samples_path(jsonl).unlink(missing_ok=True)
    traces = output / TRACES_NAME if _can_write_traces() else None
    (output / TRACES_NAME).unlink(missing_ok=True)
    settings = DemoSettings(seed=options.seed, steps=options.steps, output=output)
    simulation = Simulation(options.seed, options.steps)
    parts = _build_parts(settings)
    prometheus: dict[str, Any] = {"host": options.prometheus_host}
    if options.prometheus_port is not None:
        prometheus["port"] = options.prometheus_port
    exporters: dict[str, dict[str, Any]] = {"prometheus": prometheus}
    if options.otlp_endpoint:
        exporters["otlp"] = {"endpoint": options.otlp_endpoint}
    if traces is not None:
        exporters["otlp_file"] = {"path": traces}
    try:
        with _span_queue_for(options):
            telemetry = _start(options, exporters, say)
    except BaseException:
        for name, part in parts.items():
            _close(name, part)
        raise
    try:
        address = telemetry.prometheus_address
        url = f"http://{address[0]}:{address[1]}/metrics" if address else None
        say.write(f"run id:              {telemetry.run_id}\n")
        say.write(f"metrics (JSONL):     {jsonl}\n")
        say.write(f"spans (OTLP/JSON):   {traces or 'none (pip install rlmetrics[otlp])'}\n")
        say.write(f"Prometheus endpoint: {url}\n")
        if options.otlp_endpoint:
            say.write(f"OTLP endpoint:       {options.otlp_endpoint}\n")
        say.write(f"family parts:        {', '.join(parts) or 'none installed'}\n")
        say.flush()
        with (
            Logger(backends={"jsonl": {"path": str(jsonl)}}) as logger,
            run(clock=simulation.clock),
        ):
            logger.log_hyperparams(demo_hyperparams(options.seed, options.steps, _MAX_TOKENS))
            logger.log_metrics(simulation.setup_timings(), step=0, prefix=SETUP_PREFIX)
            logger.log_rollout_checkpoint(simulation.resume())
            with phase("init/total"):  # the wait for the first buffer fill
                simulation.spend(simulation.init_total_s)
            bar = Progress(options.steps, progress, bar=options.bar)
            try:
                for n in range(1, options.steps + 1):
                    bar.update(n, **_run_step(n, simulation, parts, logger))
                    if options.interval_s > 0 and n < options.steps:
                        time.sleep(options.interval_s)  # pacing, so a scraper sees the run move
            finally:
                bar.close()
        if options.otlp_endpoint and _reachable(options.otlp_endpoint):
            say.write(
                f"Sending the run's spans to {options.otlp_endpoint} (at most {OTLP_DRAIN_S:g} s)\n"
            )
            say.flush()
            telemetry.force_flush(timeout_s=OTLP_DRAIN_S)
        else:
            telemetry.force_flush(timeout_s=5)  # the spans of the last steps, for the report
        report = read_report(jsonl)
        goodput = None
        if traces is not None and traces.exists():
            from ..report.traces import compare_goodput, read_traces

            goodput = compare_goodput(read_traces([traces]), report.steps, report.goodput)
        result = DemoResult(
            jsonl, url, telemetry.run_id, tuple(parts), report, traces if goodput else None, goodput
        )
        if on_result is not None:
            on_result(result)
        if options.serve:
            say.write(f"Serving {url} until interrupted (Ctrl-C)\n")
            say.flush()
            _serve(stop)
        return result
    finally:
        with _told_on(say, END_WAIT_LOGGER):  # the end's wait for a last scrape, seconds long
            telemetry.shutdown(timeout_s=5)
        for name, part in parts.items():
            _close(name, part)


def _run_step(
    n: int, simulation: Simulation, parts: dict[str, DemoPart], logger: Logger
) -> dict[str, float]:
    """One simulated step, its phases timed on the simulation's clock: the step's spans and
    its efficiency summary (logged when the step ends) come from the same readings. Returns
    what the progress bar shows."""
    simulated = simulation.step(n)
    # Async GRPO: the step trains on rollouts generated with the previous step's weights.
    with step(
        n, logger=logger, weight_version=n - 1, num_generations_per_prompt=GENERATIONS_PER_PROMPT
    ):
        train = {**_step_parts(parts, simulated.demo), **simulated.train}
        for name, seconds, bucket in simulated.phases:
            with phase(name, bucket=bucket):
                simulation.spend(seconds)
        for name, seconds in simulated.accounted.items():
            account(name, seconds)  # the collector's and its threads' clocks: no span here
        # The step's rollouts as trajectories: spans under the step, rows, metrics.
        logger.log_trajectories(demo_trajectories(simulated.demo), step=n)
        for event in simulated.events:
            logger.log_rollout_checkpoint(event)
        logger.log_metrics(train, step=n, prefix="train")
    # After the step's end, which gives its trajectories' table: the step's last table, what
    # `rlmetrics report` shows, is then these samples.
    if n % SAMPLES_EVERY == 0 or n == simulation.steps:
        logger.log_samples(demo_samples(simulated.demo), step=n)
    return {"reward": train["reward"], "goodput": simulated.goodput_pct}


@contextlib.contextmanager
def _told_on(say: TextIO, name: str) -> Iterator[None]:
    """While in the block, what logger ``name`` says at INFO is written to ``say`` as a
    line of the demo's own, so a pause it explains is not silent."""
    handler = logging.StreamHandler(say)
    handler.setFormatter(logging.Formatter("%(message)s"))
    told = logging.getLogger(name)
    level = told.level
    told.addHandler(handler)
    told.setLevel(logging.INFO)
    try:
        yield
    finally:
        told.removeHandler(handler)
        told.setLevel(level)
        with contextlib.suppress(Exception):
            say.flush()


def _serve(stop: threading.Event | None) -> None:
    """Wait until ``stop`` is set or the user interrupts."""
    stop = stop or threading.Event()
    with contextlib.suppress(KeyboardInterrupt):
        while not stop.wait(0.5):
            pass
