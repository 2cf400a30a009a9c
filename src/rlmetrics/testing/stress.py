"""A stress run: P processes x T threads recording as fast as they can, every process exporting
over OTLP gRPC to one :class:`~rlmetrics.testing.peers.OtlpReceiver` on 127.0.0.1, and the totals
the receiver got checked against the totals sent, exactly.

    python -m rlmetrics.testing.stress --processes 4 --threads 4 --seconds 2 --path record

The benchmark (``benchmarks/bench_stress.py``) runs it at every size and records the rates; the
test suite runs it small, so a lost event is a test failure. Each worker process is a fresh
interpreter (grpc's threads do not survive ``fork``) that starts telemetry, reports ready, waits
for the go, runs its threads for ``seconds`` (or ``limit`` events each, whichever comes first),
shuts telemetry down (the final export) and prints what it sent, as JSON.

The paths (each event is one call a training loop or a server makes):

- ``record``: ``rlmetrics.record(GROUP, {"events": 1})`` on one counter;
- ``record_in_span``: the same inside a span each thread keeps open (traces exported too), so
  every point goes to the SDK with its exemplar: what the deferred sums of a counter save;
- ``labelled``: the same with ``{"stress.thread": <thread>}``, one attribute set per thread;
- ``log_metrics``: ``Logger.log_metrics`` of a four-key dict whose ``events`` key a key map
  ties to a counter (the other keys teed as the training family's gauges);
- ``gym``: one outbound Gym request's counts (in flight +1, connect_total +1, in flight -1),
  exported by rlmetrics-gym's observable counters.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

__all__ = ["GROUP", "PATHS", "Outcome", "Sent", "received_totals", "run"]

GROUP = "stress"
EVENTS = "stress.events"
LABELLED = "stress.labelled"
LOGGED = "stress.logged"
THREAD_ATTR = "stress.thread"
PROCESS_ATTR = "stress.process"
GYM_CONNECTS = "gym.http.connection_pool.connect_total"
GYM_IN_FLIGHT = "gym.http.client.requests.in_flight"
PATHS = ("record", "record_in_span", "labelled", "log_metrics", "gym")
#: The series each path's events are counted in, as the receiver sees it.
SERIES = {
    "record": EVENTS,
    "record_in_span": EVENTS,
    "labelled": LABELLED,
    "log_metrics": LOGGED,
    "gym": GYM_CONNECTS,
}
#: How often a thread looks at the clock (events).
_CHECK_EVERY = 256


@attrs.frozen
class Sent:
    """What one worker process sent and what it cost."""

    process: int
    events: int
    started: float  # wall clock (time.time) when its threads were released
    ended: float  # when the last of them stopped
    cpu_s: float  # the process's user + system CPU seconds over that window
    shutdown_s: float  # the final export's wall time


@attrs.frozen
class Outcome:
    """One stress run: what was sent, what arrived, and the rates."""

    path: str
    processes: int
    threads: int
    sent: tuple[Sent, ...]
    received: dict[int, float]  # stress.process -> the total the receiver holds

    @property
    def events(self) -> int:
        return sum(s.events for s in self.sent)

    @property
    def lost(self) -> int:
        """Events sent and not received (negative: more received than sent)."""
        return self.events - int(sum(self.received.values()))

    @property
    def exact(self) -> bool:
        return all(self.received.get(s.process) == s.events for s in self.sent)

    @property
    def wall_s(self) -> float:
        return max(s.ended for s in self.sent) - min(s.started for s in self.sent)

    @property
    def cpu_s(self) -> float:
        return sum(s.cpu_s for s in self.sent)

    @property
    def per_second(self) -> float:
        return self.events / self.wall_s

    @property
    def per_cpu_second(self) -> float:
        return self.events / self.cpu_s


def received_totals(receiver: Any, path: str) -> dict[int, float]:
    """The total each process's counter reached at the receiver: counters are cumulative, so
    the largest value of each (process, attribute set) is its total; attribute sets add up."""
    name = SERIES[path]
    highest: dict[tuple[int, frozenset[tuple[str, Any]]], float] = {}
    for point in receiver.points():
        if point.name != name or PROCESS_ATTR not in point.resource:
            continue
        key = (int(point.resource[PROCESS_ATTR]), frozenset(point.attributes.items()))
        highest[key] = max(highest.get(key, 0), point.value or 0)
    totals: dict[int, float] = {}
    for (process, _attributes), value in highest.items():
        totals[process] = totals.get(process, 0) + value
    return totals


def run(
    path: str,
    processes: int,
    threads: int,
    seconds: float,
    *,
    limit: int | None = None,
    export_interval_s: float = 1.0,
    receiver: Any = None,
    python: str = sys.executable,
    timeout_s: float = 600.0,
) -> Outcome:
    """Run ``processes`` x ``threads`` on ``path`` for ``seconds`` (at most ``limit`` events a
    thread), exporting to ``receiver`` (one is started and stopped here when None)."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, not {path!r}")
    from .peers import OtlpReceiver

    own = receiver is None
    if own:
        receiver = OtlpReceiver().start()
    workers: list[subprocess.Popen[str]] = []
    try:
        deadline = time.monotonic() + timeout_s
        for index in range(processes):
            workers.append(
                subprocess.Popen(
                    [
                        python,
                        "-m",
                        "rlmetrics.testing.stress",
                        "--worker",
                        str(index),
                        "--path",
                        path,
                        "--threads",
                        str(threads),
                        "--seconds",
                        str(seconds),
                        "--limit",
                        str(limit or 0),
                        "--interval",
                        str(export_interval_s),
                        "--endpoint",
                        receiver.endpoint,
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for worker in workers:  # every process has started telemetry before any records
            line = _readline(worker, deadline)
            if line.strip() != "ready":
                raise RuntimeError(f"a stress worker did not start: {line!r}")
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        sent = [Sent(**json.loads(_readline(worker, deadline))) for worker in workers]
        for worker in workers:
            worker.wait(max(1.0, deadline - time.monotonic()))
        return Outcome(path, processes, threads, tuple(sent), received_totals(receiver, path))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        if own:
            receiver.stop()


def _readline(worker: subprocess.Popen[str], deadline: float) -> str:
    """The worker's next line, or an error once the run's time is out."""
    assert worker.stdout is not None
    got: list[str] = []
    stdout = worker.stdout
    reader = threading.Thread(target=lambda: got.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(max(0.0, deadline - time.monotonic()))
    if not got or not got[0]:
        raise RuntimeError(
            f"stress worker {worker.pid} said nothing in time (exit {worker.poll()})"
        )
    return got[0]


# -- the worker process ----------------------------------------------------------------------------


def _event(path: str, thread: int) -> Callable[[], None]:
    """One event of ``path``, as a call."""
    import rlmetrics

    if path in ("record", "record_in_span"):
        values = {"events": 1}
        record = rlmetrics.record
        return lambda: record(GROUP, values)
    if path == "labelled":
        values, attributes = {"labelled": 1}, {THREAD_ATTR: str(thread)}
        record = rlmetrics.record
        return lambda: record(GROUP, values, attributes)
    if path == "log_metrics":
        from rlmetrics.keymaps import KeyMap, KeyRule

        key_map = KeyMap("stress", [KeyRule("events", series=LOGGED)])
        logger = rlmetrics.Logger(backends={}, key_map=key_map)
        step = [0]
        metrics = {"events": 1, "loss": 0.25, "reward": 0.5, "grad_norm": 1.0}

        def log() -> None:
            step[0] += 1
            logger.log_metrics(metrics, step=step[0], prefix="train")

        return log
    from rlmetrics_gym import http_client

    in_flight, connects = http_client._in_flight, http_client._connects
    destination = http_client.destination_value("policy_model")

    def request() -> None:
        in_flight.add(destination)
        connects.add(destination)
        in_flight.add(destination, -1)

    return request


def _thread(
    path: str, index: int, seconds: float, limit: int, gate: threading.Event, out: list[int]
) -> None:
    event = _event(path, index)
    gate.wait()
    with _span(path):
        stop = time.monotonic() + seconds
        count = 0
        while count < limit:
            for _ in range(_CHECK_EVERY):
                event()
            count += _CHECK_EVERY
            if time.monotonic() >= stop:
                break
    out[index] = count


def _span(path: str) -> Any:
    """A span around a thread's events on the ``record_in_span`` path, else nothing."""
    import contextlib

    import rlmetrics

    telemetry = rlmetrics.current()
    provider = None if telemetry is None else telemetry.tracer_provider
    if path != "record_in_span" or provider is None:
        return contextlib.nullcontext()
    return provider.get_tracer("rlmetrics-stress").start_as_current_span("stress")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", type=int, required=True)
    parser.add_argument("--path", choices=PATHS, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--endpoint", required=True)
    args = parser.parse_args(argv)
    import rlmetrics
    from rlmetrics import Kind, MetricSpec

    rlmetrics.declare(
        GROUP,
        [
            MetricSpec(EVENTS, Kind.COUNTER, unit="{event}", key="events"),
            MetricSpec(
                LABELLED,
                Kind.COUNTER,
                unit="{event}",
                key="labelled",
                attributes={THREAD_ATTR: None},
                max_series=1000,
            ),
            MetricSpec(LOGGED, Kind.COUNTER, unit="{event}", key=LOGGED),
        ],
    )
    telemetry = rlmetrics.start(
        "rlmetrics-stress",
        exporters={"otlp": {"endpoint": args.endpoint}},
        export_interval_s=args.interval,
        resource={PROCESS_ATTR: str(args.worker)},
        traces=args.path == "record_in_span",
    )
    limit = args.limit or sys.maxsize
    gate = threading.Event()
    counts = [0] * args.threads
    threads = [
        threading.Thread(
            target=_thread, args=(args.path, i, args.seconds, limit, gate, counts), daemon=True
        )
        for i in range(args.threads)
    ]
    for thread in threads:
        thread.start()
    print("ready", flush=True)
    sys.stdin.readline()  # the go: every process is started
    cpu, started = _cpu(), time.time()
    gate.set()
    for thread in threads:
        thread.join()
    ended, cpu = time.time(), _cpu() - cpu
    # Bound the final export generously: a loaded machine may take seconds, and what it
    # could not send would count as lost.
    telemetry.shutdown(timeout_s=120.0)
    shutdown_s = time.time() - ended
    sent = Sent(args.worker, sum(counts), started, ended, cpu, shutdown_s)
    print(json.dumps(attrs.asdict(sent)), flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--worker" in argv:
        worker(argv)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=PATHS, default="record")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    outcome = run(args.path, args.processes, args.threads, args.seconds)
    print(
        f"{outcome.path} {outcome.processes}x{outcome.threads}: {outcome.events} events, "
        f"{outcome.lost} lost, {outcome.per_second:,.0f}/s, "
        f"{outcome.per_cpu_second:,.0f} per CPU-second"
    )


if __name__ == "__main__":
    main()
