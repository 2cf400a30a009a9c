"""Fixtures for the exporter tests: real peers on 127.0.0.1 (see ``_peers``)."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import rlmetrics

from ._peers import (
    REQUIRE_PROMETHEUS_ENV,
    BlackHole,
    OtlpReceiver,
    PrometheusServer,
    WarnOnceLog,
    _ListHandler,
)


def _stop_telemetry() -> None:
    """Telemetry still pointing at a peer must stop before the peer does, or the test's
    teardown would wait on a dead collector."""
    handle = rlmetrics.current()
    if handle is not None:
        handle.shutdown(timeout_s=2)


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    try:
        yield receiver
    finally:
        _stop_telemetry()
        receiver.stop()


@pytest.fixture
def dead_endpoint() -> Iterator[OtlpReceiver]:
    """A receiver that is not running: its port is closed until the test calls ``start()``."""
    receiver = OtlpReceiver().start()
    receiver.stop()
    try:
        yield receiver
    finally:
        _stop_telemetry()
        receiver.stop()


@pytest.fixture
def blackhole() -> Iterator[BlackHole]:
    """A collector address that accepts TCP and never answers (RPCs hang to their deadline)."""
    hole = BlackHole()
    try:
        yield hole
    finally:
        _stop_telemetry()
        hole.close()


@pytest.fixture
def rlmetrics_log() -> Iterator[WarnOnceLog]:
    """Everything the ``rlmetrics`` logger emits during the test, DEBUG included."""
    log = WarnOnceLog()
    handler = _ListHandler(log)
    logger = logging.getLogger("rlmetrics")
    saved = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield log
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)


@pytest.fixture
def prometheus_server(tmp_path: Path) -> Iterator[Callable[[tuple[str, int]], PrometheusServer]]:
    """A factory: ``prometheus_server((host, port))`` starts a server scraping that target.

    Skips when the ``prometheus`` binary is missing, unless ``RLMETRICS_REQUIRE_PROMETHEUS=1``
    (CI installs it and sets that), in which case the test fails.
    """
    binary = shutil.which("prometheus")
    if binary is None:
        reason = (
            "the 'prometheus' server binary is not on PATH (Debian: apt-get install -y "
            "--no-install-recommends prometheus)"
        )
        if os.environ.get(REQUIRE_PROMETHEUS_ENV) == "1":
            pytest.fail(f"{REQUIRE_PROMETHEUS_ENV}=1 but {reason}")
        pytest.skip(reason)
    started: list[PrometheusServer] = []

    def start(target: tuple[str, int]) -> PrometheusServer:
        workdir = tmp_path / f"prometheus-{len(started)}"
        workdir.mkdir()
        server = PrometheusServer(binary, workdir)
        started.append(server)
        return server.start(target)

    try:
        yield start
    finally:
        for server in started:
            server.stop()
