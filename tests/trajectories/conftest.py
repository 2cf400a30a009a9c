"""Fixtures for the trajectory tests: a real OTLP receiver on 127.0.0.1, and every message the
``rlmetrics`` logger emits."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

import rlmetrics
from rlmetrics.testing import OtlpReceiver


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    pytest.importorskip("grpc", reason="the OTLP receiver needs grpcio")
    receiver = OtlpReceiver().start()
    try:
        yield receiver
    finally:
        handle = rlmetrics.current()
        if handle is not None:  # stop exporting before the receiver goes away
            handle.shutdown(timeout_s=2)
        receiver.stop()


@pytest.fixture
def warnings_seen(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The ``rlmetrics`` logger's WARNINGs, captured."""
    caplog.set_level(logging.WARNING, logger="rlmetrics")
    yield caplog
