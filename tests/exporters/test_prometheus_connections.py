"""The Prometheus endpoint (``/metrics`` and ``/health``) bounds what a local client can make
the training process hold: a few handler threads at most, a bounded queue of connections
waiting for one, and an idle timeout; real sockets on 127.0.0.1, the process's threads
counted, every wait bounded."""

from __future__ import annotations

import contextlib
import socket
import threading
import urllib.request
from collections.abc import Iterator

import pytest

import rlmetrics
from rlmetrics.exporters import prometheus
from rlmetrics.testing import wait_until

IDLE = 50


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (reading returns end-of-file, or a reset)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def _scrape(address: tuple[str, int], path: str = "/metrics") -> int:
    with urllib.request.urlopen(f"http://{address[0]}:{address[1]}{path}", timeout=10) as answer:
        answer.read()
        return int(answer.status)


@contextlib.contextmanager
def _idle_connections(address: tuple[str, int], count: int) -> Iterator[list[socket.socket]]:
    sockets = []
    try:
        for _ in range(count):
            sockets.append(socket.create_connection(address, timeout=5))
        yield sockets
    finally:
        for sock in sockets:
            sock.close()


@pytest.fixture
def short_idle_timeout(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(prometheus, "IDLE_TIMEOUT_S", 1.0)
    return 1.0


def test_idle_connections_add_a_bounded_number_of_threads_and_time_out(
    short_idle_timeout: float,
) -> None:
    with rlmetrics.start(exporters=["prometheus"], prometheus_port=0) as handle:
        address = handle.prometheus_address
        assert address is not None
        assert _scrape(address) == 200
        before = threading.active_count()
        with _idle_connections(address, IDLE) as sockets:
            # Beyond the handler threads and the waiting queue, a connection is closed at
            # once: the server has taken every one of them when that many are closed.
            refused = IDLE - prometheus.MAX_HANDLERS - prometheus.MAX_WAITING
            wait_until(
                lambda: sum(map(_closed_by_server, sockets)) >= refused,
                10,
                "the connections beyond the bound closed",
            )
            assert threading.active_count() - before <= prometheus.MAX_HANDLERS
            # An idle connection is closed after the idle timeout, queued or not.
            wait_until(
                lambda: all(map(_closed_by_server, sockets)),
                10 * short_idle_timeout + 10,
                "every idle connection closed",
            )
            assert threading.active_count() - before <= prometheus.MAX_HANDLERS
            assert _scrape(address) == 200
            assert _scrape(address, "/health") == 200
    # Its handler threads end with the endpoint.
    wait_until(
        lambda: not [t for t in threading.enumerate() if t.name.startswith("rlmetrics-prom")],
        10,
        "the endpoint's threads gone",
    )


def test_a_scrape_is_answered_while_idle_clients_hold_connections() -> None:
    """Fewer idle clients than the bound: a scrape still gets a handler at once."""
    with rlmetrics.start(exporters=["prometheus"], prometheus_port=0) as handle:
        address = handle.prometheus_address
        assert address is not None
        with _idle_connections(address, prometheus.MAX_HANDLERS - 1):
            assert _scrape(address) == 200
            assert _scrape(address, "/health") == 200
