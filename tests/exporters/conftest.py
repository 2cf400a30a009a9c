"""Fixtures for the exporter tests: real peers on 127.0.0.1 (see ``_peers``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import rlmetrics
from rlmetrics.testing import BlackHole, CapturedLog, OtlpReceiver, captured_log


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
def rlmetrics_log() -> Iterator[CapturedLog]:
    """Everything the ``rlmetrics`` logger emits during the test, DEBUG included."""
    with captured_log() as log:
        yield log
