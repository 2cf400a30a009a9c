from __future__ import annotations

import logging
import math
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

import rlmetrics
import rlmetrics.hooks
import rlmetrics.plugins
from rlmetrics import Kind, MetricSpec, TelemetryError
from rlmetrics.testing import captured_log, in_memory_telemetry, points, single


def test_import_loads_no_sdk_no_entry_points_and_no_plugin() -> None:
    """``import rlmetrics`` (and the names a plugin module uses) stay light: no OpenTelemetry
    SDK, no gRPC or prometheus_client, no ``importlib.metadata`` (entry points are read on
    first use), and no plugin distribution."""
    code = (
        "import sys, rlmetrics\n"
        "from rlmetrics import Kind, MetricSpec, OPEN, declare, hookimpl, record\n"
        "heavy = ('opentelemetry.sdk', 'grpc', 'prometheus_client', 'importlib.metadata',\n"
        "         'rlmetrics_')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_resource_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=rl,rlmetrics.run.id=from-env")
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    rlmetrics.declare("r", [MetricSpec("r.g", Kind.GAUGE, key="g")])
    with in_memory_telemetry(
        service_name="trainer", resource={"rl.algorithm": "grpo"}, service_version="1.2"
    ) as (handle, reader):
        rlmetrics.record("r", {"g": 1.0})
        resource = single(points(reader), "r.g").resource
    assert resource["service.name"] == "trainer"
    assert resource["service.version"] == "1.2"
    assert resource["team"] == "rl" and resource["rl.algorithm"] == "grpo"
    # The environment's run id beats SLURM's; an argument beats both.
    assert resource["rlmetrics.run.id"] == "from-env" == handle.run_id
    assert resource["telemetry.sdk.name"] == "opentelemetry"


