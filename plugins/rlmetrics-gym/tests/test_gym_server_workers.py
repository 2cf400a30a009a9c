"""A Gym server run by Uvicorn with 4 worker processes, under load from concurrent clients:
each worker's series are told apart by ``process.pid``, each worker's response count (and so
their sum) equals what the clients got from it, and every worker's in-flight count is back to 0
once the load stops."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections import Counter

from gym_support_uvicorn import uvicorn_workers
from rlmetrics_gym.server import IN_FLIGHT, RESPONSES, STATUS_ATTR

from rlmetrics.testing import wait_until
from rlmetrics.testing.peers import OtlpReceiver

WORKERS = 4
CLIENTS = 8
REQUESTS = 60  # per client, each on a new connection, so the kernel spreads them out


def _get_pid(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/pid", headers={"Connection": "close"})
        response = conn.getresponse()
        assert response.status == 200
        return int(json.loads(response.read())["pid"])
    finally:
        conn.close()


def _latest(receiver: OtlpReceiver, name: str) -> dict[int, float]:
    """The latest value of ``name`` (status 200 for the responses) per worker pid."""
    latest: dict[int, float] = {}
    for point in receiver.points():
        if point.name != name or point.resource.get("nemo.gym.server.name") != "math_with_judge":
            continue
        if name == RESPONSES and point.attributes.get(STATUS_ATTR) != 200:  # an int (semconv)
            continue
        latest[int(point.resource["process.pid"])] = point.value or 0
    return latest


def test_four_workers_under_load_count_apart_and_exactly() -> None:
    receiver = OtlpReceiver().start()
    try:
        with uvicorn_workers(WORKERS, receiver) as (port, _server):
            served: Counter[int] = Counter()  # every request answered, readiness probes too
            lock = threading.Lock()

            def request() -> None:
                pid = _get_pid(port)
                with lock:
                    served[pid] += 1

            probes = Counter[str]()  # readiness requests answered (counted in served too)

            def probe() -> None:
                try:
                    request()
                except OSError:
                    return
                with lock:
                    probes["answered"] += 1

            def up() -> bool:
                # A burst of concurrent requests, so that a second worker answers once it
                # listens: under load the first to import takes every request otherwise.
                burst = [threading.Thread(target=probe) for _ in range(CLIENTS)]
                for thread in burst:
                    thread.start()
                for thread in burst:
                    thread.join(60)
                return len(served) >= 2

            wait_until(up, 180, "two of the workers to answer")
            failures: list[BaseException] = []

            def client() -> None:
                try:
                    for _ in range(REQUESTS):
                        request()
                except BaseException as exc:  # reported below, not lost in the thread
                    failures.append(exc)

            clients = [threading.Thread(target=client) for _ in range(CLIENTS)]
            deadline = time.monotonic() + 120
            for thread in clients:
                thread.start()
            for thread in clients:
                thread.join(max(0.0, deadline - time.monotonic()))
            assert not failures, failures
            assert not any(thread.is_alive() for thread in clients)
            assert sum(served.values()) == CLIENTS * REQUESTS + probes["answered"]

            def settled() -> bool:
                counted = _latest(receiver, RESPONSES)
                in_flight = _latest(receiver, IN_FLIGHT)
                return all(counted.get(pid, 0) >= served[pid] for pid in served) and all(
                    in_flight.get(pid) == 0 for pid in served
                )

            wait_until(settled, 60, "every worker's counts to reach the receiver")
            # Each worker counted exactly the requests it answered, so the sum is exact too.
            assert _latest(receiver, RESPONSES) == dict(served)
            assert len(served) >= 2  # several workers, each told apart by its pid
            in_flight = _latest(receiver, IN_FLIGHT)
            assert {pid: in_flight[pid] for pid in served} == dict.fromkeys(served, 0)
    finally:
        receiver.stop()