@pytest.mark.parametrize(
    ("env", "kwargs", "service", "run_id"),
    [
        ({"SLURM_JOB_ID": "4242"}, {}, "rlmetrics", "4242"),
        (
            {"SLURM_JOB_ID": "4242", "OTEL_SERVICE_NAME": "from-env"},
            {"run_id": "arg"},
            "from-env",
            "arg",
        ),
        ({"OTEL_SERVICE_NAME": "from-env"}, {"service_name": "arg"}, "arg", None),
    ],
)
def test_service_name_and_run_id_precedence(
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    kwargs: dict[str, Any],
    service: str,
    run_id: str | None,
) -> None:
    for name in ("SLURM_JOB_ID", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with rlmetrics.start(**kwargs) as handle:
        assert handle.service_name == service
        if run_id is None:
            assert len(handle.run_id) == 12 and int(handle.run_id, 16) >= 0
        else:
            assert handle.run_id == run_id


def test_second_start_is_refused_while_running() -> None:
    with in_memory_telemetry() as (handle, _reader):
        with pytest.raises(TelemetryError, match="shut the running handle down first"):
            rlmetrics.start(service_name="again")
        assert rlmetrics.current() is handle
    with rlmetrics.start(service_name="after"):
        pass


def test_shutdown_is_idempotent_and_stops_exporting() -> None:
    rlmetrics.declare("s", [MetricSpec("s.g", Kind.GAUGE, key="g")])
    with in_memory_telemetry() as (handle, _reader):
        pass
    handle.shutdown()
    handle.shutdown(timeout_s=0.1)
    assert not handle.exporting and rlmetrics.current() is None
    rlmetrics.record("s", {"g": 1.0})  # a no-op now


def test_lifecycle_hooks_are_called() -> None:
    seen: list[tuple[str, bool]] = []

    class Lifecycle:
        @rlmetrics.hookimpl
        def telemetry_started(self, telemetry: Any) -> None:
            seen.append(("started", telemetry.exporting))

        @rlmetrics.hookimpl
        def telemetry_stopping(self, telemetry: Any) -> None:
            seen.append(("stopping", rlmetrics.is_exporting()))

    rlmetrics.plugins.register(Lifecycle(), "lifecycle")
    with in_memory_telemetry():
        pass
    assert seen == [("started", True), ("stopping", True)]


def test_a_telemetry_started_hook_that_hangs_is_named_while_start_waits_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hook runs on start()'s own thread (a plugin may install signal handlers there), so
    start() cannot leave it behind: past the bound it says which plugin it is waiting for."""
    monkeypatch.setattr(rlmetrics.hooks, "STARTED_HOOK_BOUND_S", 0.05)
    said: list[str] = []

    class Hanging:
        @rlmetrics.hookimpl
        def telemetry_started(self, telemetry: Any) -> None:
            # Hangs until start() has named it (at most 30 s).
            log.wait_for("did not return", timeout_s=30)
            said.extend(r.getMessage() for r in log.matching("did not return", logging.WARNING))

    rlmetrics.plugins.register(Hanging(), "hanging-sampler")
    with captured_log() as log, in_memory_telemetry():
        pass
    assert len(said) == 1
    assert "'telemetry_started' of plugin 'hanging-sampler'" in said[0]
    assert "rlmetrics.start() waits for it" in said[0]
    assert "RLMETRICS_DISABLE_PLUGINS" in said[0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"exporters": ["zipkin"]}, "unknown exporter"), ({"export_interval_s": 0}, "positive")],
)
def test_bad_arguments_fail_before_anything_starts(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rlmetrics.start(**kwargs)
    assert rlmetrics.current() is None


def test_console_exporter_runs_beside_the_in_memory_reader() -> None:
    # In a child process: the SDK's console exporter binds sys.stdout at its import.
    code = """
import rlmetrics
from rlmetrics import Kind, MetricSpec
from rlmetrics.testing import captured_log, in_memory_telemetry, points, single
rlmetrics.declare("c", [MetricSpec("c.g", Kind.GAUGE, key="g")])
with in_memory_telemetry(exporters=["console"], export_interval_s=60) as (handle, reader):
    rlmetrics.record("c", {"g": 4.0})
    print("in-memory", single(points(reader), "c.g").value)
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "in-memory 4.0" in out
    assert '"name": "c.g"' in out and '"value": 4.0' in out


class _BlockingReader:
    """A MetricReader whose flush and shutdown block for a minute (a wedged exporter)."""

    def __new__(cls) -> Any:
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        class Blocking(InMemoryMetricReader):
            released = threading.Event()
            #: Set when a blocked call returns: after the test released it, or after a minute.
            returned = threading.Event()

            def force_flush(self, *args: Any, **kwargs: Any) -> bool:
                self.released.wait(60)
                self.returned.set()
                return True

            def shutdown(self, *args: Any, **kwargs: Any) -> None:
                self.released.wait(60)
                self.returned.set()

        return Blocking()


@pytest.mark.parametrize("call", ["shutdown", "force_flush"])
def test_shutdown_and_force_flush_return_within_their_bound(call: str, caplog: Any) -> None:
    """The bound is rlmetrics' own: a reader that blocks longer than it holds neither call
    (the SDK's exporter timeouts never come into it: there is no exporter here)."""
    reader = _BlockingReader()
    handle = rlmetrics.start(readers=[reader])
    try:
        with caplog.at_level(logging.WARNING, logger="rlmetrics"):
            started = time.monotonic()
            getattr(handle, call)(timeout_s=1)
            took = time.monotonic() - started
        # The order of events, not the machine's speed: the call came back while the reader
        # was still blocked (it blocks a minute, until released below).
        assert not reader.returned.is_set(), f"{call} waited for the blocked reader"
        assert took >= 1.0, f"{call} gave up before its bound ({took:.2f} s)"
        assert f"telemetry {call} did not finish within 1.0 s" in caplog.text
        # A collector that answers late is as likely as none: the advice covers both.
        assert "or one that answers late" in caplog.text
    finally:
        reader.released.set()
        handle.shutdown(timeout_s=5)


def test_every_public_name_resolves_and_is_listed() -> None:
    for name in rlmetrics.__all__:
        getattr(rlmetrics, name)  # OPEN is None: resolving is what counts
    assert set(rlmetrics.__all__) == {"__version__", *rlmetrics._WHERE}  # type: ignore[attr-defined]


def test_no_bound_at_all_waits_for_the_export_and_raises_nothing(tmp_path: Any) -> None:
    """``timeout_s=math.inf`` is "as long as it takes" (a bound the waits take). Before,
    force_flush and shutdown raised OverflowError (inf turned into milliseconds), shutdown
    after marking telemetry closed: the spans still batched were never exported."""
    from rlmetrics.exporters.otlp_file import read_spans

    path = tmp_path / "spans.jsonl"
    handle = rlmetrics.start(exporters={"otlp_file": {"path": path}})
    with rlmetrics.step(1):
        pass
    handle.force_flush(timeout_s=math.inf)
    assert [span["name"] for _, span in read_spans(path)] == ["rl.step"]
    with rlmetrics.step(2):
        pass
    handle.shutdown(timeout_s=math.inf)
    assert rlmetrics.current() is None
    assert [span["name"] for _, span in read_spans(path)] == ["rl.step", "rl.step"]


@pytest.mark.parametrize("timeout_s", ["soon", -1, float("nan"), None])
def test_a_flush_bound_that_is_no_bound_is_said_and_the_flush_made(
    tmp_path: Any, timeout_s: Any
) -> None:
    """Before, ``force_flush(timeout_s=None)`` (or "soon", NaN) raised TypeError or
    ValueError into the caller, and -1 flushed nothing. Said once, as shutdown's is, and the
    default bound used."""
    from rlmetrics.exporters.otlp_file import read_spans
    from rlmetrics.testing import captured_log

    path = tmp_path / "spans.jsonl"
    with rlmetrics.start(exporters={"otlp_file": {"path": path}}) as handle:
        with rlmetrics.step(1):
            pass
        with captured_log() as log:
            handle.force_flush(timeout_s=timeout_s)
        assert [span["name"] for _, span in read_spans(path)] == ["rl.step"]
    (said,) = log.matching("force_flush()'s timeout_s must be a number of 0 or more")
    assert "the default bound" in said.getMessage()


@pytest.mark.parametrize("timeout_s", ["soon", -1, float("nan")])
def test_a_shutdown_bound_that_is_no_bound_is_said_and_what_is_left_is_exported(
    tmp_path: Any, timeout_s: Any
) -> None:
    """``shutdown(timeout_s="soon")`` raised a ValueError after marking telemetry closed: the
    spans still batched were never exported, unsaid. A bound that is no number of 0 or more
    is said once, and the default bound is used."""
    from rlmetrics.exporters.otlp_file import read_spans
    from rlmetrics.telemetry import DEFAULT_SHUTDOWN_TIMEOUT_S
    from rlmetrics.testing import captured_log

    path = tmp_path / "spans.jsonl"
    handle = rlmetrics.start(exporters={"otlp_file": {"path": path}})
    with rlmetrics.step(1):
        pass
    with captured_log() as log:
        handle.shutdown(timeout_s=timeout_s)
    assert rlmetrics.current() is None
    assert "rl.step" in [span["name"] for _, span in read_spans(path)]
    (said,) = log.matching("shutdown()'s timeout_s must be a number of 0 or more")
    assert f"the default bound ({DEFAULT_SHUTDOWN_TIMEOUT_S:g} s) is used" in said.getMessage()


_INTERRUPTED_AT_EXIT = """
import importlib, os, signal, sys, threading
import rlmetrics
from opentelemetry.sdk.trace import SpanProcessor
from rlmetrics.testing import main_thread_blocked_in, wait_until

class Stuck(SpanProcessor):
    # A span exporter whose last export never returns (a collector that stopped answering).
    def shutdown(self):
        threading.Event().wait()

signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
rlmetrics.start("interrupted", span_processors=[Stuck()])
shutting = importlib.import_module("rlmetrics.telemetry")._shutdown_at_exit

def interrupt():
    # The scheduler's second SIGTERM (or a second Ctrl-C) while the exit shuts telemetry down.
    wait_until(lambda: main_thread_blocked_in(shutting), 30, "the exit's shutdown")
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=interrupt, daemon=True).start()
"""


def test_an_interrupt_during_the_exits_shutdown_is_said_in_one_line() -> None:
    """A signal whose handler exits, taken while the interpreter's exit shuts telemetry down,
    ends that wait: said in one line, with no traceback out of rlmetrics' internals."""
    from rlmetrics.testing import run_to_exit

    status, err = run_to_exit(_INTERRUPTED_AT_EXIT, timeout_s=60)
    assert status == 0, err
    assert "Traceback" not in err, err
    assert "telemetry's shutdown at exit was interrupted (SystemExit)" in err, err


_SHUTDOWN_IN_HANDLER = """
import os, signal, sys
import rlmetrics
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

telemetry = rlmetrics.start(
    "handler",
    readers=[InMemoryMetricReader()],
    span_processors=[SimpleSpanProcessor(InMemorySpanExporter())],
)
logger = rlmetrics.Logger(backends={})

def on_sigterm(*_):
    telemetry.shutdown(timeout_s=10)  # what a SIGTERM handler does before exiting
    print("shut down", file=sys.stderr)

fired = []

def fire_inside_advance(frame, event, arg):
    # The SIGTERM lands while the loop's thread notes a new step (the liveness lock held).
    if event == "line" and frame.f_code.co_name == "advance" and not fired:
        if frame.f_code.co_filename.endswith("liveness.py") and "now" in frame.f_locals:
            fired.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
    return fire_inside_advance

signal.signal(signal.SIGTERM, on_sigterm)
with rlmetrics.step(0):
    logger.log_metrics({"reward": 1.0}, step=0, prefix="train")
with rlmetrics.step(1):  # still open when the handler shuts telemetry down
    sys.settrace(fire_inside_advance)
    logger.log_metrics({"reward": 1.0}, step=1, prefix="train")
"""


def test_a_sigterm_handler_that_shuts_telemetry_down_mid_step_exits() -> None:
    """A SIGTERM handler's ``telemetry.shutdown()`` while the loop's thread notes a new step
    (holding the liveness lock) ends the open step, whose summary notes a step too: it
    waited for that lock for ever, the job hung until its SIGKILL."""
    from rlmetrics.testing import run_to_exit

    status, err = run_to_exit(_SHUTDOWN_IN_HANDLER, timeout_s=30)
    assert status == 0, err
    assert "shut down" in err and "Traceback" not in err, err


_SHUTDOWN_SIGNAL_SCRIPT = """
import importlib, os, signal, sys
import rlmetrics
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

SOURCE = importlib.import_module("rlmetrics.telemetry").__file__
state = {"line": 0, "at": -1, "telemetry": None}

def on_sigterm(*_):
    state["at"] = -1  # once
    state["telemetry"].shutdown(failed=True, timeout_s=10)  # docs/troubleshooting.md's handler

def fire_at_line(frame, event, arg):
    # Sends the SIGTERM at the at-th line the loop's thread runs in telemetry.py's shutdown.
    if frame.f_code.co_filename != SOURCE:
        return None
    if event == "line":
        state["line"] += 1
        if state["line"] == state["at"]:
            os.kill(os.getpid(), signal.SIGTERM)
    return fire_at_line

signal.signal(signal.SIGTERM, on_sigterm)

def one_call(at):
    telemetry = rlmetrics.start(run_id="preempted", readers=[InMemoryMetricReader()])
    state.update(line=0, at=at, telemetry=telemetry)
    sys.settrace(fire_at_line)
    try:
        telemetry.shutdown(timeout_s=10)  # the end of the job, as the preemption comes
    finally:
        sys.settrace(None)
    return state["line"]

lines = one_call(-1)
for at in range(1, lines + 1):
    one_call(at)
print(lines, "lines", file=sys.stderr)
"""


def test_a_sigterm_handler_that_shuts_telemetry_down_returns_wherever_the_signal_lands() -> None:
    """The handler's ``telemetry.shutdown(failed=True)`` is run at every line of telemetry.py
    that the loop's own ``shutdown()`` runs: it returns each time. Landing while the loop's
    shutdown held the handle's lock (to mark it closed), it waited for that lock for ever:
    the job hung until its SIGKILL."""
    from rlmetrics.testing import run_to_exit

    status, err = run_to_exit(_SHUTDOWN_SIGNAL_SCRIPT, (), timeout_s=120)
    assert status == 0, err
    assert "lines" in err and "Traceback" not in err, err


_INTERRUPTED_START_SCRIPT = """
import os, signal, sys
import rlmetrics
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from rlmetrics import telemetry
from rlmetrics.backends import exit_status

SOURCES = {telemetry.__file__, exit_status.__file__}
state = {"line": 0, "at": -1}

def interrupt_at_line(frame, event, arg):
    # Sends SIGINT at the at-th line of start() and of exit_status.watch(), which take
    # locks; under a Python tracer (a debugger's, a notebook's) the KeyboardInterrupt can be
    # raised at any line, the end of a with block before its lock is released too.
    code = frame.f_code
    if code.co_filename not in SOURCES or code.co_name not in ("start", "watch"):
        return None
    if event == "line":
        state["line"] += 1
        if state["line"] == state["at"]:
            os.kill(os.getpid(), signal.SIGINT)
    return interrupt_at_line

def one_cell(at=-1):
    if rlmetrics.current() is not None:  # what the interrupted cell left running
        rlmetrics.current().shutdown(timeout_s=10)
    state.update(line=0, at=at)
    sys.settrace(interrupt_at_line)
    try:
        rlmetrics.start(run_id="cell", readers=[InMemoryMetricReader()])
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
    return state["line"]

lines = one_cell()
for at in range(1, lines + 1):
    one_cell(at)
    one_cell()  # the next cell
print(lines, "lines", file=sys.stderr)
"""


def test_telemetry_starts_again_after_a_start_interrupted_at_any_line() -> None:
    """A notebook's interrupt landing at any line of ``rlmetrics.start()`` or of the exit watch
    it starts leaves the next cell's shutdown and start working. A
    KeyboardInterrupt at the end of a ``with`` block before its lock's release (CPython's
    bpo-29988, under a tracer) left the start lock or the exit watch's held: the next
    ``start()`` waited for it for ever."""
    from rlmetrics.testing import run_to_exit

    status, err = run_to_exit(_INTERRUPTED_START_SCRIPT, (), timeout_s=300)
    assert status == 0, err
    assert "lines" in err and "Traceback" not in err, err


_INTERRUPTED_SHUTDOWN_SCRIPT = """
import os, signal, sys
import rlmetrics
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from rlmetrics import telemetry
from rlmetrics.registry import default_registry

SOURCE = telemetry.__file__
state = {"line": 0, "at": (), "fired": 0}

def in_shutdown(code):
    return code.co_filename == SOURCE and code.co_name in ("shutdown", "_shutdown")

def interrupt_at_line(frame, event, arg):
    # Sends SIGINT at the lines of shutdown() numbered in state["at"]; under a Python tracer
    # (a debugger's, a notebook's) the KeyboardInterrupt is raised at that line, before it runs.
    if not in_shutdown(frame.f_code):
        return None
    if event == "line":
        state["line"] += 1
        if state["line"] in state["at"]:
            state["fired"] += 1
            os.kill(os.getpid(), signal.SIGINT)
    return interrupt_at_line

def rearm(frame, event, arg):
    # An exception out of a tracer unsets it: for a second interrupt (pressed again, landing
    # in the finally the first one runs) the tracer is put back in the frames still running.
    if state["fired"] and sys.gettrace() is None:
        running = frame
        while running is not None:
            if in_shutdown(running.f_code):
                running.f_trace = interrupt_at_line
            running = running.f_back
        sys.settrace(interrupt_at_line)

def one_cell(at=()):
    handle = rlmetrics.current()
    if handle is not None:  # what the interrupted cell left running: the next cell stops it
        handle.shutdown(timeout_s=10)
    assert rlmetrics.current() is None, f"interrupts at {state['at']}: shutdown left it running"
    assert not default_registry().exporting, f"interrupts at {state['at']}: registry left bound"
    handle = rlmetrics.start(run_id="cell", readers=[InMemoryMetricReader()])
    state.update(line=0, at=at, fired=0)
    sys.setprofile(rearm)
    sys.settrace(interrupt_at_line)
    try:
        handle.shutdown(timeout_s=10)
    except KeyboardInterrupt:
        pass
    finally:
        sys.setprofile(None)  # first: it would put the tracer back
        sys.settrace(None)
    return state["line"]

lines = one_cell()
for first in range(1, lines + 1):
    for second in range(first + 1, first + 4):
        one_cell((first, second))
        one_cell()  # the next cell
print(lines, "lines", file=sys.stderr)
"""


def test_telemetry_shuts_down_and_starts_again_after_a_shutdown_interrupted_at_any_line() -> None:
    """A notebook's interrupt (under a tracer) landing at any line of ``shutdown()``, and a
    second one at any of the few lines after it (the ``finally`` the first runs), leaves the
    next cell's ``shutdown()`` and ``start()`` working. Landing just after the once-gate was
    taken (before its ``try:``), or twice in its ``finally``, left the gate taken and the handle
    current: every later shutdown returned at once and ``start()`` raised "called while
    telemetry is running" until the kernel restarted."""
    from rlmetrics.testing import run_to_exit

    status, err = run_to_exit(_INTERRUPTED_SHUTDOWN_SCRIPT, (), timeout_s=300)
    assert status == 0, err
    assert "lines" in err and "Traceback" not in err, err
